// RUN: flashc-opt %s -split-input-file -flash-fuse-rescale | FileCheck %s

// The rescale feeds only the accumulate: both become one op.

// CHECK-LABEL: flash.kernel @fuse
// CHECK:       scf.for {{.*}} iter_args({{.*}}, %[[ACC:.+]] = %{{.*}})
// CHECK:         %[[M:.+]], %[[L:.+]], %[[P:.+]], %[[ALPHA:.+]] = flash.online_softmax
// CHECK-NOT:     flash.rescale %
// CHECK-NOT:     flash.pv_accumulate
// CHECK:         %[[NEW:.+]] = flash.rescale_accumulate %[[ACC]], %[[ALPHA]], %[[P]], %{{.*}} :
// CHECK:         scf.yield %[[M]], %[[L]], %[[NEW]]
flash.kernel @fuse attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xbf16>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = flash.dim key_len : index
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %r:3 = scf.for %kt = %c0 to %n step %c1 iter_args(%m = %m0, %l = %l0, %acc = %a0)
      -> (tensor<16xf32>, tensor<16xf32>, tensor<16x16xf32>) {
    %k = flash.load_kv key %b, %h, %kt : tensor<16x16xbf16>
    %v = flash.load_kv value %b, %h, %kt : tensor<16x16xbf16>
    %s = flash.qk_dot %q, %k {scale = 0.25 : f32} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
    %mn, %ln, %p, %alpha = flash.online_softmax %s, %m, %l : tensor<16x16xf32>, tensor<16xf32>
    %scaled = flash.rescale %acc, %alpha : tensor<16x16xf32>, tensor<16xf32>
    %an = flash.pv_accumulate %scaled, %p, %v : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xbf16>
    scf.yield %mn, %ln, %an : tensor<16xf32>, tensor<16xf32>, tensor<16x16xf32>
  }
  %o, %lse = flash.finalize %r#2, %r#0, %r#1 : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// diag(α)·A has a second user: fusing would leave it computed twice, so the
// pass keeps both ops.

// CHECK-LABEL: flash.kernel @shared_rescale
// CHECK:       %[[SCALED:.+]] = flash.rescale
// CHECK:       flash.pv_accumulate %[[SCALED]]
// CHECK-NOT:   flash.rescale_accumulate
flash.kernel @shared_rescale attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xbf16>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xbf16>
  %v = flash.load_kv value %b, %h, %qt : tensor<16x16xbf16>
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %a0 = arith.constant dense<1.0> : tensor<16x16xf32>
  %s = flash.qk_dot %q, %k {scale = 0.25 : f32} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  %mn, %ln, %p, %alpha = flash.online_softmax %s, %m0, %l0 : tensor<16x16xf32>, tensor<16xf32>
  %scaled = flash.rescale %a0, %alpha : tensor<16x16xf32>, tensor<16xf32>
  %an = flash.pv_accumulate %scaled, %p, %v : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xbf16>
  %o, %lse = flash.finalize %an, %mn, %ln : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
  %o2, %lse2 = flash.finalize %scaled, %mn, %ln : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o2, %lse2 at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// An accumulate whose accumulator is not rescaled stays as it is.

// CHECK-LABEL: flash.kernel @plain_accumulate
// CHECK:       flash.pv_accumulate
// CHECK-NOT:   flash.rescale_accumulate
flash.kernel @plain_accumulate attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %v = flash.load_kv value %b, %h, %qt : tensor<16x16xbf16>
  %p = arith.constant dense<0.5> : tensor<16x16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %l = arith.constant dense<1.0> : tensor<16xf32>
  %an = flash.pv_accumulate %a0, %p, %v : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xbf16>
  %o, %lse = flash.finalize %an, %l, %l : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}
