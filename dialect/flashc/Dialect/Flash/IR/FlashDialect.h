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

/// The classes of a block summary's bytes (`flash.block_class`).
constexpr int kBlockEmpty = 0, kBlockPartial = 1, kBlockFull = 2;

/// Query tiles and key blocks of `kernel`'s block summary at sizes (N, M),
/// and its bytes for B batch entries and H heads (row-major [B or 1,
/// H or 1, tiles, blocks]; see #flash.block_summary).
struct BlockSummaryShape {
  int64_t batches = 1, heads = 1, queryTiles = 0, keyBlocks = 0;
  int64_t bytes() const { return batches * heads * queryTiles * keyBlocks; }
  /// The byte of (b, h, qt, kt); b and h are dropped where not kept.
  int64_t offset(int64_t b, int64_t h, int64_t qt, int64_t kt) const {
    return (((batches > 1 ? b : 0) * heads + (heads > 1 ? h : 0)) * queryTiles + qt) *
               keyBlocks + kt;
  }
  static BlockSummaryShape of(BlockSummaryAttr summary, int64_t br, int64_t bc, int64_t batch,
                              int64_t heads, int64_t queryLen, int64_t keyLen) {
    return {summary.getPerBatch() ? batch : 1, summary.getPerHead() ? heads : 1,
            (queryLen + br - 1) / br, (keyLen + bc - 1) / bc};
  }
};

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_IR_FLASHDIALECT_H
