//===- Passes.h - Passes over the flash dialect -----------------*- C++ -*-===//
#ifndef FLASHC_DIALECT_FLASH_TRANSFORMS_PASSES_H
#define FLASHC_DIALECT_FLASH_TRANSFORMS_PASSES_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "mlir/Pass/Pass.h"

namespace flashc::flash {

#define GEN_PASS_DECL
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"

/// The flash-level pipeline every tool runs before interpreting or lowering:
/// flash-fuse-rescale, flash-classify-tiles, then flash-fold-scale, on each
/// flash.kernel; flash-classify-tiles on each flash.backward_kernel.
void buildFlashPipeline(mlir::OpPassManager &pm);

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_TRANSFORMS_PASSES_H
