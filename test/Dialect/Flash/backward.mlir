// RUN: flashc-opt %s | FileCheck %s
// RUN: flashc-opt %s | flashc-opt | FileCheck %s
// RUN: flashc-opt %s -mlir-print-op-generic | flashc-opt | FileCheck %s

// A backward kernel with a score mod that reads a learnable bias and a
// causal mask: every backward op round-trips.

// CHECK-LABEL: flash.backward_kernel @biased
// CHECK-SAME: config = #flash.tile<br = 32, bc = 16, head_dim = 16>
flash.backward_kernel @biased attributes {
    config = #flash.tile<br = 32, bc = 16, head_dim = 16>,
    element_type = bf16,
    tensors = [#flash.aux_tensor<"bias" : f32 [heads, 64]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 16>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} preprocess {
// CHECK: preprocess {
// CHECK-NEXT: ^bb0(%b: index, %h: index, %qt: index):
^bb0(%b: index, %h: index, %qt: index):
  // CHECK: flash.load_rows output %b, %h, %qt : tensor<32x16xbf16>
  %o = flash.load_rows output %b, %h, %qt : tensor<32x16xbf16>
  // CHECK: flash.load_rows output_grad %b, %h, %qt : tensor<32x16xbf16>
  %do = flash.load_rows output_grad %b, %h, %qt : tensor<32x16xbf16>
  // CHECK: flash.row_dot %{{.*}}, %{{.*}} : tensor<32x16xbf16> -> tensor<32xf32>
  %delta = flash.row_dot %do, %o : tensor<32x16xbf16> -> tensor<32xf32>
  // CHECK: flash.store_delta %{{.*}} at (%b, %h, %qt) : tensor<32xf32>
  flash.store_delta %delta at (%b, %h, %qt) : tensor<32xf32>
} main {
// CHECK: main {
// CHECK-NEXT: ^bb0(%b: index, %kv_head: index, %kt: index):
^bb0(%b: index, %hkv: index, %kt: index):
  %k = flash.load_kv key %b, %hkv, %kt : tensor<16x16xbf16>
  %v = flash.load_kv value %b, %hkv, %kt : tensor<16x16xbf16>
  %qt = arith.constant 0 : index
  %mlen = flash.dim key_len : index
  %zero = arith.constant dense<0.0> : tensor<16x16xf32>
  %q = flash.load_q %b, %hkv, %qt : tensor<32x16xbf16>
  %do = flash.load_rows output_grad %b, %hkv, %qt : tensor<32x16xbf16>
  // CHECK: flash.load_row_stat lse
  %lse = flash.load_row_stat lse %b, %hkv, %qt : tensor<32xf32>
  // CHECK: flash.load_row_stat delta
  %delta = flash.load_row_stat delta %b, %hkv, %qt : tensor<32xf32>
  %s = flash.qk_dot %q, %k {scale = 0.25 : f32} : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  %z = flash.score_mod %s at (%b, %hkv, %qt, %kt) : tensor<32x16xf32> {
  ^bb0(%x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    %d = arith.subi %i, %j : i32
    %r = flash.aux_load "bias"[%hh, %d] : f32
    %y = arith.addf %x, %r : f32
    flash.yield %y : f32
  }
  %zm = flash.mask %z at (%b, %hkv, %qt, %kt) : tensor<32x16xf32> {
  ^bb0(%bb: i32, %hh: i32, %i: i32, %j: i32):
    %c = arith.cmpi sle, %j, %i : i32
    flash.yield %c : i1
  }
  %zb = flash.mask_key_bounds %zm, %kt, %mlen : tensor<32x16xf32>
  // CHECK: flash.recompute_probs %{{.*}}, %{{.*}} : tensor<32x16xf32>, tensor<32xf32>
  %p = flash.recompute_probs %zb, %lse : tensor<32x16xf32>, tensor<32xf32>
  // CHECK: flash.output_grad_dot %{{.*}}, %{{.*}} : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  %dp = flash.output_grad_dot %do, %v : tensor<32x16xbf16>, tensor<16x16xbf16> -> tensor<32x16xf32>
  // CHECK: flash.softmax_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<32x16xf32>, tensor<32xf32>
  %dz = flash.softmax_grad %p, %dp, %delta : tensor<32x16xf32>, tensor<32xf32>
  // CHECK: flash.score_mod_grad %{{.*}}, %{{.*}} at (%b, %kv_head, %{{.*}}, %kt) : tensor<32x16xf32> {
  // CHECK-NEXT: ^bb0(%g: f32, %s: f32, %b_{{.*}}: i32, %h: i32, %i: i32, %j: i32):
  // CHECK: flash.aux_grad_add "bias"[%h, %{{.*}}] %{{.*}} : f32
  %ds = flash.score_mod_grad %dz, %s at (%b, %hkv, %qt, %kt) : tensor<32x16xf32> {
  ^bb0(%g: f32, %x: f32, %bb: i32, %hh: i32, %i: i32, %j: i32):
    %d = arith.subi %i, %j : i32
    flash.aux_grad_add "bias"[%hh, %d] %g : f32
    flash.yield %g : f32
  }
  // CHECK: flash.accumulate_transposed %{{.*}}, %{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xbf16>
  %dv = flash.accumulate_transposed %zero, %p, %do : tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xbf16>
  %dk = flash.accumulate_transposed %zero, %ds, %q : tensor<16x16xf32>, tensor<32x16xf32>, tensor<32x16xbf16>
  // CHECK: flash.query_grad_add %{{.*}}, %{{.*}} at (%b, %kv_head, %{{.*}}) {scale = 2.500000e-01 : f32} : tensor<32x16xf32>, tensor<16x16xbf16>
  flash.query_grad_add %ds, %k at (%b, %hkv, %qt) {scale = 0.25 : f32} : tensor<32x16xf32>, tensor<16x16xbf16>
  // CHECK: flash.store_key_grads %{{.*}}, %{{.*}} at (%b, %kv_head, %kt) {key_scale = 2.500000e-01 : f32} : tensor<16x16xf32>
  flash.store_key_grads %dk, %dv at (%b, %hkv, %kt) {key_scale = 0.25 : f32} : tensor<16x16xf32>
}
