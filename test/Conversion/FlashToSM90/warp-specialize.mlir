// RUN: flashc-opt %s '-flash-to-sm90=warp-specialize=on persistent=false' | FileCheck %s
// RUN: flashc-opt %s '-flash-to-sm90=warp-specialize=on persistent=false ping-pong=false' | FileCheck %s --check-prefix=NOPINGPONG
// RUN: flashc-opt %s '-flash-to-sm90=warp-specialize=on persistent=false kv-copy=cp.async' | FileCheck %s --check-prefix=NOTMA
// RUN: flashc-opt %s '-flash-to-sm90=warp-specialize=on persistent=false' -canonicalize -cse -convert-scf-to-cf -convert-arith-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts -nvvm-attach-target="module=flashc_kernels chip=sm_90a features=+ptx80 O=3" -gpu-module-to-binary="format=isa" | FileCheck %s --check-prefix=PTX

// Warp specialization: causal bf16, D = 64, 128 x 64 tiles. Two consumer
// warpgroups and a producer warpgroup (384 threads); Q 16384 bytes, two K
// and two V slots of 8192, eight mbarriers, alignment.

// CHECK: threads_per_block = 384, dynamic_shared_bytes = 50240,
// CHECK-SAME: num_warps = 12,
// setmaxnreg needs a register cap at entry: 64K / 384 rounded down to 8.
// CHECK-LABEL: llvm.func @causal(
// CHECK-SAME: nvvm.maxnreg = 168 : i32
// Full barriers (one arrival) and empty barriers (one per consumer thread).
// CHECK-COUNT-4: "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r" %{{[0-9]+}}, %c1_i32
// CHECK-COUNT-4: "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r" %{{[0-9]+}}, %c256_i32
// Every thread copies Q and waits for it; then the CTA splits.
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: nvvm.barrier0
// CHECK: llvm.cond_br %{{.*}}, ^[[PRODUCER:.*]], ^[[CONSUMER:.*]]
// The producer: 24 registers; one thread waits for each slot to be empty
// (parity flipped), arms its full barrier and copies K, then V.
// CHECK: ^[[PRODUCER]]:
// CHECK-NEXT: "setmaxnreg.dec.sync.aligned.u32 24;"
// CHECK: scf.if
// CHECK: scf.for
// CHECK: arith.xori
// CHECK: mbarrier.try_wait.parity
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;"
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: arith.xori
// CHECK: mbarrier.try_wait.parity
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;"
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: llvm.return
// The consumers: 240 registers; the last warpgroup lets warpgroup 0 go
// first (ping-pong, named barrier 1).
// CHECK: ^[[CONSUMER]]:
// CHECK-NEXT: "setmaxnreg.inc.sync.aligned.u32 240;"
// CHECK: scf.if
// CHECK: "bar.arrive $0, 256;"
// In the loop: K(j)'s full barrier, this warpgroup's turn, S(j), P·V(j-1)
// behind it, the next warpgroup's turn, then K(j)'s slot released; no CTA
// barrier and no copy from here on.
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK: "bar.sync $0, 256;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK: scf.if
// CHECK: mbarrier.try_wait.parity
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: "bar.arrive $0, 256;"
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// After the softmax: P·V(j-1) waited for, V(j-1)'s slot released (not in
// the first iteration).
// CHECK: llvm.nvvm.ex2.approx.ftz.f
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: scf.if
// CHECK-NEXT: arith.constant
// CHECK: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK-NOT: nvvm.barrier0
// CHECK-NOT: cp.async.bulk
// CHECK: llvm.return

// NOPINGPONG: "setmaxnreg.inc.sync.aligned.u32 240;"
// NOPINGPONG-NOT: bar.sync
// NOPINGPONG-NOT: bar.arrive
// NOPINGPONG: llvm.return

// Without TMA there is nothing to specialize: the plain 256-thread kernel.
// NOTMA: threads_per_block = 256,
// NOTMA-NOT: setmaxnreg

// PTX: .maxnreg 168
// PTX: setmaxnreg.dec.sync.aligned.u32 24;
// PTX: setmaxnreg.inc.sync.aligned.u32 240;
// PTX: wgmma.wait_group.sync.aligned 1;
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
      %27 = flash.mask %7 at (%b, %h, %qt, %arg0) classified(%26, %25) : tensor<128x64xf32> {
      ^bb0(%b_2: i32, %h_3: i32, %i: i32, %j: i32):
        %30 = arith.cmpi sle, %j, %i : i32
        flash.yield %30 : i1
      }
      %28 = flash.mask_key_bounds %27, %arg0, %2 : tensor<128x64xf32>
      %new_max, %new_sum, %probs, %alpha = flash.online_softmax %28, %arg1, %arg2 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
      %29 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<128x64xf32>, tensor<128xf32>, tensor<128x64xf32>, tensor<64x64xbf16>
      scf.yield %new_max, %new_sum, %29 : tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
    }
    %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32>
    flash.store %output, %lse at (%b, %h, %qt) : tensor<128x64xf32>, tensor<128xf32>
  }
