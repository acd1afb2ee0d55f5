// Causal with classified tiles, D = 128, Br128Bc32: the default is 4 warps
// of 32 query rows (two m16 row blocks per warp); ptxas must not spill.
// RUN: flashc-opt %s -flash-to-sm80 -canonicalize -cse -convert-scf-to-cf -convert-arith-to-llvm -convert-cf-to-llvm -reconcile-unrealized-casts \
// RUN:   -nvvm-attach-target="module=flashc_kernels chip=sm_90a features=+ptx80 O=3" \
// RUN:   -gpu-module-to-binary="format=isa" > %t.bin.mlir
// RUN: grep "assembly = " %t.bin.mlir | sed -e 's/.*assembly = "//' -e 's/">\].*//' -e 's/\\0A/\n/g' -e 's/\\09/ /g' -e 's/\\22/"/g' > %t.ptx
// RUN: FileCheck --check-prefix=PTX %s < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck --check-prefix=PTXAS %s %}

// PTX: .visible .entry causal(
// PTX: .reqntid 128, 1, 1
// Longest first, and no CTA vote: the classification decides the skips.
// PTX: mov.u32 %r{{[0-9]+}}, %nctaid.x;
// PTX-NOT: bar.red.or
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX-NOT: .local

// PTXAS: Compiling entry function 'causal' for 'sm_90a'
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

module {
  flash.kernel @causal attributes {config = #flash.tile<br = 128, bc = 32, head_dim = 128>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 128>} {
  ^bb0(%b: index, %h: index, %qt: index):
    %cst = arith.constant dense<0.000000e+00> : tensor<128x128xf32>
    %cst_0 = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_1 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %c32 = arith.constant 32 : index
    %c1 = arith.constant 1 : index
    %c0 = arith.constant 0 : index
    %0 = flash.load_q %b, %h, %qt : tensor<128x128xbf16>
    %1 = flash.kv_head %h
    %2 = flash.dim key_len : index
    %3 = arith.ceildivui %2, %c32 : index
    %4:3 = scf.for %arg0 = %c0 to %3 step %c1 iter_args(%arg1 = %cst_1, %arg2 = %cst_0, %arg3 = %cst) -> (tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>) {
      %5 = flash.load_kv key %b, %1, %arg0 : tensor<32x128xbf16>
      %6 = flash.load_kv value %b, %1, %arg0 : tensor<32x128xbf16>
      %7 = flash.qk_dot %0, %5 {scale = 1.000000e+00 : f32} : tensor<128x128xbf16>, tensor<32x128xbf16> -> tensor<128x32xf32>
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
      %c32_i64 = arith.constant 32 : i64
      %16 = arith.index_cast %arg0 : index to i64
      %17 = arith.muli %16, %c32_i64 : i64
      %c31_i64 = arith.constant 31 : i64
      %18 = arith.addi %17, %c31_i64 : i64
      %19 = arith.cmpi sgt, %18, %c2147483647_i64 : i64
      %20 = arith.cmpi slt, %17, %c-2147483648_i64 : i64
      %21 = arith.ori %20, %19 : i1
      %22 = arith.select %21, %c2147483647_i64, %18 : i64
      %23 = arith.select %21, %c-2147483648_i64, %17 : i64
      %24 = arith.cmpi sgt, %22, %15 : i64
      %25 = arith.cmpi sle, %23, %14 : i64
      %true = arith.constant true
      %26 = arith.xori %24, %true : i1
      %27 = flash.mask %7 at (%b, %h, %qt, %arg0) classified(%26, %25) : tensor<128x32xf32> {
      ^bb0(%b_2: i32, %h_3: i32, %i: i32, %j: i32):
        %30 = arith.cmpi sle, %j, %i : i32
        flash.yield %30 : i1
      }
      %28 = flash.mask_key_bounds %27, %arg0, %2 : tensor<128x32xf32>
      %new_max, %new_sum, %probs, %alpha = flash.online_softmax %28, %arg1, %arg2 {exp2_scale = 0.127517432 : f32} : tensor<128x32xf32>, tensor<128xf32>
      %29 = flash.rescale_accumulate %arg3, %alpha, %probs, %6 : tensor<128x128xf32>, tensor<128xf32>, tensor<128x32xf32>, tensor<32x128xbf16>
      scf.yield %new_max, %new_sum, %29 : tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>
    }
    %output, %lse = flash.finalize %4#2, %4#0, %4#1 {max_scale = 0.0883883461 : f32} : tensor<128x128xf32>, tensor<128xf32>
    flash.store %output, %lse at (%b, %h, %qt) : tensor<128x128xf32>, tensor<128xf32>
  }
}

