// RUN: flashc-opt %s -split-input-file -verify-diagnostics

// One case per rule of the backward ops' verifiers (FlashOps.cpp, "Backward pass").

// expected-error @+1 {{'flash.backward_kernel' op preprocess must take three index arguments (batch, head, query tile)}}
flash.backward_kernel @bad_pre_args attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

// expected-error @+1 {{'flash.backward_kernel' op main must take three index arguments (batch, kv head, key tile)}}
flash.backward_kernel @bad_main_args attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: i32, %kt: index):
}

// -----

// expected-error @+1 {{'flash.backward_kernel' op element type must be bf16, f16 or f32, got 'f64'}}
flash.backward_kernel @bad_element attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = f64, static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

flash.backward_kernel @rows_shape attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{'flash.load_rows' op row tile must be 32x16 (Br x D of the kernel's #flash.tile), got 16x16}}
  %o = flash.load_rows output %b, %h, %qt : tensor<16x16xbf16>
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

flash.backward_kernel @rows_type attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{'flash.load_rows' op tile element type 'f16' differs from the kernel's element type 'bf16'}}
  %o = flash.load_rows output %b, %h, %qt : tensor<32x16xf16>
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

flash.backward_kernel @stat_rows attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  // expected-error @+1 {{'flash.load_row_stat' op row statistic must be 32 (one entry per query row), got 16}}
  %l = flash.load_row_stat lse %b, %hkv, %kt : tensor<16xf32>
}

// -----

flash.backward_kernel @row_dot_rows attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
  %o = arith.constant dense<1.0> : tensor<16x16xbf16>
  // expected-error @+1 {{'flash.row_dot' op row tile must be 32x16 (Br x D of the kernel's #flash.tile), got 16x16}}
  %d = flash.row_dot %o, %o : tensor<16x16xbf16> -> tensor<16xf32>
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

flash.backward_kernel @delta_region attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %d = arith.constant dense<1.0> : tensor<32xf32>
  // expected-error @+1 {{'flash.store_delta' op belongs in the preprocess region of flash.backward_kernel}}
  flash.store_delta %d at (%b, %hkv, %kt) : tensor<32xf32>
}

// -----

flash.backward_kernel @key_grads_region attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
  %a = arith.constant dense<1.0> : tensor<16x16xf32>
  // expected-error @+1 {{'flash.store_key_grads' op belongs in the main region of flash.backward_kernel}}
  flash.store_key_grads %a, %a at (%b, %h, %qt) {key_scale = 1.0 : f32} : tensor<16x16xf32>
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

flash.backward_kernel @key_grads_shape attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %a = arith.constant dense<1.0> : tensor<32x16xf32>
  // expected-error @+1 {{'flash.store_key_grads' op key gradient must be 16x16 (Bc x D of the kernel's #flash.tile), got 32x16}}
  flash.store_key_grads %a, %a at (%b, %hkv, %kt) {key_scale = 1.0 : f32} : tensor<32x16xf32>
}

// -----

flash.backward_kernel @key_scale attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %a = arith.constant dense<1.0> : tensor<16x16xf32>
  // expected-error @+1 {{'flash.store_key_grads' op key_scale must be positive}}
  flash.store_key_grads %a, %a at (%b, %hkv, %kt) {key_scale = 0.0 : f32} : tensor<16x16xf32>
}

// -----

flash.backward_kernel @query_grad_cols attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %ds = arith.constant dense<1.0> : tensor<32x8xf32>
  %k = flash.load_kv key %b, %hkv, %kt : tensor<16x16xbf16>
  // expected-error @+1 {{'flash.query_grad_add' op key block must be 8x16 (score-gradient columns x head dim), got 16x16}}
  flash.query_grad_add %ds, %k at (%b, %hkv, %kt) {scale = 1.0 : f32} : tensor<32x8xf32>, tensor<16x16xbf16>
}

// -----

flash.backward_kernel @query_grad_tile attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %ds = arith.constant dense<1.0> : tensor<16x16xf32>
  %k = flash.load_kv key %b, %hkv, %kt : tensor<16x16xbf16>
  // expected-error @+1 {{'flash.query_grad_add' op score gradient must be 32x16 (Br x Bc of the kernel's #flash.tile), got 16x16}}
  flash.query_grad_add %ds, %k at (%b, %hkv, %kt) {scale = 1.0 : f32} : tensor<16x16xf32>, tensor<16x16xbf16>
}

// -----

flash.backward_kernel @probs_lse attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %s = arith.constant dense<1.0> : tensor<32x16xf32>
  %l = arith.constant dense<1.0> : tensor<16xf32>
  // expected-error @+1 {{'flash.recompute_probs' op lse must be 32 (one entry per query row), got 16}}
  %p = flash.recompute_probs %s, %l : tensor<32x16xf32>, tensor<16xf32>
}

// -----

flash.backward_kernel @probs_scale attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %s = arith.constant dense<1.0> : tensor<32x16xf32>
  %l = arith.constant dense<1.0> : tensor<32xf32>
  // expected-error @+1 {{'flash.recompute_probs' op score_scale must be positive and finite, got -5.000000e-01}}
  %p = flash.recompute_probs %s, %l {score_scale = -0.5 : f32} : tensor<32x16xf32>, tensor<32xf32>
}

// -----

flash.backward_kernel @dp_dims attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %do = arith.constant dense<1.0> : tensor<32x8xbf16>
  %v = flash.load_kv value %b, %hkv, %kt : tensor<16x16xbf16>
  // expected-error @+1 {{'flash.output_grad_dot' op output-gradient head dim 8 differs from value head dim 16}}
  %dp = flash.output_grad_dot %do, %v : tensor<32x8xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
}

// -----

flash.backward_kernel @dp_types attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %do = arith.constant dense<1.0> : tensor<32x16xf16>
  %v = flash.load_kv value %b, %hkv, %kt : tensor<16x16xbf16>
  // expected-error @+1 {{'flash.output_grad_dot' op output-gradient and value element types differ}}
  %dp = flash.output_grad_dot %do, %v : tensor<32x16xf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
}

// -----

flash.backward_kernel @dp_result attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %do = arith.constant dense<1.0> : tensor<32x16xbf16>
  %v = flash.load_kv value %b, %hkv, %kt : tensor<16x16xbf16>
  // expected-error @+1 {{'flash.output_grad_dot' op result must be 32x16 (output-gradient rows x value rows), got 32x32}}
  %dp = flash.output_grad_dot %do, %v : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x32xf32>
}

// -----

flash.backward_kernel @softmax_grad_delta attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %p = arith.constant dense<1.0> : tensor<32x16xf32>
  %d = arith.constant dense<1.0> : tensor<16xf32>
  // expected-error @+1 {{'flash.softmax_grad' op delta must be 32 (one entry per query row), got 16}}
  %z = flash.softmax_grad %p, %p, %d : tensor<32x16xf32>, tensor<16xf32>
}

// -----

flash.backward_kernel @grad_region_args attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %p = arith.constant dense<1.0> : tensor<32x16xf32>
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'flash.score_mod_grad' op region must take (g, s: f32, b, h, i, j: i32)}}
  %z = flash.score_mod_grad %p, %p at (%b, %hkv, %c0, %kt) : tensor<32x16xf32> {
  ^bb0(%g: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    flash.yield %g : f32
  }
}

// -----

flash.backward_kernel @grad_region_yield attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %p = arith.constant dense<1.0> : tensor<32x16xf32>
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'flash.score_mod_grad' op region must end with flash.yield of an f32}}
  %z = flash.score_mod_grad %p, %p at (%b, %hkv, %c0, %kt) : tensor<32x16xf32> {
  ^bb0(%g: f32, %x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    %c = arith.cmpi sle, %j, %i : i32
    flash.yield %c : i1
  }
}

// -----

flash.backward_kernel @grad_undeclared attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %p = arith.constant dense<1.0> : tensor<32x16xf32>
  %c0 = arith.constant 0 : index
  %z = flash.score_mod_grad %p, %p at (%b, %hkv, %c0, %kt) : tensor<32x16xf32> {
  ^bb0(%g: f32, %x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    // expected-error @+1 {{'flash.aux_grad_add' op adds into undeclared tensor 'nope'}}
    flash.aux_grad_add "nope"[%hh, %i] %g : f32
    flash.yield %g : f32
  }
}

// -----

flash.backward_kernel @grad_int_tensor attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %p = arith.constant dense<1.0> : tensor<32x16xf32>
  %c0 = arith.constant 0 : index
  %z = flash.score_mod_grad %p, %p at (%b, %hkv, %c0, %kt) : tensor<32x16xf32> {
  ^bb0(%g: f32, %x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    // expected-error @+1 {{'flash.aux_grad_add' op tensor 'doc' is an integer tensor and has no gradient}}
    flash.aux_grad_add "doc"[%bb, %i] %g : f32
    flash.yield %g : f32
  }
}

// -----

flash.backward_kernel @grad_rank attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %p = arith.constant dense<1.0> : tensor<32x16xf32>
  %c0 = arith.constant 0 : index
  %z = flash.score_mod_grad %p, %p at (%b, %hkv, %c0, %kt) : tensor<32x16xf32> {
  ^bb0(%g: f32, %x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    // expected-error @+1 {{'flash.aux_grad_add' op tensor 'bias' has rank 2 but is indexed with 1 indices}}
    flash.aux_grad_add "bias"[%hh] %g : f32
    flash.yield %g : f32
  }
}

// -----

flash.backward_kernel @acc_transposed attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %a = arith.constant dense<1.0> : tensor<16x16xf32>
  %x = arith.constant dense<1.0> : tensor<32x8xf32>
  %r = arith.constant dense<1.0> : tensor<32x16xbf16>
  // expected-error @+1 {{'flash.accumulate_transposed' op transposed operand must be 32x16 (row-tile rows x accumulator rows), got 32x8}}
  %y = flash.accumulate_transposed %a, %x, %r : tensor<16x16xf32>, tensor<32x8xf32>, tensor<32x16xbf16>
}

// -----

flash.backward_kernel @acc_rows attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %a = arith.constant dense<1.0> : tensor<16x16xf32>
  %x = arith.constant dense<1.0> : tensor<32x16xf32>
  %r = arith.constant dense<1.0> : tensor<24x16xbf16>
  // expected-error @+1 {{'flash.accumulate_transposed' op transposed operand must be 24x16 (row-tile rows x accumulator rows), got 32x16}}
  %y = flash.accumulate_transposed %a, %x, %r : tensor<16x16xf32>, tensor<32x16xf32>, tensor<24x16xbf16>
}

// -----

flash.backward_kernel @acc_config attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %a = arith.constant dense<1.0> : tensor<8x16xf32>
  %x = arith.constant dense<1.0> : tensor<32x8xf32>
  %r = arith.constant dense<1.0> : tensor<32x16xbf16>
  // expected-error @+1 {{'flash.accumulate_transposed' op accumulator must be 16x16 (Bc x D of the kernel's #flash.tile), got 8x16}}
  %y = flash.accumulate_transposed %a, %x, %r : tensor<8x16xf32>, tensor<32x8xf32>, tensor<32x16xbf16>
}

// -----

flash.backward_kernel @acc_type attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>, #flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %a = arith.constant dense<1.0> : tensor<16x16xf32>
  %x = arith.constant dense<1.0> : tensor<32x16xf32>
  %r = arith.constant dense<1.0> : tensor<32x16xf16>
  // expected-error @+1 {{'flash.accumulate_transposed' op tile element type 'f16' differs from the kernel's element type 'bf16'}}
  %y = flash.accumulate_transposed %a, %x, %r : tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xf16>
}

// -----

// expected-error @+1 {{'flash.backward_kernel' op ordered_query_grads applies to kernels without aux tensors (their gradients would need the deterministic mode's fixed-point scratch)}}
flash.backward_kernel @ordered_with_tensors attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, ordered_query_grads} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}

// -----

// expected-error @+1 {{'flash.backward_kernel' op query_grad_writer and ordered_query_grads exclude each other (the order takes the writer already)}}
flash.backward_kernel @writer_and_ordered attributes {config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, ordered_query_grads, query_grad_writer} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
}
