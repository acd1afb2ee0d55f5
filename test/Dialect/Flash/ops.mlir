// RUN: flashc-opt %s | FileCheck %s
// RUN: flashc-opt %s | flashc-opt | FileCheck %s
// RUN: flashc-opt %s -mlir-print-op-generic | flashc-opt | FileCheck %s

// A whole sliding-window kernel: every op of the dialect round-trips.

// CHECK-LABEL: flash.kernel @window
// CHECK-SAME: config = #flash.tile<br = 64, bc = 32, head_dim = 64>
// CHECK-SAME: params = [#flash.param<"window" = 128 : i32>]
// CHECK-SAME: tensors = [#flash.aux_tensor<"doc" : i32 [batch, query_len]>, #flash.aux_tensor<"slopes" : f32 [heads]>]
flash.kernel @window attributes {
    config = #flash.tile<br = 64, bc = 32, head_dim = 64>,
    element_type = bf16,
    params = [#flash.param<"window" = 128 : i32>],
    tensors = [#flash.aux_tensor<"doc" : i32 [batch, query_len]>,
               #flash.aux_tensor<"slopes" : f32 [heads]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, 64>,
    dim_classes = array<i64: 0, 1, 2, 3, 3, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  // CHECK: flash.load_q %{{.*}}, %{{.*}}, %{{.*}} : tensor<64x64xbf16>
  %q = flash.load_q %b, %h, %qt : tensor<64x64xbf16>
  // CHECK: flash.kv_head
  %hkv = flash.kv_head %h
  // CHECK: flash.dim key_len : index
  %m_len = flash.dim key_len : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %nblocks = arith.ceildivui %m_len, %c32 : index
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l0 = arith.constant dense<0.0> : tensor<64xf32>
  %a0 = arith.constant dense<0.0> : tensor<64x64xf32>
  %w = flash.param "window" : i32
  %res:3 = scf.for %kt = %c0 to %nblocks step %c1
      iter_args(%m = %m0, %l = %l0, %acc = %a0) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
    // CHECK: flash.load_kv key
    %k = flash.load_kv key %b, %hkv, %kt : tensor<32x64xbf16>
    // CHECK: flash.load_kv value
    %v = flash.load_kv value %b, %hkv, %kt : tensor<32x64xbf16>
    // CHECK: flash.qk_dot {{.*}} {scale = 1.250000e-01 : f32} : tensor<64x64xbf16>, tensor<32x64xbf16> -> tensor<64x32xf32>
    %s = flash.qk_dot %q, %k {scale = 0.125 : f32} : tensor<64x64xbf16>, tensor<32x64xbf16> -> tensor<64x32xf32>
    // CHECK: flash.score_mod
    // CHECK: flash.aux_load "slopes"
    // CHECK: flash.yield %{{.*}} : f32
    %s1 = flash.score_mod %s at (%b, %h, %qt, %kt) : tensor<64x32xf32> {
    ^bb0(%x: f32, %bi: i32, %hi: i32, %i: i32, %j: i32):
      %slope = flash.aux_load "slopes"[%hi] : f32
      %d = arith.subi %i, %j : i32
      %df = arith.sitofp %d : i32 to f32
      %bias = arith.mulf %slope, %df : f32
      %y = arith.subf %x, %bias : f32
      flash.yield %y : f32
    }
    // CHECK: flash.mask
    // CHECK: flash.yield %{{.*}} : i1
    %s2 = flash.mask %s1 at (%b, %h, %qt, %kt) : tensor<64x32xf32> {
    ^bb0(%bi: i32, %hi: i32, %i: i32, %j: i32):
      %causal = arith.cmpi sle, %j, %i : i32
      %d = arith.subi %i, %j : i32
      %near = arith.cmpi slt, %d, %w : i32
      %di = flash.aux_load "doc"[%bi, %i] : i32
      %dj = flash.aux_load "doc"[%bi, %j] : i32
      %same = arith.cmpi eq, %di, %dj : i32
      %both = arith.andi %causal, %near : i1
      %all = arith.andi %both, %same : i1
      flash.yield %all : i1
    }
    // CHECK: flash.mask_key_bounds
    %s3 = flash.mask_key_bounds %s2, %kt, %m_len : tensor<64x32xf32>
    // CHECK: flash.online_softmax {{.*}} : tensor<64x32xf32>, tensor<64xf32>
    %mn, %ln, %p, %alpha = flash.online_softmax %s3, %m, %l : tensor<64x32xf32>, tensor<64xf32>
    // CHECK: flash.rescale
    %r = flash.rescale %acc, %alpha : tensor<64x64xf32>, tensor<64xf32>
    // CHECK: flash.pv_accumulate
    %an = flash.pv_accumulate %r, %p, %v : tensor<64x64xf32>, tensor<64x32xf32>, tensor<32x64xbf16>
    // CHECK: flash.rescale_accumulate
    %unused = flash.rescale_accumulate %acc, %alpha, %p, %v : tensor<64x64xf32>, tensor<64xf32>, tensor<64x32xf32>, tensor<32x64xbf16>
    scf.yield %mn, %ln, %an : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
  }
  // CHECK: flash.finalize {{.*}} : tensor<64x64xf32>, tensor<64xf32>
  %o, %lse = flash.finalize %res#2, %res#0, %res#1 : tensor<64x64xf32>, tensor<64xf32>
  // CHECK: flash.store {{.*}} at ({{.*}}) : tensor<64x64xf32>, tensor<64xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<64x64xf32>, tensor<64xf32>
}

// CHECK-LABEL: flash.kernel @folded
// CHECK: flash.online_softmax {{.*}} {exp2_scale = 0.180336878 : f32}
// CHECK: flash.finalize {{.*}} {max_scale = 1.250000e-01 : f32}
flash.kernel @folded attributes {
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>, element_type = f32,
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xf32>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xf32>
  %s = flash.qk_dot %q, %k {scale = 1.0 : f32} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %mn, %ln, %p, %alpha = flash.online_softmax %s, %m0, %l0 {exp2_scale = 0.180336878 : f32} : tensor<16x16xf32>, tensor<16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a0, %mn, %ln {max_scale = 0.125 : f32} : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// A split_keys kernel: the split's key blocks, its partial store.
// CHECK-LABEL: flash.kernel @split
// CHECK-SAME: split_keys
// CHECK: ^bb0(%b: index, %h: index, %qt: index, %s: index):
// CHECK: %{{.*}}, %{{.*}} = flash.split_key_range %s of %{{.*}}
// CHECK: flash.store {{.*}} at (%b, %h, %qt) split %s : tensor<16x16xf32>, tensor<16xf32>
flash.kernel @split attributes {
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>, element_type = f32,
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, split_keys} {
^bb0(%b: index, %h: index, %qt: index, %s: index):
  %m = flash.dim key_len : index
  %lo, %hi = flash.split_key_range %s of %m
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a0, %m0, %l0 {max_scale = 1.0 : f32} : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) split %s : tensor<16x16xf32>, tensor<16xf32>
}

// A packed_heads kernel (packed GQA): its head argument is the KV head,
// which K and V load at directly.
// CHECK-LABEL: flash.kernel @packed
// CHECK-SAME: packed_heads
// CHECK: flash.load_q %b, %h, %qt
// CHECK: flash.load_kv key %b, %h, %{{.*}}
flash.kernel @packed attributes {
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>, element_type = f32,
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>, packed_heads} {
^bb0(%b: index, %h: index, %qt: index):
  %q = flash.load_q %b, %h, %qt : tensor<16x16xf32>
  %k = flash.load_kv key %b, %h, %qt : tensor<16x16xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<16xf32>
  %l0 = arith.constant dense<0.0> : tensor<16xf32>
  %a0 = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a0, %m0, %l0 {max_scale = 1.0 : f32} : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}
