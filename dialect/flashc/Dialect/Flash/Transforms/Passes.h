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

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_TRANSFORMS_PASSES_H
