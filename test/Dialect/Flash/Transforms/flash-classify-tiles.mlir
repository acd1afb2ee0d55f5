// RUN: flashc-opt %s -split-input-file -flash-classify-tiles | FileCheck %s
// RUN: flashc-opt %s -split-input-file -flash-classify-tiles -flash-classify-tiles | FileCheck %s --check-prefix=TWICE
// RUN: flashc-opt %s -split-input-file -flash-classify-tiles=group-rows=8 | FileCheck %s --check-prefix=BANDS

// Causal: j <= i over i in [qt*16, qt*16+15], j in [kt*8, kt*8+7]. All
// visible iff max j <= min i; some visible iff min j <= max i.

// CHECK-LABEL: flash.kernel @causal
// CHECK:       %[[KTILE:.+]] = flash.dim key_len : index
// CHECK:       %[[QT:.+]] = arith.index_cast %qt : index to i64
// CHECK:       %[[I0:.+]] = arith.muli %[[QT]], %c16_i64 : i64
// CHECK:       %[[I1:.+]] = arith.addi %[[I0]], %c15_i64 : i64
// CHECK:       %[[IHI:.+]] = arith.select %{{.+}}, %{{.+}}, %[[I1]] : i64
// CHECK:       %[[ILO:.+]] = arith.select %{{.+}}, %{{.+}}, %[[I0]] : i64
// CHECK:       %[[KT:.+]] = arith.index_cast %[[KTILE]] : index to i64
// CHECK:       %[[J0:.+]] = arith.muli %[[KT]], %c8_i64 : i64
// CHECK:       %[[J1:.+]] = arith.addi %[[J0]], %c7_i64 : i64
// CHECK:       %[[JHI:.+]] = arith.select %{{.+}}, %{{.+}}, %[[J1]] : i64
// CHECK:       %[[JLO:.+]] = arith.select %{{.+}}, %{{.+}}, %[[J0]] : i64
// CHECK:       %[[NONE:.+]] = arith.cmpi sgt, %[[JHI]], %[[ILO]] : i64
// CHECK:       %[[ANY:.+]] = arith.cmpi sle, %[[JLO]], %[[IHI]] : i64
// CHECK:       %[[ALL:.+]] = arith.xori %[[NONE]], %true : i1
// CHECK:       flash.mask %{{.+}} at (%b, %h, %qt, %[[KTILE]]) classified(%[[ALL]], %[[ANY]])
// TWICE-COUNT-1: classified(
// With bands of 8 rows the region is analysed twice more, for rows
// [qt*16, qt*16+7] and [qt*16+8, qt*16+15]: any visible iff min j <= max i
// of the band.
// BANDS-LABEL: flash.kernel @causal
// BANDS:       %[[I0:.+]] = arith.muli %{{.+}}, %c16_i64 : i64
// BANDS:       %[[B0HI:.+]] = arith.addi %[[I0]], %c7_i64{{.*}} : i64
// BANDS:       %[[B0:.+]] = arith.cmpi sle, %{{.+}}, %{{.+}} : i64
// BANDS:       %[[B1LO:.+]] = arith.addi %[[I0]], %c8_i64{{.*}} : i64
// BANDS:       %[[B1HI:.+]] = arith.addi %[[B1LO]], %c7_i64{{.*}} : i64
// BANDS:       %[[B1:.+]] = arith.cmpi sle, %{{.+}}, %{{.+}} : i64
// BANDS:       flash.mask %{{.+}} classified(%{{.+}}, %{{.+}}) row_groups(%[[B0]], %[[B1]])
flash.kernel @causal attributes {config = #flash.tile<br = 16, bc = 8, head_dim = 16>,
    element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, -1>,
    dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %kt = flash.dim key_len : index
  %s = arith.constant dense<0.0> : tensor<16x8xf32>
  %m = flash.mask %s at (%b, %h, %qt, %kt) : tensor<16x8xf32> {
  ^bb0(%bi: i32, %hi: i32, %i: i32, %j: i32):
    %c = arith.cmpi sle, %j, %i : i32
    flash.yield %c : i1
  }
  %l = arith.constant dense<0.0> : tensor<16xf32>
  %a = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a, %l, %l : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// A data-dependent mask: the aux tensor element is unknown, so nothing is
// proved (both facts come from "may be true" / "may be false" = true), while
// the uniform parameter and the batch index stay exact.

// CHECK-LABEL: flash.kernel @document
// CHECK:       flash.param "limit" : i32
// CHECK:       flash.mask %{{.+}} classified(%{{.+}}, %{{.+}})
// CHECK:         flash.aux_load "doc"
flash.kernel @document attributes {config = #flash.tile<br = 16, bc = 16, head_dim = 16>,
    element_type = f32, params = [#flash.param<"limit" = 3 : i32>],
    tensors = [#flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %s = arith.constant dense<0.0> : tensor<16x16xf32>
  %m = flash.mask %s at (%b, %h, %qt, %qt) : tensor<16x16xf32> {
  ^bb0(%bi: i32, %hi: i32, %i: i32, %j: i32):
    %d = flash.aux_load "doc"[%bi, %j] : i32
    %lim = flash.param "limit" : i32
    %c = arith.cmpi slt, %d, %lim : i32
    flash.yield %c : i1
  }
  %l = arith.constant dense<0.0> : tensor<16xf32>
  %a = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a, %l, %l : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// With a block summary the mask that reads aux tensors also takes the
// run-time class of its tile: full where the intervals or the summary say
// so, empty where either does.
// CHECK-LABEL: flash.kernel @summarized
// CHECK:       %[[CLASS:.+]] = flash.block_class %b, %h, %qt, %qt
// CHECK:       %[[FULL:.+]] = arith.cmpi eq, %[[CLASS]], %c2_i32 : i32
// CHECK:       %[[ALL:.+]] = arith.ori %{{.+}}, %[[FULL]] : i1
// CHECK:       %[[SOME:.+]] = arith.cmpi ne, %[[CLASS]], %c0_i32 : i32
// CHECK:       %[[ANY:.+]] = arith.andi %{{.+}}, %[[SOME]] : i1
// CHECK:       flash.mask %{{.+}} classified(%[[ALL]], %[[ANY]])
// CHECK-LABEL: flash.kernel @summarized_affine
// CHECK-NOT:   flash.block_class
flash.kernel @summarized attributes {block_summary = #flash.block_summary<per_batch = true, per_head = false>,
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>, element_type = f32,
    tensors = [#flash.aux_tensor<"doc" : i32 [batch, query_len]>],
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %s = arith.constant dense<0.0> : tensor<16x16xf32>
  %m = flash.mask %s at (%b, %h, %qt, %qt) : tensor<16x16xf32> {
  ^bb0(%bi: i32, %hi: i32, %i: i32, %j: i32):
    %di = flash.aux_load "doc"[%bi, %i] : i32
    %dj = flash.aux_load "doc"[%bi, %j] : i32
    %c = arith.cmpi eq, %di, %dj : i32
    flash.yield %c : i1
  }
  %l = arith.constant dense<0.0> : tensor<16xf32>
  %a = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a, %l, %l : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}

// A mask that reads no aux tensor keeps the intervals alone.
flash.kernel @summarized_affine attributes {block_summary = #flash.block_summary<per_batch = false, per_head = false>,
    config = #flash.tile<br = 16, bc = 16, head_dim = 16>, element_type = f32,
    static_sizes = array<i64: -1, -1, -1, -1, -1, -1>, dim_classes = array<i64: 0, 1, 2, 3, 4, 5>} {
^bb0(%b: index, %h: index, %qt: index):
  %s = arith.constant dense<0.0> : tensor<16x16xf32>
  %m = flash.mask %s at (%b, %h, %qt, %qt) : tensor<16x16xf32> {
  ^bb0(%bi: i32, %hi: i32, %i: i32, %j: i32):
    %c = arith.cmpi sle, %j, %i : i32
    flash.yield %c : i1
  }
  %l = arith.constant dense<0.0> : tensor<16xf32>
  %a = arith.constant dense<0.0> : tensor<16x16xf32>
  %o, %lse = flash.finalize %a, %l, %l : tensor<16x16xf32>, tensor<16xf32>
  flash.store %o, %lse at (%b, %h, %qt) : tensor<16x16xf32>, tensor<16xf32>
}
