// RUN: flashc-opt %s -split-input-file -flash-fold-backward-scale | FileCheck %s
// RUN: flashc-opt %s -split-input-file -flash-fold-backward-scale -flash-fold-backward-scale | FileCheck %s

// Scores reach recompute_probs through masks only: the dot computes raw
// Q·Kᵀ and the probabilities take its scale (0.25). The dQ and dK scales
// are the gradient ops' own and stay.

// CHECK-LABEL: flash.backward_kernel @masks_only
// CHECK:       flash.qk_dot {{.*}} {scale = 1.000000e+00 : f32}
// CHECK:       flash.recompute_probs {{.*}} {score_scale = 2.500000e-01 : f32}
// CHECK:       flash.query_grad_add {{.*}} {scale = 2.500000e-01 : f32}
// CHECK:       flash.store_key_grads {{.*}} {key_scale = 2.500000e-01 : f32}
flash.backward_kernel @masks_only attributes {
    config = #flash.tile<br = 32, bc = 16, head_dim = 16>, element_type = bf16,
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %k = flash.load_kv key %b, %hkv, %kt : tensor<16x16xbf16>
  %v = flash.load_kv value %b, %hkv, %kt : tensor<16x16xbf16>
  %qt = arith.constant 0 : index
  %mlen = flash.dim key_len : index
  %zero = arith.constant dense<0.0> : tensor<16x16xf32>
  %q = flash.load_q %b, %hkv, %qt : tensor<32x16xbf16>
  %do = flash.load_rows output_grad %b, %hkv, %qt : tensor<32x16xbf16>
  %lse = flash.load_row_stat lse %b, %hkv, %qt : tensor<32xf32>
  %delta = flash.load_row_stat delta %b, %hkv, %qt : tensor<32xf32>
  %s = flash.qk_dot %q, %k {scale = 0.25 : f32} : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  %sm = flash.mask %s at (%b, %hkv, %qt, %kt) : tensor<32x16xf32> {
  ^bb0(%bb: i32, %hh: i32, %i: i32, %j: i32):
    %c = arith.cmpi sle, %j, %i : i32
    flash.yield %c : i1
  }
  %sb = flash.mask_key_bounds %sm, %kt, %mlen : tensor<32x16xf32>
  %p = flash.recompute_probs %sb, %lse : tensor<32x16xf32>, tensor<32xf32>
  %dp = flash.output_grad_dot %do, %v : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  %ds = flash.softmax_grad %p, %dp, %delta : tensor<32x16xf32>, tensor<32xf32>
  %dv = flash.accumulate_transposed %zero, %p, %do : tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xbf16>
  %dk = flash.accumulate_transposed %zero, %ds, %q : tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xbf16>
  flash.query_grad_add %ds, %k at (%b, %hkv, %qt) {scale = 0.25 : f32} : tensor<32x16xf32>, tensor<16x16xbf16>
  flash.store_key_grads %dk, %dv at (%b, %hkv, %kt) {key_scale = 0.25 : f32} : tensor<16x16xf32>
}

// -----

// A score modification reads the scaled scores (and its gradient reads
// them again): nothing moves.

// CHECK-LABEL: flash.backward_kernel @with_score_mod
// CHECK:       flash.qk_dot {{.*}} {scale = 2.500000e-01 : f32}
// CHECK:       flash.recompute_probs {{[^{]*}}: tensor<32x16xf32>, tensor<32xf32>
flash.backward_kernel @with_score_mod attributes {
    config = #flash.tile<br = 32, bc = 16, head_dim = 16>, element_type = bf16,
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %k = flash.load_kv key %b, %hkv, %kt : tensor<16x16xbf16>
  %qt = arith.constant 0 : index
  %q = flash.load_q %b, %hkv, %qt : tensor<32x16xbf16>
  %lse = flash.load_row_stat lse %b, %hkv, %qt : tensor<32xf32>
  %s = flash.qk_dot %q, %k {scale = 0.25 : f32} : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  %z = flash.score_mod %s at (%b, %hkv, %qt, %kt) : tensor<32x16xf32> {
  ^bb0(%x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    %t = math.tanh %x : f32
    flash.yield %t : f32
  }
  %p = flash.recompute_probs %z, %lse : tensor<32x16xf32>, tensor<32xf32>
}

// -----

// A zero scale (scores all equal) is left in the dot.

// CHECK-LABEL: flash.backward_kernel @zero_scale
// CHECK:       flash.qk_dot {{.*}} {scale = 0.000000e+00 : f32}
// CHECK:       flash.recompute_probs {{[^{]*}}: tensor<32x16xf32>, tensor<32xf32>
flash.backward_kernel @zero_scale attributes {
    config = #flash.tile<br = 32, bc = 16, head_dim = 16>, element_type = bf16,
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
^bb0(%b: index, %h: index, %qt: index):
} main {
^bb0(%b: index, %hkv: index, %kt: index):
  %k = flash.load_kv key %b, %hkv, %kt : tensor<16x16xbf16>
  %qt = arith.constant 0 : index
  %q = flash.load_q %b, %hkv, %qt : tensor<32x16xbf16>
  %lse = flash.load_row_stat lse %b, %hkv, %qt : tensor<32xf32>
  %s = flash.qk_dot %q, %k {scale = 0.0 : f32} : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  %p = flash.recompute_probs %s, %lse : tensor<32x16xf32>, tensor<32xf32>
}
