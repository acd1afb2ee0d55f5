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

#include <algorithm>

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
  /// After the bytes, 4-aligned: the tile order the GPU's summary kernel
  /// writes for the attention kernel's schedule, one i32 per (summary row,
  /// query tile), by descending cost. The interpreter neither writes nor
  /// reads it.
  int64_t orderOffset() const { return (bytes() + 3) & ~int64_t{3}; }
  int64_t orderEntries() const { return batches * heads * queryTiles; }
  int64_t bytesWithOrder() const { return orderOffset() + 4 * orderEntries(); }
  /// The order's cost of a query tile: 1 per non-empty key block, 2 per
  /// partial one (it evaluates the mask); the order is by bin, ascending
  /// (costs scaled into kTileOrderBins, the costliest in bin 0).
  static constexpr int64_t kTileOrderBins = 128;
  int64_t orderBin(int64_t cost) const {
    int64_t scaled = cost * kTileOrderBins / (2 * keyBlocks + 1);
    return kTileOrderBins - 1 - std::min(scaled, kTileOrderBins - 1);
  }
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

/// The mask a block summary of `kernel` classifies, at (b, h, qt, kt) of its
/// tiling: its first flash.mask, where a forward kernel has it at its own
/// (b, h, qt) and its key loop's induction variable, and a backward kernel
/// at its own b and kt, its query loop's induction variable and the query
/// head that loop's enclosing loop walks (any head value: the summary maps
/// it). Null where the mask is elsewhere (the summary cannot name its tiles).
MaskOp summarizedMask(KernelSignature kernel);

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_IR_FLASHDIALECT_H
