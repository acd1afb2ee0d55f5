//===- Passes.h - flash to sm80 (mma.sync) lowering -------------*- C++ -*-===//
#ifndef FLASHC_CONVERSION_FLASHTOSM80_PASSES_H
#define FLASHC_CONVERSION_FLASHTOSM80_PASSES_H

#include "flashc/Conversion/FlashToNVVM/KernelModule.h"
#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/Pass.h"

namespace flashc {

#define GEN_PASS_DECL
#include "flashc/Conversion/FlashToSM80/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashc/Conversion/FlashToSM80/Passes.h.inc"

namespace sm80 {
/// Lowers every flash.backward_kernel of `module` to its three mma.sync
/// kernels (<name>_bwd_preprocess, <name>_bwd, <name>_bwd_convert) in
/// gpu.module @flashc_kernels, with their #flash.launch; errors name `pass`.
/// `deterministic`: dQ adds in key-block order (see BackwardEmitter.h);
/// `stageAuxGrads`: aux gradient adds staged per tile in shared memory.
mlir::LogicalResult lowerBackwardKernels(mlir::ModuleOp module, llvm::StringRef pass,
                                         bool deterministic = false,
                                         bool stageAuxGrads = false);
} // namespace sm80

} // namespace flashc

#endif // FLASHC_CONVERSION_FLASHTOSM80_PASSES_H
