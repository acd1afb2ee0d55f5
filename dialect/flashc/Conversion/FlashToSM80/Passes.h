//===- Passes.h - flash to sm80 (mma.sync) lowering -------------*- C++ -*-===//
#ifndef FLASHC_CONVERSION_FLASHTOSM80_PASSES_H
#define FLASHC_CONVERSION_FLASHTOSM80_PASSES_H

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

/// Name of the gpu.module that holds every lowered kernel.
inline constexpr llvm::StringLiteral kSM80ModuleName = "flashc_kernels";
/// Dictionary attribute on that gpu.module: kernel name -> launch info
/// (see flashc/Target/NVPTX/EmitPTX.h).
inline constexpr llvm::StringLiteral kLaunchAttrName = "flashc.launch";

} // namespace flashc

#endif // FLASHC_CONVERSION_FLASHTOSM80_PASSES_H
