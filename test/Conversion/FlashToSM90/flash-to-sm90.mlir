// RUN: flashc-opt %s -split-input-file -flash-to-sm90=kv-copy=cp.async | FileCheck %s
// RUN: flashc-opt %s -split-input-file -flash-to-sm90 | FileCheck %s --check-prefix=TMA
// RUN: flashc-opt %s -split-input-file -flash-to-sm90 -canonicalize -cse -convert-scf-to-cf -convert-arith-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts -nvvm-attach-target="module=flashc_kernels chip=sm_90a features=+ptx80 O=3" -gpu-module-to-binary="format=isa" | FileCheck %s --check-prefix=PTX

// Causal bf16, D = 64, Br = Bc = 64 on wgmma: one warpgroup, swizzled
// shared tiles (25600 = 3 tiles of 64 rows x 128 bytes + 1024 of alignment).
// First with K/V by cp.async (CHECK), then by TMA (TMA, the default).

// CHECK: gpu.module @flashc_kernels attributes {flashc.launch = {causal = #flash.launch<
// CHECK-SAME: gemm = wgmma, grid = per_tile, threads_per_block = 128, dynamic_shared_bytes = 25600,
// CHECK-SAME: block_rows = 64, block_cols = 64, head_dim = 64, num_warps = 4, rows_per_warp = 16,
// CHECK-SAME: tensor_maps = 0
// CHECK: llvm.mlir.global external @__flashc_smem() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK-LABEL: llvm.func @causal(
// The base rounded up to 1024 bytes.
// CHECK: llvm.ptrtoint
// CHECK: arith.andi %{{.*}}, %{{.*}} : i64
// Copies into the 128-byte swizzle: chunk xor (row mod 8).
// CHECK: arith.xori
// CHECK: nvvm.cp.async.shared.global
// CHECK: scf.for
// K(kt) ready and visible to the async proxy before S = Q·Kᵀ.
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: llvm.inline_asm has_side_effects "fence.proxy.async.shared::cta;"
// CHECK-NEXT: nvvm.barrier0
// CHECK: "wgmma.fence.sync.aligned;"
// The first k-step starts from zero (scale-d = 0), the next ones accumulate.
// CHECK: setp.ne.b32 p, 0, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}p, 1, 1, 0, 0;
// CHECK: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// Softmax on the accumulators, then P·V with P from registers, V transposed.
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, {${{[0-9]+}}, ${{[0-9]+}}, ${{[0-9]+}}, ${{[0-9]+}}}, ${{[0-9]+}}, p, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK-NOT: {{[^#]}}flash.

// TMA: flashc.launch = {causal = #flash.launch<{{.*}}dynamic_shared_bytes = 25616,{{.*}}tensor_maps = 2,
// The tensor maps of K and V: grid-constant 128-byte parameters.
// TMA-LABEL: llvm.func @causal(
// TMA-SAME: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}, %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
// Thread 0 initializes the two mbarriers behind the tiles.
// TMA: "mbarrier.init.shared::cta.b64 [$0], $1;"
// TMA: "mbarrier.init.shared::cta.b64 [$0], $1;"
// TMA: "fence.mbarrier_init.release.cluster;"
// TMA: nvvm.barrier0
// Q still by cp.async, waited for before the loop; K(first) by TMA.
// TMA: nvvm.cp.async.shared.global
// TMA: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;"
// TMA: "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];"
// TMA: nvvm.cp.async.wait.group 0
// TMA-NEXT: "fence.proxy.async.shared::cta;"
// TMA-NEXT: nvvm.barrier0
// TMA: scf.for
// In the loop: K(kt)'s phase, then V(kt) by TMA, S, softmax; V(kt)'s
// phase, then K(kt + 1), P·V.
// TMA: mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;
// TMA-NEXT: nvvm.barrier0
// TMA: "cp.async.bulk.tensor.4d
// TMA: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// TMA: mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;
// TMA-NEXT: nvvm.barrier0
// TMA: "cp.async.bulk.tensor.4d
// TMA: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// A skipped block completes V's phase without a copy.
// TMA: } else {
// TMA: mbarrier.try_wait.parity
// TMA: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// TMA-NEXT: }
// TMA-NEXT: nvvm.barrier0
// TMA-NOT: nvvm.cp.async.shared.global

// PTX: .param .align 64 .b8 causal_param_22[128]
// PTX: mbarrier.init.shared::cta.b64
// PTX-DAG: cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX-DAG: mbarrier.try_wait.parity.shared::cta.b64
// PTX-DAG: wgmma.fence.sync.aligned
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// PTX-DAG: wgmma.commit_group.sync.aligned
// PTX-DAG: wgmma.wait_group.sync.aligned 0
// O leaves in 16-byte stores: the quad transposes its packed words (two
// butterfly stages), then each thread writes 8 columns of a row at once
// (D = 64: two chunks of 32 columns per row).
// PTX: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// PTX: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// PTX-COUNT-2: st.global.v4.b32
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

// f16 with D = 128 and Bc = 32: wgmma m64n32k16 for S, m64n128k16 for P·V
// (two 64-column panels of V: LBO = 32 rows x 128 bytes); two TMA boxes
// (64 columns x 32 rows) per block.
// TMA: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;"
// TMA-COUNT-2: "cp.async.bulk.tensor.4d
// CHECK: gemm = wgmma,
// CHECK-LABEL: llvm.func @full(
// CHECK: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
flash.kernel @full attributes {config = #flash.tile<br = 128, bc = 32, head_dim = 128>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, element_type = f16, static_sizes = array<i64: -1, -1, -1, -1, -1, 128>} {
^bb0(%b: index, %h: index, %qt: index):
  %cst = arith.constant dense<0.000000e+00> : tensor<128x128xf32>
  %cst_0 = arith.constant dense<0.000000e+00> : tensor<128xf32>
  %cst_1 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %c32 = arith.constant 32 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %0 = flash.load_q %b, %h, %qt : tensor<128x128xf16>
  %1 = flash.kv_head %h
  %2 = flash.dim key_len : index
  %3 = arith.ceildivui %2, %c32 : index
  %4:3 = scf.for %arg0 = %c0 to %3 step %c1 iter_args(%arg1 = %cst_1, %arg2 = %cst_0, %arg3 = %cst) -> (tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>) {
    %5 = flash.load_kv key %b, %1, %arg0 : tensor<32x128xf16>
    %6 = flash.load_kv value %b, %1, %arg0 : tensor<32x128xf16>
    %7 = flash.qk_dot %0, %5 {scale = 1.000000e+00 : f32} : tensor<128x128xf16>, tensor<32x128xf16> -> tensor<128x32xf32>
    %8 = flash.mask_key_bounds %7, %arg0, %2 : tensor<128x32xf32>
    %new_max, %new_sum, %probs, %alpha = flash.online_softmax %8, %arg1, %arg2 {exp2_scale = 0.127517432 : f32} : tensor<128x32xf32>, tensor<128xf32>
    %9 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<128x128xf32>, tensor<128xf32>, tensor<128x32xf32>, tensor<32x128xf16>
    scf.yield %new_max, %new_sum, %9 : tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>
  }
  %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 0.0883883461 : f32} : tensor<128x128xf32>, tensor<128xf32>
  flash.store %output, %lse at (%b, %h, %qt) : tensor<128x128xf32>, tensor<128xf32>
}

