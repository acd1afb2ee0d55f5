// RUN: flashc-opt %s -flash-to-sm90 | FileCheck %s
// RUN: flashc-opt %s -flash-to-sm90=persistent=false | FileCheck %s --check-prefix=OFF
// RUN: flashc-opt %s -flash-to-sm90 -canonicalize -cse -convert-scf-to-cf -convert-arith-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts -nvvm-attach-target="module=flashc_kernels chip=sm_90a features=+ptx80 O=3" -gpu-module-to-binary="format=isa" > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: FileCheck %s --check-prefix=SCHEDULE --input-file=%t.ptx

// The persistent grid (this pass's default for warp-specialized kernels;
// the tools ask for it when they know N, and above N = 8192 only for
// kernels without aux tensors: persistent-with-tensors): causal
// bf16, D = 64, 128 x 64 tiles. Each CTA loops over query tiles; Q comes by
// TMA (a third tensor map) into a buffer with a full and an empty barrier.

// CHECK: grid = persistent,
// CHECK-SAME: tensor_maps = 3,
// Three grid-constant CUtensorMaps (q, k, v) after the aux tensors, then
// the tile counter.
// CHECK-LABEL: llvm.func @causal(
// CHECK-COUNT-3: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}
// CHECK-SAME: !llvm.ptr<1> {llvm.noalias})
// Five full barriers (K, K', V, V', Q: one arrival) and five empty ones
// (one per consumer thread), initialized once; the CTA splits once.
// CHECK-COUNT-5: "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r" %{{[0-9]+}}, %c1_i32
// CHECK-COUNT-5: "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r" %{{[0-9]+}}, %c256_i32
// CHECK: nvvm.barrier0
// CHECK: llvm.cond_br %{{.*}}, ^[[PRODUCER:.*]], ^[[CONSUMER:.*]]
// The producer's thread draws this CTA's tiles: blockIdx.x first, then
// gridDim.x + the tile counter's next value, drawn once the tile before
// has issued its last K/V copy. It writes each into the
// iteration's shared slot before the iteration's Q copy; per tile it waits
// until Q is released, copies Q (128 rows x 128 bytes), scans the visible
// key range and fills the K/V rings. A tile past the last ends the loop:
// queryFull completes without a copy, the CTA counts itself done and the
// last one resets the counter.
// CHECK: ^[[PRODUCER]]:
// CHECK-NEXT: "setmaxnreg.dec.sync.aligned.u32 40;"
// CHECK: nvvm.read.ptx.sreg.nctaid.x
// CHECK: nvvm.read.ptx.sreg.ctaid.x
// CHECK: scf.while
// CHECK: "st.shared.u32 [$0], $1;"
// CHECK: scf.condition
// CHECK-NOT: atom.global.add.u32
// CHECK: arith.divui
// CHECK: arith.remui
// CHECK: arith.subi
// CHECK: mbarrier.try_wait.parity
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: scf.for
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;"
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: mbarrier.try_wait.parity
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;"
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: "atom.global.add.u32 $0, [$1], 1;"
// CHECK-NEXT: arith.addi
// CHECK: scf.yield
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK: atom.acq_rel.gpu.global.add.u32 done, [$0+4], 1;
// CHECK: llvm.return
// The consumers walk the same tiles: wait for Q, ping-pong, the overlapped
// loop, release Q once every Q·Kᵀ is done (before the last P·V), store. No
// CTA barrier and no copy of their own. The last warpgroup opens warpgroup
// 0's first GEMM turn once, before the first tile: the turns run on from
// tile to tile, so no tile opens them again.
// Each iteration waits for queryFull, then reads the tile the producer
// wrote.
// CHECK: ^[[CONSUMER]]:
// CHECK-NEXT: "setmaxnreg.inc.sync.aligned.u32 232;"
// CHECK: scf.if
// CHECK: "bar.arrive $0, 256;"
// CHECK: scf.while
// CHECK: mbarrier.try_wait.parity
// CHECK: "ld.shared.u32 $0, [$1];"
// CHECK: scf.condition
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: "bar.arrive $0, 256;"
// CHECK: scf.for
// CHECK: "bar.sync $0, 256;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// In the loop K(j) and V(j - 1) are released; right after it, Q.
// CHECK-COUNT-3: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK-NEXT: arith.cmpi slt
// CHECK-NEXT: scf.if
// CHECK: wgmma.mma_async
// CHECK: llvm.store
// CHECK-NOT: nvvm.barrier0
// CHECK-NOT: cp.async.bulk
// CHECK-NOT: cp.async.wait
// CHECK: llvm.return

// OFF: grid = per_tile,
// OFF-SAME: tensor_maps = 2,
// OFF-COUNT-2: nvvm.grid_constant
// OFF-NOT: nvvm.grid_constant
// OFF-NOT: atom.global.add
// OFF: nvvm.cp.async.wait.group 0

// The schedule in the PTX text -- the slot's store, the draw, the count and reset.
// SCHEDULE-DAG: st.shared.u32
// SCHEDULE-DAG: atom.global.add.u32
// SCHEDULE-DAG: atom.acq_rel.gpu.global.add.u32
// SCHEDULE-DAG: st.relaxed.gpu.global.u32
// SCHEDULE-DAG: ld.shared.u32

// PTX: .maxnreg 168
// PTX: setmaxnreg.dec.sync.aligned.u32 40;
// PTX: cp.async.bulk.tensor.4d
// PTX: setmaxnreg.inc.sync.aligned.u32 232;
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
