//===- ScoreChain.h - Scores that come from a dot through masks -*- C++ -*-===//
//
// Shared by the scale folds of the forward (flash-fold-scale) and the
// backward (flash-fold-backward-scale).
//
//===----------------------------------------------------------------------===//

#ifndef FLASHC_DIALECT_FLASH_TRANSFORMS_SCORECHAIN_H
#define FLASHC_DIALECT_FLASH_TRANSFORMS_SCORECHAIN_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

namespace flashc::flash {

/// The qk_dot whose scores reach `scores` through masks alone, every value
/// on the way read once, or null. Masks commute with a positive scale
/// (-inf stays -inf), a score modification does not; a second reader would
/// see the unscaled scores.
inline QKDotOp dotThroughMasks(mlir::Value scores) {
  while (mlir::Operation *def = scores.getDefiningOp()) {
    if (!scores.hasOneUse())
      return {};
    if (auto mask = mlir::dyn_cast<MaskOp>(def))
      scores = mask.getScores();
    else if (auto bounds = mlir::dyn_cast<MaskKeyBoundsOp>(def))
      scores = bounds.getScores();
    else
      return mlir::dyn_cast<QKDotOp>(def);
  }
  return {};
}

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_TRANSFORMS_SCORECHAIN_H
