// RUN: flashc-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{tile sizes must be positive, got br = 0, bc = 64, head_dim = 64}}
flash.kernel @bad_tile attributes {config = #flash.tile<br = 0, bc = 64, head_dim = 64>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{'flash.kernel' op element type must be bf16, f16 or f32, got 'f64'}}
flash.kernel @bad_element attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f64, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{static_sizes and dim_classes need one entry per dimension role (6)}}
flash.kernel @short_sizes attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{dim_classes entry 3 must name the smallest role of its class}}
flash.kernel @bad_class attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 4, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{head dim fixed to 128 but the tile config says 64}}
flash.kernel @head_dim_conflict attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 64>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, 128>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{duplicate declaration 'x'}}
flash.kernel @duplicate attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, params = [#flash.param<"x" = 1 : i32>],
    tensors = [#flash.aux_tensor<"x" : f32 [heads]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+2 {{parameter 'x' must have an i32 or f32 default, got 'i64'}}
flash.kernel @bad_param attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, params = [#flash.param<"x" = 1 : i64>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+2 {{aux tensor 't' must have rank 1 to 4, got 5}}
flash.kernel @bad_rank attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, tensors = [#flash.aux_tensor<"t" : f32 [batch, heads, 1, 2, 3]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

flash.kernel @bad_extent attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32,
    // expected-error @+1 {{expected a dimension role or a size, got 'rows'}}
    tensors = [#flash.aux_tensor<"t" : f32 [rows]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{body must take three index arguments (batch, head, query tile)}}
flash.kernel @bad_args attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index):
}

// -----

flash.kernel @load_q_shape attributes {config = #flash.tile<br = 16, bc = 32, head_dim = 64>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{query tile must be 16x64 (Br x D of the kernel's #flash.tile), got 32x64}}
  %q = flash.load_q %b, %h, %qt : tensor<32x64xbf16>
}

// -----

flash.kernel @load_kv_shape attributes {config = #flash.tile<br = 16, bc = 32, head_dim = 64>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{key/value block must be 32x64 (Bc x D of the kernel's #flash.tile), got 16x64}}
  %k = flash.load_kv key %b, %h, %qt : tensor<16x64xbf16>
}

// -----

flash.kernel @load_element attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{tile element type 'f16' differs from the kernel's element type 'bf16'}}
  %q = flash.load_q %b, %h, %qt : tensor<16x16xf16>
}

// -----

func.func private @dot_inner_dims(%q: tensor<16x16xf32>, %k: tensor<16x32xf32>) {
  // expected-error @+1 {{query head dim 16 differs from key head dim 32}}
  %s = flash.qk_dot %q, %k {scale = 1.0 : f32} : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x16xf32>
  return
}

// -----

func.func private @dot_result(%q: tensor<16x16xf32>, %k: tensor<32x16xf32>) {
  // expected-error @+1 {{result must be 16x32 (query rows x key rows), got 16x16}}
  %s = flash.qk_dot %q, %k {scale = 1.0 : f32} : tensor<16x16xf32>, tensor<32x16xf32> -> tensor<16x16xf32>
  return
}

// -----

func.func private @dot_types(%q: tensor<16x16xbf16>, %k: tensor<16x16xf16>) {
  // expected-error @+1 {{query and key element types differ}}
  %s = flash.qk_dot %q, %k {scale = 1.0 : f32} : tensor<16x16xbf16>, tensor<16x16xf16> -> tensor<16x16xf32>
  return
}

// -----

func.func private @softmax_rows(%s: tensor<16x32xf32>, %m: tensor<32xf32>) {
  // expected-error @+1 {{running max must be 16 (one entry per query row), got 32}}
  %mn, %ln, %p, %a = flash.online_softmax %s, %m, %m : tensor<16x32xf32>, tensor<32xf32>
  return
}

// -----

func.func private @softmax_scale(%s: tensor<16x32xf32>, %m: tensor<16xf32>) {
  // expected-error @+1 {{exp2_scale must be positive}}
  %mn, %ln, %p, %a = flash.online_softmax %s, %m, %m {exp2_scale = -1.0 : f32} : tensor<16x32xf32>, tensor<16xf32>
  return
}

// -----

func.func private @rescale_rows(%acc: tensor<16x64xf32>, %alpha: tensor<8xf32>) {
  // expected-error @+1 {{alpha must be 16 (one entry per query row), got 8}}
  %r = flash.rescale %acc, %alpha : tensor<16x64xf32>, tensor<8xf32>
  return
}

// -----

func.func private @pv_probs(%acc: tensor<16x64xf32>, %p: tensor<8x32xf32>, %v: tensor<32x64xbf16>) {
  // expected-error @+1 {{probabilities must be 16x32 (accumulator rows x value rows), got 8x32}}
  %r = flash.pv_accumulate %acc, %p, %v : tensor<16x64xf32>, tensor<8x32xf32>, tensor<32x64xbf16>
  return
}

// -----

func.func private @pv_value(%acc: tensor<16x64xf32>, %p: tensor<16x32xf32>, %v: tensor<32x128xbf16>) {
  // expected-error @+1 {{value block must be 32x64 (probability columns x accumulator columns), got 32x128}}
  %r = flash.pv_accumulate %acc, %p, %v : tensor<16x64xf32>, tensor<16x32xf32>, tensor<32x128xbf16>
  return
}

// -----

func.func private @fused_alpha(%acc: tensor<16x64xf32>, %alpha: tensor<32xf32>, %p: tensor<16x32xf32>, %v: tensor<32x64xbf16>) {
  // expected-error @+1 {{alpha must be 16 (one entry per query row), got 32}}
  %r = flash.rescale_accumulate %acc, %alpha, %p, %v : tensor<16x64xf32>, tensor<32xf32>, tensor<16x32xf32>, tensor<32x64xbf16>
  return
}

// -----

func.func private @finalize_rows(%acc: tensor<16x64xf32>, %m: tensor<8xf32>) {
  // expected-error @+1 {{running max must be 16 (one entry per query row), got 8}}
  %o, %lse = flash.finalize %acc, %m, %m : tensor<16x64xf32>, tensor<8xf32>
  return
}

// -----

func.func private @finalize_scale(%acc: tensor<16x64xf32>, %m: tensor<16xf32>) {
  // expected-error @+1 {{max_scale must be positive}}
  %o, %lse = flash.finalize %acc, %m, %m {max_scale = 0.0 : f32} : tensor<16x64xf32>, tensor<16xf32>
  return
}

// -----

func.func private @store_rows(%o: tensor<16x64xf32>, %lse: tensor<32xf32>, %i: index) {
  // expected-error @+1 {{lse must be 16 (one entry per query row), got 32}}
  flash.store %o, %lse at (%i, %i, %i) : tensor<16x64xf32>, tensor<32xf32>
  return
}

// -----

func.func private @mask_args(%s: tensor<16x16xf32>, %i: index) {
  // expected-error @+1 {{region must take (b, h, i, j: i32)}}
  %r = flash.mask %s at (%i, %i, %i, %i) : tensor<16x16xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32):
    %t = arith.constant true
    flash.yield %t : i1
  }
  return
}

// -----

func.func private @mask_yield(%s: tensor<16x16xf32>, %i: index) {
  // expected-error @+1 {{region must yield 'i1', got 'f32'}}
  %r = flash.mask %s at (%i, %i, %i, %i) : tensor<16x16xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32, %k: i32):
    %t = arith.constant 1.0 : f32
    flash.yield %t : f32
  }
  return
}

// -----

func.func private @mask_bands_unclassified(%s: tensor<16x16xf32>, %i: index, %p: i1) {
  // expected-error @+1 {{row_groups need classified(all_visible, any_visible)}}
  %r = flash.mask %s at (%i, %i, %i, %i) row_groups(%p, %p) : tensor<16x16xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32, %k: i32):
    %t = arith.constant true
    flash.yield %t : i1
  }
  return
}

// -----

func.func private @mask_bands_uneven(%s: tensor<16x16xf32>, %i: index, %p: i1) {
  // expected-error @+1 {{row_groups must split the 16 rows into two or more equal bands, got 3}}
  %r = flash.mask %s at (%i, %i, %i, %i) classified(%p, %p) row_groups(%p, %p, %p) : tensor<16x16xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32, %k: i32):
    %t = arith.constant true
    flash.yield %t : i1
  }
  return
}

// -----

func.func private @score_args(%s: tensor<16x16xf32>, %i: index) {
  // expected-error @+1 {{region must take (s: f32, b, h, i, j: i32)}}
  %r = flash.score_mod %s at (%i, %i, %i, %i) : tensor<16x16xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32, %k: i32):
    %t = arith.constant 1.0 : f32
    flash.yield %t : f32
  }
  return
}

// -----

func.func private @param_outside() {
  // expected-error @+1 {{'flash.param' op must be nested in a flash.kernel or flash.backward_kernel}}
  %w = flash.param "window" : i32
  return
}

// -----

flash.kernel @param_undeclared attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, params = [#flash.param<"window" = 1 : i32>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{reads undeclared parameter 'windw'}}
  %w = flash.param "windw" : i32
}

// -----

flash.kernel @param_type attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, params = [#flash.param<"window" = 1 : i32>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{parameter 'window' is 'i32', not 'f32'}}
  %w = flash.param "window" : f32
}

// -----

flash.kernel @aux_rank attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, tensors = [#flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %c = arith.constant 0 : i32
  // expected-error @+1 {{tensor 'doc' has rank 2 but is indexed with 1 indices}}
  %d = flash.aux_load "doc"[%c] : i32
}

// -----

flash.kernel @aux_type attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, tensors = [#flash.aux_tensor<"slopes" : bf16 [heads]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %c = arith.constant 0 : i32
  // expected-error @+1 {{elements of 'slopes' read as 'f32', not 'i32'}}
  %d = flash.aux_load "slopes"[%c] : i32
}

// -----

flash.kernel @aux_undeclared attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %c = arith.constant 0 : i32
  // expected-error @+1 {{reads undeclared tensor 'doc'}}
  %d = flash.aux_load "doc"[%c] : i32
}

// -----

flash.kernel @block_class_without_summary attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{needs a kernel with a block_summary}}
  %c = flash.block_class %b, %h, %qt, %qt
}

// -----

// expected-error @+1 {{threads_per_block = 256 must be 32 x num_warps (4)}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 256, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// A per-key-tile kernel (the backward's main loop) has a warp per 16 keys.
// expected-error @+1 {{num_warps = 4 does not cover block_cols = 128 at 16 rows per warp}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_key_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 128, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{num_warps = 8 does not cover block_rows = 64 at 16 rows per warp}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 256, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 8, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{rows_per_warp must be 16 or 32, got 8}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 256, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 8, rows_per_warp = 8, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{tile sizes must be positive, got block_rows = 64, block_cols = 0, head_dim = 64}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 0, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{threads_per_block = 2048 is more than a block can have (1024)}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 2048, dynamic_shared_bytes = 0, block_rows = 1024, block_cols = 64, head_dim = 64, num_warps = 64, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{dynamic_shared_bytes must not be negative}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = -16, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{element_type must be bf16 or f16, got 'f32'}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = f32, tensor_maps = 0, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{tensor_maps must be 0 (none), 2 (k, v) or 3 (q, k, v), got 1}}
module attributes {flashc.launch = {k = #flash.launch<gemm = wgmma, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 1, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{only the wgmma kernel takes tensor maps}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 2, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{a persistent grid takes the tensor maps of q, k and v (3), and only it does; got grid = persistent with tensor_maps = 2}}
module attributes {flashc.launch = {k = #flash.launch<gemm = wgmma, grid = persistent, threads_per_block = 384, dynamic_shared_bytes = 0, block_rows = 128, block_cols = 64, head_dim = 64, num_warps = 12, rows_per_warp = 16, element_type = bf16, tensor_maps = 2, params = [], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{1 params but 0 param_types}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = ["w"], param_types = [], tensors = []>}} {
}

// -----

// expected-error @+1 {{parameter "w" must be i32 or f32, got 'f64'}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = ["w"], param_types = [f64], tensors = []>}} {
}

// -----

// expected-error @+1 {{tensors must be names (strings), got 3}}
module attributes {flashc.launch = {k = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 0, block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16, element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = [3]>}} {
}

// -----

// expected-error @+1 {{body of a split_keys kernel must take four index arguments (batch, head, query tile, split)}}
flash.kernel @split_three_args attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, split_keys} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

flash.kernel @split_range_unsplit attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{'flash.split_key_range' op must be nested in a flash.kernel with split_keys}}
  %lo, %hi = flash.split_key_range %qt of %qt
}

// -----

flash.kernel @split_store_unnamed attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, split_keys} {
^bb0(%b: index, %h: index, %qt: index, %s: index):
  %o = arith.constant dense<0.0> : tensor<16x16xf32>
  %l = arith.constant dense<0.0> : tensor<16xf32>
  // expected-error @+1 {{'flash.store' op in a split_keys kernel must name its split}}
  flash.store %o, %l at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

flash.kernel @split_store_outside attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %o = arith.constant dense<0.0> : tensor<16x16xf32>
  %l = arith.constant dense<0.0> : tensor<16xf32>
  // expected-error @+1 {{'flash.store' op names a split outside a split_keys kernel}}
  flash.store %o, %l at (%b, %h, %qt) split %qt : tensor<16x16xf32>, tensor<16xf32>
}

// -----

flash.kernel @packed_kv_head attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, packed_heads} {
^bb0(%b: index, %h: index, %qt: index):
  // expected-error @+1 {{'flash.kv_head' op is not needed in a packed_heads kernel: its head argument is the KV head}}
  %hkv = flash.kv_head %h
}

// -----

// expected-error @+1 {{a packed_heads kernel cannot read a block summary (its tiles are per query head)}}
flash.kernel @packed_summary attributes {block_summary = #flash.block_summary<per_batch = true, per_head = false>,
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, packed_heads} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

flash.kernel @packed_other_tile attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, packed_heads} {
^bb0(%b: index, %h: index, %qt: index):
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'flash.load_q' op in a packed_heads kernel must address the kernel's own head and query tile (its block arguments)}}
  %q = flash.load_q %b, %h, %c0 : tensor<16x16xf32>
}

// -----

// expected-error @+1 {{a paged_kv kernel cannot read a block summary (its tiles assume one key length for every sequence)}}
flash.kernel @paged_summary attributes {block_summary = #flash.block_summary<per_batch = true, per_head = false>,
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>,
    paged_kv = #flash.paged_kv<page = 16, table = "block_table", lengths = "kv_len">} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

flash.kernel @paged_page_zero attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>,
    // expected-error @+1 {{page of 0 keys is out of range (1 to 4096)}}
    paged_kv = #flash.paged_kv<page = 0, table = "block_table", lengths = "kv_len">} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

flash.kernel @paged_same_names attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>,
    // expected-error @+1 {{the block table and the lengths need two names}}
    paged_kv = #flash.paged_kv<page = 16, table = "t", lengths = "t">} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

flash.kernel @varlen_nothing attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>,
    // expected-error @+1 {{a varlen batch packs the queries, the keys or both: name their offsets}}
    varlen = #flash.varlen<queries = "", keys = "">} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{a varlen kernel with packed queries cannot be split_keys or packed_heads (their rows are laid out by the launch's N)}}
flash.kernel @varlen_packed_heads attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, packed_heads,
    varlen = #flash.varlen<queries = "cu_q", keys = "">} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{a varlen kernel cannot pack keys that a paged_kv cache holds}}
flash.kernel @varlen_paged_keys attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>,
    paged_kv = #flash.paged_kv<page = 16, table = "block_table", lengths = "kv_len">,
    varlen = #flash.varlen<queries = "", keys = "cu_k">} {
^bb0(%b: index, %h: index, %qt: index):
}

// -----

// expected-error @+1 {{a varlen kernel cannot read a block summary (its tiles assume one length for every sequence)}}
flash.kernel @varlen_summary attributes {block_summary = #flash.block_summary<per_batch = true, per_head = false>,
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>,
    varlen = #flash.varlen<queries = "cu_q", keys = "cu_k">} {
^bb0(%b: index, %h: index, %qt: index):
}
