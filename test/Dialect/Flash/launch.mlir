// RUN: flashc-opt %s | FileCheck %s
// RUN: flashc-opt %s | flashc-opt | FileCheck %s

// The launch facts a lowering writes for each kernel (#flash.launch) print
// and parse back unchanged; the verifier's rules have negative tests in
// invalid.mlir.

// CHECK: flashc.launch = {
// CHECK-SAME: causal = #flash.launch<gemm = wgmma, grid = persistent, threads_per_block = 384,
// CHECK-SAME: dynamic_shared_bytes = 164944, block_rows = 128, block_cols = 128, head_dim = 128,
// CHECK-SAME: num_warps = 12, rows_per_warp = 16, element_type = bf16, tensor_maps = 3,
// CHECK-SAME: params = [], param_types = [], tensors = []>
// CHECK-SAME: softcap = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 256,
// CHECK-SAME: dynamic_shared_bytes = 69632, block_rows = 128, block_cols = 64, head_dim = 128,
// CHECK-SAME: num_warps = 8, rows_per_warp = 16, element_type = f16, tensor_maps = 0,
// CHECK-SAME: params = ["cap"], param_types = [f32], tensors = ["bias"]>
// The backward's kernels: a warp per 16 keys; threads free of the rows.
// CHECK-SAME: softcap_bwd = #flash.launch<gemm = mma.sync, grid = per_key_tile, threads_per_block = 256,
// CHECK-SAME: softcap_bwd_preprocess = #flash.launch<gemm = mma.sync, grid = per_row_tile, threads_per_block = 32,
module attributes {flashc.launch = {
  causal = #flash.launch<gemm = wgmma, grid = persistent, threads_per_block = 384,
                         dynamic_shared_bytes = 164944, block_rows = 128, block_cols = 128,
                         head_dim = 128, num_warps = 12, rows_per_warp = 16,
                         element_type = bf16, tensor_maps = 3, params = [], param_types = [],
                         tensors = []>,
  softcap = #flash.launch<gemm = mma.sync, grid = per_tile, threads_per_block = 256,
                          dynamic_shared_bytes = 69632, block_rows = 128, block_cols = 64,
                          head_dim = 128, num_warps = 8, rows_per_warp = 16,
                          element_type = f16, tensor_maps = 0, params = ["cap"],
                          param_types = [f32], tensors = ["bias"]>,
  softcap_bwd = #flash.launch<gemm = mma.sync, grid = per_key_tile, threads_per_block = 256,
                              dynamic_shared_bytes = 97280, block_rows = 32, block_cols = 128,
                              head_dim = 128, num_warps = 8, rows_per_warp = 16,
                              element_type = f16, tensor_maps = 0, params = ["cap"],
                              param_types = [f32], tensors = ["bias"]>,
  softcap_bwd_preprocess = #flash.launch<gemm = mma.sync, grid = per_row_tile,
                              threads_per_block = 32, dynamic_shared_bytes = 0, block_rows = 32,
                              block_cols = 128, head_dim = 128, num_warps = 1,
                              rows_per_warp = 16, element_type = f16, tensor_maps = 0,
                              params = ["cap"], param_types = [f32], tensors = ["bias"]>}} {
}
