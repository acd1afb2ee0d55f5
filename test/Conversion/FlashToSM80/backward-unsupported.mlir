// RUN: not flashc-opt %S/../../Dialect/Flash/backward.mlir -flash-to-sm80 2>&1 | FileCheck %s
// RUN: not flashc-opt %S/../../Dialect/Flash/backward.mlir -flash-to-sm90 2>&1 | FileCheck %s
// The GPU lowerings refuse a backward kernel by name instead of dropping it.
// CHECK: error: 'flash.backward_kernel' op has no GPU lowering yet (the backward pass runs on the interpreter only)
