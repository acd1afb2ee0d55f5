// RUN: flashc-opt %s -flash-to-sm90=overlap-softmax=true | FileCheck %s
// RUN: flashc-opt %s -flash-to-sm90 | FileCheck %s --check-prefix=PLAIN
// RUN: flashc-opt %s -flash-to-sm90=overlap-softmax=true -canonicalize -cse -convert-scf-to-cf -convert-arith-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts -nvvm-attach-target="module=flashc_kernels chip=sm_90a features=+ptx80 O=3" -gpu-module-to-binary="format=isa" | FileCheck %s --check-prefix=PTX

// The softmax of key block j+1 overlaps P·V of block j (overlap-softmax,
// with TMA). Causal bf16, D = 64, 64 x 64 tiles, classified
// mask: Q, K and two V buffers of 8192 bytes, three mbarriers, alignment.

// CHECK: dynamic_shared_bytes = 33816,
// CHECK-LABEL: llvm.func @causal(
// CHECK-COUNT-3: "mbarrier.init.shared::cta.b64 [$0], $1;"
// Before the loop: K(first) and V(first).
// CHECK: scf.for
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: "cp.async.bulk.tensor.4d
// CHECK: scf.for
// Iteration j: K(j)'s phase, S = Q·K(j)ᵀ issued (A from shared memory)...
// CHECK: mbarrier.try_wait.parity
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $64, $65, p, 1, 1, 0, 0;
// CHECK: "wgmma.commit_group.sync.aligned;"
// ...then, after the first iteration, V(j-1)'s phase and P(j-1)·V(j-1)
// (A from registers) behind it; only S is waited for.
// CHECK: scf.if
// CHECK: mbarrier.try_wait.parity
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, {${{[0-9]+}}, ${{[0-9]+}}, ${{[0-9]+}}, ${{[0-9]+}}}, ${{[0-9]+}}, p, 1, 1, 1;
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK-NEXT: "wgmma.wait_group.sync.aligned 1;"
// CHECK: } else {
// CHECK-NEXT: "wgmma.wait_group.sync.aligned 0;"
// K(j+1) replaces K(j) once every warp has S.
// CHECK: nvvm.barrier0
// CHECK: "cp.async.bulk.tensor.4d
// The softmax runs while P·V(j-1) is in flight; then A is waited for, V(j+1)
// replaces V(j-1) and no GEMM is issued until the next iteration.
// CHECK: llvm.nvvm.ex2.approx.ftz.f
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: nvvm.barrier0
// CHECK: "cp.async.bulk.tensor.4d
// CHECK-NOT: wgmma.mma_async
// CHECK: scf.yield
// After the loop: the last block's P·V.
// CHECK: scf.if
// CHECK: mbarrier.try_wait.parity
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 0;"

// Off (the default): one V buffer, two barriers, every GEMM waited for at once.
// PLAIN: dynamic_shared_bytes = 25616,
// PLAIN-COUNT-2: "mbarrier.init.shared::cta.b64 [$0], $1;"
// PLAIN-NOT: "mbarrier.init
// PLAIN-NOT: wgmma.wait_group.sync.aligned 1

// PTX: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// PTX: wgmma.commit_group.sync.aligned
// PTX: wgmma.wait_group.sync.aligned 1
// PTX: ex2.approx.ftz.f32
// PTX: wgmma.wait_group.sync.aligned 0
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
      %c64_i64 = arith.constant 64 : i64
      %8 = arith.index_cast %qt : index to i64
      %9 = arith.muli %8, %c64_i64 : i64
      %c63_i64 = arith.constant 63 : i64
      %10 = arith.addi %9, %c63_i64 : i64
      %c-2147483648_i64 = arith.constant -2147483648 : i64
      %c2147483647_i64 = arith.constant 2147483647 : i64
      %11 = arith.cmpi sgt, %10, %c2147483647_i64 : i64
      %12 = arith.cmpi slt, %9, %c-2147483648_i64 : i64
      %13 = arith.ori %12, %11 : i1
      %14 = arith.select %13, %c2147483647_i64, %10 : i64
      %15 = arith.select %13, %c-2147483648_i64, %9 : i64
      %16 = arith.index_cast %arg0 : index to i64
      %17 = arith.muli %16, %c64_i64 : i64
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
      %27 = flash.mask %7 at (%b, %h, %qt, %arg0) classified(%26, %25) : tensor<64x64xf32> {
      ^bb0(%b_2: i32, %h_3: i32, %i: i32, %j: i32):
        %30 = arith.cmpi sle, %j, %i : i32
        flash.yield %30 : i1
      }
      %28 = flash.mask_key_bounds %27, %arg0, %2 : tensor<64x64xf32>
      %new_max, %new_sum, %probs, %alpha = flash.online_softmax %28, %arg1, %arg2 {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
      %29 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<64x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x64xbf16>
      scf.yield %new_max, %new_sum, %29 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
    }
    %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32>
    flash.store %output, %lse at (%b, %h, %qt) : tensor<64x64xf32>, tensor<64xf32>
  }
