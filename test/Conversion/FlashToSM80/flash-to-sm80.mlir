// RUN: flashc-opt %s -split-input-file -flash-to-sm80 | FileCheck %s

// Causal bf16, D = 64, Br = Bc = 64: the FlashAttention-2 forward on mma.sync.

// CHECK: module attributes {gpu.container_module}
// CHECK: gpu.module @flashc_kernels attributes {flashc.launch = {causal = #flash.launch<
// CHECK-SAME: gemm = mma.sync, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 27648,
// CHECK-SAME: block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16,
// CHECK-SAME: element_type = bf16, tensor_maps = 0, params = [], param_types = [], tensors = []>}}
// CHECK: llvm.mlir.global external @__flashc_smem() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
// The ABI: q, k, v, o, lse; 12 i64 strides; B, H, HKV, N, M.
// CHECK-LABEL: llvm.func @causal(
// CHECK-SAME: %{{.*}}: !llvm.ptr<1> {llvm.noalias, llvm.readonly}, %{{.*}}: !llvm.ptr<1> {llvm.noalias, llvm.readonly}, %{{.*}}: !llvm.ptr<1> {llvm.noalias, llvm.readonly},
// CHECK-SAME: %{{.*}}: !llvm.ptr<1> {llvm.noalias}, %{{.*}}: !llvm.ptr<1> {llvm.noalias},
// CHECK-SAME: %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %[[OROW:.*]]: i64,
// CHECK-SAME: %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %[[M:.*]]: i32)
// CHECK-SAME: attributes {nvvm.kernel, nvvm.reqntid = array<i32: 128, 1, 1>}
// CHECK-DAG: nvvm.read.ptx.sreg.ctaid.x
// CHECK-DAG: nvvm.read.ptx.sreg.ctaid.y
// CHECK-DAG: nvvm.read.ptx.sreg.ctaid.z
// Q, then K(0), through 16-byte cp.async with zero fill; Q moves to registers.
// CHECK: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg, %{{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 1
// CHECK: nvvm.barrier0
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>, num = 4 : i32
// CHECK: scf.for
// Blocks the causal mask removes for the whole CTA are skipped after one vote.
// CHECK: nvvm.barrier #nvvm.reduction<or>
// CHECK: scf.if
// K(kt) ready, V(kt) copy starts, S = Q Kᵀ.
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: nvvm.barrier0
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// CHECK: nvvm.mma.sync {{.*}}layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// The mask, then mask_key_bounds only on a block that runs past M.
// CHECK: arith.cmpi sle
// CHECK: arith.cmpi sgt, %{{.*}}, %[[M]] : i32
// Row max and sum across the quad, exp2 on the MUFU.
// CHECK: nvvm.shfl.sync bfly %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : f32 -> f32
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// V(kt) ready, K(kt+1) copy starts, A = diag(α)·A + P·V with V through ldmatrix.trans.
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: nvvm.barrier0
// CHECK: llvm.fptrunc %{{.*}} : f32 to bf16
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK: nvvm.mma.sync
// Finalize and store: O in bf16 pairs, LSE in f32, rows >= N skipped.
// CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : i32, !llvm.ptr<1>
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : f32, !llvm.ptr<1>
// CHECK-NOT: flash.
flash.kernel @causal attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %cst_0 = arith.constant dense<0.000000e+00> : tensor<64xf32>
  %cst_1 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %0 = flash.load_q %b, %h, %qt : tensor<64x64xbf16>
  %1 = flash.kv_head %h
  %2 = flash.dim key_len : index
  %3 = arith.ceildivui %2, %c64 : index
  %4:3 = scf.for %arg0 = %c0 to %3 step %c1 iter_args(%arg1 = %cst_1, %arg2 = %cst_0, %arg3 = %cst) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
    %5 = flash.load_kv key %b, %1, %arg0 : tensor<64x64xbf16>
    %6 = flash.load_kv value %b, %1, %arg0 : tensor<64x64xbf16>
    %7 = flash.qk_dot %0, %5 {scale = 1.000000e+00 : f32} : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %8 = flash.mask %7 at (%b, %h, %qt, %arg0) : tensor<64x64xf32> {
    ^bb0(%b_2: i32, %h_3: i32, %i: i32, %j: i32):
      %11 = arith.cmpi sle, %j, %i : i32
      flash.yield %11 : i1
    }
    %9 = flash.mask_key_bounds %8, %arg0, %2 : tensor<64x64xf32>
    %new_max, %new_sum, %probs, %alpha = flash.online_softmax %9, %arg1, %arg2 {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %10 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<64x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x64xbf16>
    scf.yield %new_max, %new_sum, %10 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
  }
  %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32>
  flash.store %output, %lse at (%b, %h, %qt) : tensor<64x64xf32>, tensor<64xf32>
}

// -----

// f16, D = 128, Br = 128 (8 warps: D + Bc > 160 keeps 16 rows per warp),
// unfused rescale + pv_accumulate, a
// score mod with a parameter, an aux tensor and tanh; no mask, so no vote.

// CHECK: gpu.module @flashc_kernels attributes {flashc.launch = {softcap = #flash.launch<
// CHECK-SAME: grid = per_tile, threads_per_block = 256, dynamic_shared_bytes = 69632, block_rows = 128,
// CHECK-SAME: num_warps = 8, rows_per_warp = 16, element_type = f16, tensor_maps = 0,
// CHECK-SAME: params = ["cap"], param_types = [f32], tensors = ["bias"]>
// The parameters, then one pointer per aux tensor.
// CHECK-LABEL: llvm.func @softcap(
// CHECK-SAME: %{{.*}}: i32, %[[CAP:.*]]: f32, %[[BIAS:.*]]: !llvm.ptr<1> {llvm.noalias, llvm.readonly})
// CHECK-SAME: nvvm.reqntid = array<i32: 256, 1, 1>
// CHECK: scf.for
// CHECK-NOT: nvvm.barrier #nvvm.reduction
// f16 fragments are vector<2xf16> for the verifier.
// CHECK: nvvm.mma.sync {{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32)
// CHECK: arith.divf %{{.*}}, %[[CAP]] : f32
// tanh through exp2, no libdevice.
// CHECK: llvm.intr.fabs
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: llvm.intr.copysign
// The aux load is predicated: out of range reads 0.
// CHECK: arith.cmpi ult
// CHECK: llvm.getelementptr %[[BIAS]]
// CHECK: llvm.load %{{.*}} invariant {alignment = 2 : i64} : !llvm.ptr<1> -> bf16
// CHECK: llvm.fpext %{{.*}} : bf16 to f32
// CHECK-NOT: __nv_
flash.kernel @softcap attributes {config = #flash.tile<br = 128, bc = 64, head_dim = 128>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = f16, params = [#flash.param<"cap" = 5.000000e+01 : f32>], tensors = [#flash.aux_tensor<"bias" : bf16 [heads]>], static_sizes = array<i64: -1, -1, -1, -1, -1, 128>} {
^bb0(%b: index, %h: index, %qt: index):
  %cst = arith.constant dense<0.000000e+00> : tensor<128x128xf32>
  %cst_0 = arith.constant dense<0.000000e+00> : tensor<128xf32>
  %cst_1 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %0 = flash.load_q %b, %h, %qt : tensor<128x128xf16>
  %1 = flash.kv_head %h
  %2 = flash.dim key_len : index
  %3 = arith.ceildivui %2, %c64 : index
  %4:3 = scf.for %arg0 = %c0 to %3 step %c1 iter_args(%arg1 = %cst_1, %arg2 = %cst_0, %arg3 = %cst) -> (tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>) {
    %5 = flash.load_kv key %b, %1, %arg0 : tensor<64x128xf16>
    %6 = flash.load_kv value %b, %1, %arg0 : tensor<64x128xf16>
    %7 = flash.qk_dot %0, %5 {scale = 0.0883883461 : f32} : tensor<128x128xf16>, tensor<64x128xf16> -> tensor<128x64xf32>
    %8 = flash.score_mod %7 at (%b, %h, %qt, %arg0) : tensor<128x64xf32> {
    ^bb0(%s: f32, %b_2: i32, %h_3: i32, %i: i32, %j: i32):
      %12 = flash.param "cap" : f32
      %14 = arith.divf %s, %12 : f32
      %15 = math.tanh %14 : f32
      %16 = arith.mulf %12, %15 : f32
      %17 = flash.aux_load "bias"[%h_3] : f32
      %18 = arith.addf %16, %17 : f32
      flash.yield %18 : f32
    }
    %9 = flash.mask_key_bounds %8, %arg0, %2 : tensor<128x64xf32>
    %new_max, %new_sum, %probs, %alpha = flash.online_softmax %9, %arg1, %arg2 {exp2_scale = 1.44269502 : f32} : tensor<128x64xf32>, tensor<128xf32>
    %r = flash.rescale %arg3, %alpha : tensor<128x128xf32>, tensor<128xf32>
    %10 = flash.pv_accumulate %r, %probs, %6 : tensor<128x128xf32>, tensor<128x64xf32>, tensor<64x128xf16>
    scf.yield %new_max, %new_sum, %10 : tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>
  }
  %output, %lse = flash.finalize %4#2, %4#0, %4#1 : tensor<128x128xf32>, tensor<128xf32>
  flash.store %output, %lse at (%b, %h, %qt) : tensor<128x128xf32>, tensor<128xf32>
}
