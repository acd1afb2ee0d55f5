//===- FlashDialect.h - The flash dialect -----------------------*- C++ -*-===//
//
// One include for everything of the flash dialect: the dialect, its enums,
// attributes and operations.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_DIALECT_FLASH_IR_FLASHDIALECT_H
#define FLASHC_DIALECT_FLASH_IR_FLASHDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "flashc/Dialect/Flash/IR/FlashDialect.h.inc"
#include "flashc/Dialect/Flash/IR/FlashEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "flashc/Dialect/Flash/IR/FlashAttrs.h.inc"

#include "flashc/Dialect/Flash/IR/FlashInterfaces.h.inc"

#define GET_OP_CLASSES
#include "flashc/Dialect/Flash/IR/FlashOps.h.inc"

namespace flashc::flash {

/// Number of DimRole values; `static_sizes` and `dim_classes` have one entry
/// per role.
constexpr int kNumDimRoles = 6;

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_IR_FLASHDIALECT_H
