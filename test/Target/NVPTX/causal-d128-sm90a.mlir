// The whole GPU path in process: flash-to-sm80, LLVM dialect, NVPTX.
// RUN: flashc-opt %s -flash-to-sm80 -canonicalize -cse -convert-scf-to-cf -convert-arith-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts \
// RUN:   -nvvm-attach-target="module=flashc_kernels chip=sm_90a features=+ptx80 O=3" \
// RUN:   -gpu-module-to-binary="format=isa" > %t.bin.mlir
// RUN: FileCheck %s < %t.bin.mlir
// The PTX text, unescaped, for ptxas (spills must stay at zero).
// RUN: grep "assembly = " %t.bin.mlir | sed -e 's/.*assembly = "//' -e 's/">\].*//' -e 's/\\0A/\n/g' -e 's/\\09/ /g' -e 's/\\22/"/g' > %t.ptx
// RUN: FileCheck --check-prefix=PTX %s < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck --check-prefix=PTXAS %s %}

// CHECK: gpu.binary @flashc_kernels
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">

// PTX: .target sm_90a
// PTX: .extern .shared .align 16 .b8 __flashc_smem[];
// PTX: .visible .entry causal(
// PTX: .reqntid 128, 1, 1
// PTX-DAG: cp.async.cg.shared.global [%{{.*}}], [%{{.*}}], 16, %{{.*}};
// PTX-DAG: cp.async.commit_group;
// PTX-DAG: cp.async.wait_group 1;
// PTX-DAG: cp.async.wait_group 0;
// PTX-DAG: bar.red.or.pred
// PTX-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// PTX-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX-DAG: shfl.sync.bfly.b32
// PTX-DAG: ex2.approx.ftz.f32
// PTX-DAG: cvt.rn.bf16x2.f32
// PTX-DAG: lg2.approx.ftz.f32
// PTX-DAG: st.global.b32
// PTX-NOT: __nv_
// PTX-NOT: .local

// PTXAS: Compiling entry function 'causal' for 'sm_90a'
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

flash.kernel @causal attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 128>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 128>} {
^bb0(%b: index, %h: index, %qt: index):
  %cst = arith.constant dense<0.000000e+00> : tensor<64x128xf32>
  %cst_0 = arith.constant dense<0.000000e+00> : tensor<64xf32>
  %cst_1 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %0 = flash.load_q %b, %h, %qt : tensor<64x128xbf16>
  %1 = flash.kv_head %h
  %2 = flash.dim key_len : index
  %3 = arith.ceildivui %2, %c64 : index
  %4:3 = scf.for %arg0 = %c0 to %3 step %c1 iter_args(%arg1 = %cst_1, %arg2 = %cst_0, %arg3 = %cst) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>) {
    %5 = flash.load_kv key %b, %1, %arg0 : tensor<64x128xbf16>
    %6 = flash.load_kv value %b, %1, %arg0 : tensor<64x128xbf16>
    %7 = flash.qk_dot %0, %5 {scale = 1.000000e+00 : f32} : tensor<64x128xbf16>, tensor<64x128xbf16> -> tensor<64x64xf32>
    %8 = flash.mask %7 at (%b, %h, %qt, %arg0) : tensor<64x64xf32> {
    ^bb0(%b_2: i32, %h_3: i32, %i: i32, %j: i32):
      %11 = arith.cmpi sle, %j, %i : i32
      flash.yield %11 : i1
    }
    %9 = flash.mask_key_bounds %8, %arg0, %2 : tensor<64x64xf32>
    %new_max, %new_sum, %probs, %alpha = flash.online_softmax %9, %arg1, %arg2 {exp2_scale = 0.127517432 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %10 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<64x128xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xbf16>
    scf.yield %new_max, %new_sum, %10 : tensor<64xf32>, tensor<64xf32>, tensor<64x128xf32>
  }
  %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 0.0883883461 : f32} : tensor<64x128xf32>, tensor<64xf32>
  flash.store %output, %lse at (%b, %h, %qt) : tensor<64x128xf32>, tensor<64xf32>
}
