// RUN: flashc-opt %s --split-input-file --flash-to-sm90=deterministic=true | FileCheck %s
// The deterministic backward's dQ turns. Where the mask's block facts take
// the key block from the kernel's key-tile argument alone, a query tile
// waits for the nearest later key block that sees it (a ballot over the
// facts of 32 key blocks at a time) and a skipped tile waits for nothing:
// one acquire loop. Thread 0 waits for the tile's turn once the tile is
// staged, right before its bulk reduce, then waits for the reduce and
// passes the turn on, with no CTA barrier in between.
// CHECK-LABEL: llvm.func @sliding_window_bwd(
// CHECK: nvvm.vote.sync ballot
// CHECK: ld.global.acquire.gpu.b32
// CHECK-NOT: nvvm.barrier0
// CHECK: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// CHECK-NOT: nvvm.barrier0
// CHECK: cp.async.bulk.wait_group 0
// CHECK-NOT: nvvm.barrier0
// CHECK: fence.acq_rel.gpu
// CHECK-NOT: nvvm.barrier0
// CHECK: st.global.release.gpu.b32
// CHECK-NOT: ld.global.acquire.gpu.b32
// CHECK: llvm.func @sliding_window_bwd_convert(
module {
  flash.backward_kernel @sliding_window attributes {config = #flash.tile<br = 32, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, element_type = bf16, params = [#flash.param<"window" = 128 : i32>], static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} preprocess {
  ^bb0(%b: index, %h: index, %qt: index):
    %0 = flash.load_rows output %b, %h, %qt : tensor<32x64xbf16>
    %1 = flash.load_rows output_grad %b, %h, %qt : tensor<32x64xbf16>
    %2 = flash.row_dot %1, %0 : tensor<32x64xbf16> -> tensor<32xf32>
    flash.store_delta %2 at (%b, %h, %qt) : tensor<32xf32>
  } main {
  ^bb0(%b: index, %kv_head: index, %kt: index):
    %0 = flash.load_kv key %b, %kv_head, %kt : tensor<64x64xbf16>
    %1 = flash.load_kv value %b, %kv_head, %kt : tensor<64x64xbf16>
    %2 = flash.dim heads : index
    %3 = flash.dim kv_heads : index
    %4 = flash.dim query_len : index
    %5 = flash.dim key_len : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %6 = arith.divui %2, %3 : index
    %c32 = arith.constant 32 : index
    %7 = arith.ceildivui %4, %c32 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %8:2 = scf.for %arg0 = %c0 to %6 step %c1 iter_args(%arg1 = %cst, %arg2 = %cst) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
      %9 = arith.muli %kv_head, %6 : index
      %10 = arith.addi %9, %arg0 : index
      %11:2 = scf.for %arg3 = %c0 to %7 step %c1 iter_args(%arg4 = %arg1, %arg5 = %arg2) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
        %12 = flash.load_q %b, %10, %arg3 : tensor<32x64xbf16>
        %13 = flash.load_rows output_grad %b, %10, %arg3 : tensor<32x64xbf16>
        %14 = flash.load_row_stat lse %b, %10, %arg3 : tensor<32xf32>
        %15 = flash.load_row_stat delta %b, %10, %arg3 : tensor<32xf32>
        %16 = flash.qk_dot %12, %0 {scale = 1.250000e-01 : f32} : tensor<32x64xbf16>, tensor<64x64xbf16> -> tensor<32x64xf32>
        %c32_i64 = arith.constant 32 : i64
        %17 = arith.index_cast %arg3 : index to i64
        %18 = arith.muli %17, %c32_i64 : i64
        %c31_i64 = arith.constant 31 : i64
        %19 = arith.addi %18, %c31_i64 : i64
        %c-2147483648_i64 = arith.constant -2147483648 : i64
        %c2147483647_i64 = arith.constant 2147483647 : i64
        %20 = arith.cmpi sgt, %19, %c2147483647_i64 : i64
        %21 = arith.cmpi slt, %18, %c-2147483648_i64 : i64
        %22 = arith.ori %21, %20 : i1
        %23 = arith.select %22, %c2147483647_i64, %19 : i64
        %24 = arith.select %22, %c-2147483648_i64, %18 : i64
        %c64_i64 = arith.constant 64 : i64
        %25 = arith.index_cast %kt : index to i64
        %26 = arith.muli %25, %c64_i64 : i64
        %c63_i64 = arith.constant 63 : i64
        %27 = arith.addi %26, %c63_i64 : i64
        %28 = arith.cmpi sgt, %27, %c2147483647_i64 : i64
        %29 = arith.cmpi slt, %26, %c-2147483648_i64 : i64
        %30 = arith.ori %29, %28 : i1
        %31 = arith.select %30, %c2147483647_i64, %27 : i64
        %32 = arith.select %30, %c-2147483648_i64, %26 : i64
        %33 = arith.cmpi sgt, %31, %24 : i64
        %34 = arith.cmpi sle, %32, %23 : i64
        %35 = arith.subi %23, %32 : i64
        %36 = arith.subi %24, %31 : i64
        %37 = arith.cmpi sgt, %35, %c2147483647_i64 : i64
        %38 = arith.cmpi slt, %36, %c-2147483648_i64 : i64
        %39 = arith.ori %38, %37 : i1
        %40 = arith.select %39, %c2147483647_i64, %35 : i64
        %41 = arith.select %39, %c-2147483648_i64, %36 : i64
        %42 = flash.param "window" : i32
        %43 = arith.extsi %42 : i32 to i64
        %44 = arith.cmpi sge, %40, %43 : i64
        %45 = arith.cmpi slt, %41, %43 : i64
        %46 = arith.ori %33, %44 : i1
        %47 = arith.andi %34, %45 : i1
        %true = arith.constant true
        %48 = arith.xori %46, %true : i1
        %49 = flash.mask %16 at (%b, %10, %arg3, %kt) classified(%48, %47) : tensor<32x64xf32> {
        ^bb0(%b_0: i32, %h: i32, %i: i32, %j: i32):
          %56 = arith.cmpi sle, %j, %i : i32
          %57 = arith.subi %i, %j : i32
          %58 = arith.cmpi slt, %57, %42 : i32
          %59 = arith.andi %56, %58 : i1
          flash.yield %59 : i1
        }
        %50 = flash.mask_key_bounds %49, %kt, %5 : tensor<32x64xf32>
        %51 = flash.recompute_probs %50, %14 : tensor<32x64xf32>, tensor<32xf32>
        %52 = flash.output_grad_dot %13, %1 : tensor<32x64xbf16>, tensor<64x64xbf16> -> tensor<32x64xf32>
        %53 = flash.softmax_grad %51, %52, %15 : tensor<32x64xf32>, tensor<32xf32>
        %54 = flash.accumulate_transposed %arg5, %51, %13 : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xbf16>
        %55 = flash.accumulate_transposed %arg4, %53, %12 : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xbf16>
        flash.query_grad_add %53, %0 at (%b, %10, %arg3) {scale = 1.250000e-01 : f32} : tensor<32x64xf32>, tensor<64x64xbf16>
        scf.yield %55, %54 : tensor<64x64xf32>, tensor<64x64xf32>
      }
      scf.yield %11#0, %11#1 : tensor<64x64xf32>, tensor<64x64xf32>
    }
    flash.store_key_grads %8#0, %8#1 at (%b, %kv_head, %kt) {key_scale = 1.250000e-01 : f32} : tensor<64x64xf32>
  }
}

// -----
// A fact computed from the key block outside the query loop (here K's
// first row) would keep this CTA's value for other key blocks: the search
// does not apply, and a skipped tile still waits for its turn and passes
// it on (two acquire loops, no ballot).
// CHECK-LABEL: llvm.func @hoisted_key_bounds_bwd(
// CHECK-NOT: nvvm.vote.sync
// CHECK: ld.global.acquire.gpu.b32
// CHECK-NOT: nvvm.vote.sync
// CHECK: ld.global.acquire.gpu.b32
// CHECK-NOT: nvvm.vote.sync
// CHECK: llvm.func @hoisted_key_bounds_bwd_convert(
module {
  flash.backward_kernel @hoisted_key_bounds attributes {config = #flash.tile<br = 32, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, element_type = bf16, params = [#flash.param<"window" = 128 : i32>], static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} preprocess {
  ^bb0(%b: index, %h: index, %qt: index):
    %0 = flash.load_rows output %b, %h, %qt : tensor<32x64xbf16>
    %1 = flash.load_rows output_grad %b, %h, %qt : tensor<32x64xbf16>
    %2 = flash.row_dot %1, %0 : tensor<32x64xbf16> -> tensor<32xf32>
    flash.store_delta %2 at (%b, %h, %qt) : tensor<32xf32>
  } main {
  ^bb0(%b: index, %kv_head: index, %kt: index):
    %0 = flash.load_kv key %b, %kv_head, %kt : tensor<64x64xbf16>
    %1 = flash.load_kv value %b, %kv_head, %kt : tensor<64x64xbf16>
    %2 = flash.dim heads : index
    %3 = flash.dim kv_heads : index
    %4 = flash.dim query_len : index
    %5 = flash.dim key_len : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %6 = arith.divui %2, %3 : index
    %c32 = arith.constant 32 : index
    %7 = arith.ceildivui %4, %c32 : index
    %c64_i64 = arith.constant 64 : i64
    %25 = arith.index_cast %kt : index to i64
    %26 = arith.muli %25, %c64_i64 : i64
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %8:2 = scf.for %arg0 = %c0 to %6 step %c1 iter_args(%arg1 = %cst, %arg2 = %cst) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
      %9 = arith.muli %kv_head, %6 : index
      %10 = arith.addi %9, %arg0 : index
      %11:2 = scf.for %arg3 = %c0 to %7 step %c1 iter_args(%arg4 = %arg1, %arg5 = %arg2) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
        %12 = flash.load_q %b, %10, %arg3 : tensor<32x64xbf16>
        %13 = flash.load_rows output_grad %b, %10, %arg3 : tensor<32x64xbf16>
        %14 = flash.load_row_stat lse %b, %10, %arg3 : tensor<32xf32>
        %15 = flash.load_row_stat delta %b, %10, %arg3 : tensor<32xf32>
        %16 = flash.qk_dot %12, %0 {scale = 1.250000e-01 : f32} : tensor<32x64xbf16>, tensor<64x64xbf16> -> tensor<32x64xf32>
        %c32_i64 = arith.constant 32 : i64
        %17 = arith.index_cast %arg3 : index to i64
        %18 = arith.muli %17, %c32_i64 : i64
        %c31_i64 = arith.constant 31 : i64
        %19 = arith.addi %18, %c31_i64 : i64
        %c-2147483648_i64 = arith.constant -2147483648 : i64
        %c2147483647_i64 = arith.constant 2147483647 : i64
        %20 = arith.cmpi sgt, %19, %c2147483647_i64 : i64
        %21 = arith.cmpi slt, %18, %c-2147483648_i64 : i64
        %22 = arith.ori %21, %20 : i1
        %23 = arith.select %22, %c2147483647_i64, %19 : i64
        %24 = arith.select %22, %c-2147483648_i64, %18 : i64
        %c63_i64 = arith.constant 63 : i64
        %27 = arith.addi %26, %c63_i64 : i64
        %28 = arith.cmpi sgt, %27, %c2147483647_i64 : i64
        %29 = arith.cmpi slt, %26, %c-2147483648_i64 : i64
        %30 = arith.ori %29, %28 : i1
        %31 = arith.select %30, %c2147483647_i64, %27 : i64
        %32 = arith.select %30, %c-2147483648_i64, %26 : i64
        %33 = arith.cmpi sgt, %31, %24 : i64
        %34 = arith.cmpi sle, %32, %23 : i64
        %35 = arith.subi %23, %32 : i64
        %36 = arith.subi %24, %31 : i64
        %37 = arith.cmpi sgt, %35, %c2147483647_i64 : i64
        %38 = arith.cmpi slt, %36, %c-2147483648_i64 : i64
        %39 = arith.ori %38, %37 : i1
        %40 = arith.select %39, %c2147483647_i64, %35 : i64
        %41 = arith.select %39, %c-2147483648_i64, %36 : i64
        %42 = flash.param "window" : i32
        %43 = arith.extsi %42 : i32 to i64
        %44 = arith.cmpi sge, %40, %43 : i64
        %45 = arith.cmpi slt, %41, %43 : i64
        %46 = arith.ori %33, %44 : i1
        %47 = arith.andi %34, %45 : i1
        %true = arith.constant true
        %48 = arith.xori %46, %true : i1
        %49 = flash.mask %16 at (%b, %10, %arg3, %kt) classified(%48, %47) : tensor<32x64xf32> {
        ^bb0(%b_0: i32, %h: i32, %i: i32, %j: i32):
          %56 = arith.cmpi sle, %j, %i : i32
          %57 = arith.subi %i, %j : i32
          %58 = arith.cmpi slt, %57, %42 : i32
          %59 = arith.andi %56, %58 : i1
          flash.yield %59 : i1
        }
        %50 = flash.mask_key_bounds %49, %kt, %5 : tensor<32x64xf32>
        %51 = flash.recompute_probs %50, %14 : tensor<32x64xf32>, tensor<32xf32>
        %52 = flash.output_grad_dot %13, %1 : tensor<32x64xbf16>, tensor<64x64xbf16> -> tensor<32x64xf32>
        %53 = flash.softmax_grad %51, %52, %15 : tensor<32x64xf32>, tensor<32xf32>
        %54 = flash.accumulate_transposed %arg5, %51, %13 : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xbf16>
        %55 = flash.accumulate_transposed %arg4, %53, %12 : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xbf16>
        flash.query_grad_add %53, %0 at (%b, %10, %arg3) {scale = 1.250000e-01 : f32} : tensor<32x64xf32>, tensor<64x64xbf16>
        scf.yield %55, %54 : tensor<64x64xf32>, tensor<64x64xf32>
      }
      scf.yield %11#0, %11#1 : tensor<64x64xf32>, tensor<64x64xf32>
    }
    flash.store_key_grads %8#0, %8#1 at (%b, %kv_head, %kt) {key_scale = 1.250000e-01 : f32} : tensor<64x64xf32>
  }
}
