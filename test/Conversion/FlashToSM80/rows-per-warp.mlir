// RUN: flashc-opt %s -flash-to-sm80 | FileCheck %s --check-prefixes=CHECK,R32
// RUN: flashc-opt %s -flash-to-sm80=rows-per-warp=32 | FileCheck %s --check-prefixes=CHECK,R32
// RUN: flashc-opt %s -flash-to-sm80=rows-per-warp=16 | FileCheck %s --check-prefixes=CHECK,R16
// RUN: flashc-opt %s -flash-to-sm80="rows-per-warp=32 q-in-registers=never" | FileCheck %s --check-prefix=QSMEM
// RUN: not flashc-opt %s -flash-to-sm80=rows-per-warp=48 2>&1 | FileCheck %s --check-prefix=ERR48
// RUN: not flashc-opt %s -flash-to-sm80="rows-per-warp=32 num-warps=8" 2>&1 | FileCheck %s --check-prefix=ERRWARPS

// Br = 128, Bc = 64, D = 64, no mask. By default (D + Bc <= 160, Br a
// multiple of 128) each of 4 warps owns 32 query rows: two m16 row blocks
// that share every K and V fragment loaded by ldmatrix.

// R32: flashc.launch = {full = #flash.launch<{{.*}}threads_per_block = 128, {{.*}}num_warps = 4, rows_per_warp = 32,
// R32: nvvm.reqntid = array<i32: 128, 1, 1>
// R16: flashc.launch = {full = #flash.launch<{{.*}}threads_per_block = 256, {{.*}}num_warps = 8, rows_per_warp = 16,
// R16: nvvm.reqntid = array<i32: 256, 1, 1>
// No mask: CTA x runs query tile x.
// CHECK-NOT: nctaid
// Q fragments to registers once: D/16 k-steps per row block.
// CHECK: nvvm.cp.async.wait.group 1
// CHECK-NEXT: nvvm.barrier0
// CHECK-COUNT-4: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// R32-COUNT-4: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// CHECK: scf.for
// S = Q·Kᵀ: every K fragment (two n-tiles) feeds both row blocks with 32 rows.
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// CHECK-NEXT: llvm.extractvalue
// CHECK-NEXT: llvm.extractvalue
// CHECK-NEXT: llvm.extractvalue
// CHECK-NEXT: llvm.extractvalue
// CHECK-NEXT: nvvm.mma.sync
// CHECK: nvvm.mma.sync
// R32: nvvm.mma.sync
// R32: nvvm.mma.sync
// CHECK-NEXT: llvm.extractvalue
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// A += P·V: one V fragment (ldmatrix.trans) per two n-tiles of every row block.
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// CHECK: nvvm.mma.sync
// CHECK: nvvm.mma.sync
// R32: nvvm.mma.sync
// R32: nvvm.mma.sync
// CHECK-NEXT: llvm.extractvalue
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>

// With Q in shared memory, its fragments are reloaded per k-step from one
// opaque base plus immediates.
// QSMEM: scf.for
// QSMEM: llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l"
// QSMEM: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>

// ERR48: error: 'flash.kernel' op flash-to-sm80: rows-per-warp = 48 must be 16 or 32
// ERRWARPS: error: 'flash.kernel' op flash-to-sm80: num-warps = 8 does not match Br/32 = 4 (each warp owns 32 query rows)

flash.kernel @full attributes {config = #flash.tile<br = 128, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %cst = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
  %cst_0 = arith.constant dense<0.000000e+00> : tensor<128xf32>
  %cst_1 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %0 = flash.load_q %b, %h, %qt : tensor<128x64xbf16>
  %1 = flash.kv_head %h
  %2 = flash.dim key_len : index
  %3 = arith.ceildivui %2, %c64 : index
  %4:3 = scf.for %arg0 = %c0 to %3 step %c1 iter_args(%arg1 = %cst_1, %arg2 = %cst_0, %arg3 = %cst) -> (tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>) {
    %5 = flash.load_kv key %b, %1, %arg0 : tensor<64x64xbf16>
    %6 = flash.load_kv value %b, %1, %arg0 : tensor<64x64xbf16>
    %7 = flash.qk_dot %0, %5 {scale = 1.000000e+00 : f32} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    %8 = flash.mask_key_bounds %7, %arg0, %2 : tensor<128x64xf32>
    %new_max, %new_sum, %probs, %alpha = flash.online_softmax %8, %arg1, %arg2 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
    %9 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<128x64xf32>, tensor<128xf32>, tensor<128x64xf32>, tensor<64x64xbf16>
    scf.yield %new_max, %new_sum, %9 : tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
  }
  %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32>
  flash.store %output, %lse at (%b, %h, %qt) : tensor<128x64xf32>, tensor<128xf32>
}
