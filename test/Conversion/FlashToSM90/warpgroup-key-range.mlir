// RUN: flashc-opt %s -flash-to-sm90=persistent=false | FileCheck %s
// RUN: flashc-opt %s -flash-to-sm90 | FileCheck %s --check-prefix=PERSISTENT

// Per-warpgroup key ranges: causal bf16, D = 64, 128 x 64 tiles, the mask
// classified per band of 64 rows (row_groups, one band per consumer
// warpgroup). The tile's last key block is empty for rows 0..63, so
// warpgroup 0 narrows the tile's range to its own band's blocks and passes
// over the others: one GEMM turn each (the named barriers keep
// alternating) and a release of K and V once they have landed.

// CHECK: "setmaxnreg.inc.sync.aligned.u32 240;"
// The warpgroup's own range: a scan of the tile's range that reads its band.
// CHECK: %[[WG:.+]] = arith.divui %{{.+}}, %c128_i32{{.*}} : i32
// CHECK: scf.for
// CHECK: arith.cmpi eq, %[[WG]], %c0_i32
// CHECK: arith.select
// CHECK: scf.yield
// Blocks before its own: a turn, then K and V released once they landed.
// CHECK: scf.for
// CHECK: "bar.sync $0, 256;"
// CHECK: "bar.arrive $0, 256;"
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// Its own blocks: the overlapped loop.
// CHECK: scf.for
// CHECK: "bar.sync $0, 256;"
// CHECK: wgmma.mma_async
// After it: the first turn of the blocks past its own (before the last
// P·V, so the other warpgroup's GEMMs do not wait for it), the last P·V,
// then the rest of the turns and the releases, block by block.
// CHECK: scf.if
// CHECK: "bar.sync $0, 256;"
// CHECK: "bar.arrive $0, 256;"
// CHECK: scf.if
// CHECK: wgmma.mma_async
// CHECK: scf.for
// CHECK: scf.if
// CHECK: "bar.sync $0, 256;"
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK: llvm.store
// CHECK: llvm.return

// On a persistent grid the same happens per tile, inside the CTA's tile
// loop: the turns were opened once before it.
// PERSISTENT: "setmaxnreg.inc.sync.aligned.u32 232;"
// PERSISTENT: "bar.arrive $0, 256;"
// PERSISTENT: scf.for
// PERSISTENT: arith.cmpi eq, %{{.+}}, %c0_i32
// PERSISTENT: scf.for
// PERSISTENT: "bar.sync $0, 256;"
// PERSISTENT: mbarrier.try_wait.parity
// PERSISTENT-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// PERSISTENT: scf.for
// PERSISTENT: wgmma.mma_async
// PERSISTENT: scf.if
// PERSISTENT: "bar.sync $0, 256;"
// PERSISTENT: scf.for
// PERSISTENT: mbarrier.try_wait.parity
// PERSISTENT-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// PERSISTENT: llvm.return
module {
  flash.kernel @causal attributes {config = #flash.tile<br = 128, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
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
      %c128_i64 = arith.constant 128 : i64
      %8 = arith.index_cast %qt : index to i64
      %9 = arith.muli %8, %c128_i64 : i64
      %c127_i64 = arith.constant 127 : i64
      %10 = arith.addi %9, %c127_i64 : i64
      %c-2147483648_i64 = arith.constant -2147483648 : i64
      %c2147483647_i64 = arith.constant 2147483647 : i64
      %11 = arith.cmpi sgt, %10, %c2147483647_i64 : i64
      %12 = arith.cmpi slt, %9, %c-2147483648_i64 : i64
      %13 = arith.ori %12, %11 : i1
      %14 = arith.select %13, %c2147483647_i64, %10 : i64
      %15 = arith.select %13, %c-2147483648_i64, %9 : i64
      %c64_i64 = arith.constant 64 : i64
      %16 = arith.index_cast %arg0 : index to i64
      %17 = arith.muli %16, %c64_i64 : i64
      %c63_i64 = arith.constant 63 : i64
      %18 = arith.addi %17, %c63_i64 : i64
      %19 = arith.cmpi sgt, %18, %c2147483647_i64 : i64
      %20 = arith.cmpi slt, %17, %c-2147483648_i64 : i64
      %21 = arith.ori %20, %19 : i1
      %22 = arith.select %21, %c2147483647_i64, %18 : i64
      %23 = arith.select %21, %c-2147483648_i64, %17 : i64
      %24 = arith.cmpi sgt, %22, %15 : i64
      %25 = arith.cmpi sle, %23, %14 : i64
      %true = arith.constant true
      %26 = arith.xori %24, %true : i1
      %27 = arith.addi %9, %c63_i64 : i64
      %28 = arith.cmpi sgt, %27, %c2147483647_i64 : i64
      %29 = arith.ori %12, %28 : i1
      %30 = arith.select %29, %c2147483647_i64, %27 : i64
      %31 = arith.select %29, %c-2147483648_i64, %9 : i64
      %32 = arith.cmpi sle, %23, %30 : i64
      %33 = arith.addi %9, %c64_i64 : i64
      %34 = arith.addi %33, %c63_i64 : i64
      %35 = arith.cmpi sgt, %34, %c2147483647_i64 : i64
      %36 = arith.cmpi slt, %33, %c-2147483648_i64 : i64
      %37 = arith.ori %36, %35 : i1
      %38 = arith.select %37, %c2147483647_i64, %34 : i64
      %39 = arith.select %37, %c-2147483648_i64, %33 : i64
      %40 = arith.cmpi sle, %23, %38 : i64
      %41 = flash.mask %7 at (%b, %h, %qt, %arg0) classified(%26, %25) row_groups(%32, %40) : tensor<128x64xf32> {
      ^bb0(%b_2: i32, %h_3: i32, %i: i32, %j: i32):
        %44 = arith.cmpi sle, %j, %i : i32
        flash.yield %44 : i1
      }
      %42 = flash.mask_key_bounds %41, %arg0, %2 : tensor<128x64xf32>
      %new_max, %new_sum, %probs, %alpha = flash.online_softmax %42, %arg1, %arg2 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
      %43 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<128x64xf32>, tensor<128xf32>, tensor<128x64xf32>, tensor<64x64xbf16>
      scf.yield %new_max, %new_sum, %43 : tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
    }
    %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32>
    flash.store %output, %lse at (%b, %h, %qt) : tensor<128x64xf32>, tensor<128xf32>
  }
}

