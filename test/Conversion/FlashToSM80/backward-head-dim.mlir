// RUN: not flashc-opt %S/../../Dialect/Flash/backward.mlir -flash-to-sm80 2>&1 | FileCheck %s
// RUN: not flashc-opt %S/../../Dialect/Flash/backward.mlir -flash-to-sm90 2>&1 | FileCheck %s --check-prefix=SM90
// The GPU lowerings lower a backward kernel (mma.sync, wgmma) or refuse it with the reason, never drop it.
// CHECK: error: 'flash.backward_kernel' op flash-to-sm80: head dim 16 is not supported by the backward kernel (supported: 64, 96, 128, 256)
// SM90: error: 'flash.backward_kernel' op flash-to-sm90: head dim 16 is not supported by the backward kernel (supported: 64, 96, 128, 256)
