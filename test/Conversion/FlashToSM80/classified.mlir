// RUN: flashc-opt %s -flash-to-sm80 | FileCheck %s

// A mask classified by flash-classify-tiles (here written by hand: causal,
// Br = Bc = 64): its any_visible decides the block skip without a CTA vote,
// and its all_visible skips the per-element predicate on full tiles.

// With a mask, CTA x runs query tile gridDim.x - 1 - x (longest first).
// CHECK-LABEL: llvm.func @causal(
// CHECK: %[[CTA:.*]] = nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK: %[[GRID:.*]] = nvvm.read.ptx.sreg.nctaid.x : i32
// CHECK: %[[LAST:.*]] = arith.subi %[[GRID]], %{{.*}} : i32
// CHECK: %[[QT:.*]] = arith.subi %[[LAST]], %[[CTA]] : i32
// CHECK-NOT: nvvm.barrier #nvvm.reduction
// Before the loop, a scan of every key block with any_visible finds the
// first and last visible one (and counts the visible blocks, which a mask
// whose keys come in pieces walks); the loop runs over that range only.
// CHECK: %[[SCAN:.*]]:3 = scf.for %[[BLOCK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK: %[[SJLO:.*]] = arith.muli %[[BLOCK]], %{{.*}} : i32
// CHECK: %[[SANY:.*]] = arith.cmpi sle, %[[SJLO]], %{{.*}} : i32
// CHECK: %[[MIN:.*]] = arith.minsi %{{.*}}, %[[BLOCK]]
// CHECK: arith.select %[[SANY]], %[[MIN]]
// CHECK: arith.select %[[SANY]], %[[BLOCK]]
// CHECK: %[[END:.*]] = arith.addi %[[SCAN]]#1, %{{.*}} : i32
// Clamped to the original range.
// CHECK: %[[FIRST:.*]] = arith.maxsi %[[SCAN]]#0, %{{.*}} : i32
// CHECK: %[[LAST:.*]] = arith.minsi %[[END]], %{{.*}} : i32
// CHECK: scf.for %[[KT:.*]] = %[[FIRST]] to %[[LAST]] step %{{.*}} iter_args(
// Inside, the slice of any_visible (jlo <= ihi) is lowered first, in i32.
// CHECK-NEXT: %[[ILO:.*]] = arith.muli %[[QT]], %{{.*}} : i32
// CHECK-NEXT: %[[IHI:.*]] = arith.addi %[[ILO]], %{{.*}} : i32
// CHECK-NEXT: %[[JLO:.*]] = arith.muli %[[KT]], %{{.*}} : i32
// CHECK-NEXT: %[[ANY:.*]] = arith.cmpi sle, %[[JLO]], %[[IHI]] : i32
// CHECK-NEXT: %{{.*}}:36 = scf.if %[[ANY]] -> (f32,
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK-NEXT: nvvm.barrier0
// CHECK: nvvm.mma.sync
// The all_visible compare, after S = Q·Kᵀ; a full tile passes S through.
// CHECK: %[[ALL:.*]] = arith.cmpi sle, %{{.*}}, %[[ILO]] : i32
// CHECK-NEXT: %[[MASKED:.*]]:32 = scf.if %[[ALL]] -> (f32,
// CHECK-NEXT: scf.yield %{{.*}} : f32,
// CHECK-NEXT: } else {
// CHECK: arith.cmpi sle
// CHECK: arith.select
// CHECK: scf.yield
// The masked scores reach mask_key_bounds (a block past M).
// CHECK: scf.if %{{.*}} -> (f32,
// CHECK: arith.select %{{.*}}, %[[MASKED]]#0,
// CHECK: nvvm.mma.sync
// A skipped block only lets this thread's K(kt) copy land and starts K(kt+1):
// no vote, no barrier.
// CHECK: } else {
// CHECK-NOT: nvvm.barrier
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NOT: nvvm.barrier
// CHECK: scf.if
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.commit.group
// CHECK-NOT: nvvm.barrier #nvvm.reduction
// CHECK: llvm.return
flash.kernel @causal attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %cst_0 = arith.constant dense<0.000000e+00> : tensor<64xf32>
  %cst_1 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %c64 = arith.constant 64 : index
  %c63 = arith.constant 63 : index
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
    %ilo = arith.muli %qt, %c64 : index
    %ihi = arith.addi %ilo, %c63 : index
    %jlo = arith.muli %arg0, %c64 : index
    %jhi = arith.addi %jlo, %c63 : index
    %all = arith.cmpi sle, %jhi, %ilo : index
    %any = arith.cmpi sle, %jlo, %ihi : index
    %8 = flash.mask %7 at (%b, %h, %qt, %arg0) classified(%all, %any) : tensor<64x64xf32> {
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
