// RUN: flashc-opt %s -split-input-file -flash-fold-scale | FileCheck %s
// RUN: flashc-opt %s -split-input-file -flash-fold-scale -flash-fold-scale | FileCheck %s

// Scores reach the softmax through masks only: the dot scale (0.125) moves
// into exp2_scale = 0.125 * log2(e), the dot computes raw Q·Kᵀ and finalize
// converts the raw running max back with max_scale = 0.125.

// CHECK-LABEL: flash.kernel @masks_only
// CHECK:       flash.qk_dot {{.*}} {scale = 1.000000e+00 : f32}
// CHECK:       flash.mask
// CHECK:       flash.mask_key_bounds
// CHECK:       flash.online_softmax {{.*}} {exp2_scale = 0.180336878 : f32}
// CHECK:       flash.finalize {{.*}} {max_scale = 1.250000e-01 : f32}
flash.kernel @masks_only attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xbf16>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xbf16>
  %v = flash.load_kv value %b, %h, %qt : tensor<16x16xbf16>
  %len = flash.dim key_len : index
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %s = flash.qk_dot %q, %k {scale = 0.125 : f32} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  %s1 = flash.mask %s at (%b, %h, %qt, %qt) : tensor<16x16xf32> {
  ^bb0(%bi: i32, %hi: i32, %i: i32, %j: i32):
    %c = arith.cmpi sle, %j, %i : i32
    flash.yield %c : i1
  }
  %s2 = flash.mask_key_bounds %s1, %qt, %len : tensor<16x16xf32>
  %mn, %ln, %p, %alpha = flash.online_softmax %s2, %m0, %l0 : tensor<16x16xf32>, tensor<16xf32>
  %an = flash.rescale_accumulate %a0, %alpha, %p, %v : tensor<16x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<16x16xbf16>
  %o, %lse = flash.finalize %an, %mn, %ln : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// A score modification needs the scaled score, so the dot keeps its scale
// and only log2(e) is folded; LSE needs no conversion.

// CHECK-LABEL: flash.kernel @with_score_mod
// CHECK:       flash.qk_dot {{.*}} {scale = 1.250000e-01 : f32}
// CHECK:       flash.online_softmax {{.*}} {exp2_scale = 1.44269502 : f32}
// CHECK:       flash.finalize {{[^{]*}}: tensor<16x16xf32>
flash.kernel @with_score_mod attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xbf16>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xbf16>
  %v = flash.load_kv value %b, %h, %qt : tensor<16x16xbf16>
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %s = flash.qk_dot %q, %k {scale = 0.125 : f32} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  %s1 = flash.score_mod %s at (%b, %h, %qt, %qt) : tensor<16x16xf32> {
  ^bb0(%x: f32, %bi: i32, %hi: i32, %i: i32, %j: i32):
    %t = math.tanh %x : f32
    flash.yield %t : f32
  }
  %mn, %ln, %p, %alpha = flash.online_softmax %s1, %m0, %l0 : tensor<16x16xf32>, tensor<16xf32>
  %an = flash.rescale_accumulate %a0, %alpha, %p, %v : tensor<16x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<16x16xbf16>
  %o, %lse = flash.finalize %an, %mn, %ln : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// A negative scale would flip the running max: only log2(e) is folded.

// CHECK-LABEL: flash.kernel @negative_scale
// CHECK:       flash.qk_dot {{.*}} {scale = -5.000000e-01 : f32}
// CHECK:       flash.online_softmax {{.*}} {exp2_scale = 1.44269502 : f32}
flash.kernel @negative_scale attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xbf16>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xbf16>
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %s = flash.qk_dot %q, %k {scale = -0.5 : f32} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  %mn, %ln, %p, %alpha = flash.online_softmax %s, %m0, %l0 : tensor<16x16xf32>, tensor<16xf32>
  %o, %lse = flash.finalize %p, %mn, %ln : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// Already folded: the pass leaves the kernel alone (running it twice is the
// same as once; see the second RUN line).

// CHECK-LABEL: flash.kernel @already_folded
// CHECK:       flash.qk_dot {{.*}} {scale = 2.000000e+00 : f32}
// CHECK:       flash.online_softmax {{.*}} {exp2_scale = 3.000000e+00 : f32}
flash.kernel @already_folded attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xbf16>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xbf16>
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %s = flash.qk_dot %q, %k {scale = 2.0 : f32} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  %mn, %ln, %p, %alpha = flash.online_softmax %s, %m0, %l0 {exp2_scale = 3.0 : f32} : tensor<16x16xf32>, tensor<16xf32>
  %o, %lse = flash.finalize %p, %mn, %ln : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}
