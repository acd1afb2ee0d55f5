//===- MaskIntervals.h - Interval evaluation of a flash.mask ----*- C++ -*-===//
//
// Emits scalar IR (arith, math) that evaluates a mask region over ranges of
// its query and key positions and proves what holds on a whole tile: every
// element visible, some element visible. flash-classify-tiles attaches the
// result to each mask; the block summary kernel runs the same analysis with
// the ranges of the aux tensors it reads over the tile, so that sorted
// document ids or a key length decide most tiles without one element being
// evaluated.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_DIALECT_FLASH_TRANSFORMS_MASKINTERVALS_H
#define FLASHC_DIALECT_FLASH_TRANSFORMS_MASKINTERVALS_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <functional>
#include <optional>

namespace flashc::flash {

/// The range of one region value over a tile. Integers: [lo, hi] in i64.
/// Floats: [lo, hi] in f32 (never NaN; unknown is [-inf, inf]). Booleans:
/// lo = "may be true", hi = "may be false" (both i1).
struct Interval {
  enum class Kind { Int, Float, Bool } kind;
  mlir::Value lo, hi;
  mlir::Value mayTrue() const { return lo; }
  mlir::Value mayFalse() const { return hi; }
};

class MaskIntervalEmitter {
public:
  /// Bounds one flash.aux_load whose indices lie in `indices` (i64
  /// intervals), emitting IR at the emitter's insertion point; std::nullopt
  /// leaves the element unknown. Without one, every aux element is unknown.
  using AuxRangeFn =
      std::function<std::optional<Interval>(AuxLoadOp, llvm::ArrayRef<Interval> indices)>;

  /// With `hoistUniforms`, the constants, params and dims the analysis
  /// clones go to the start of a forward kernel's body instead of the
  /// insertion point: the region's own copies then merge (CSE) with ones outside the
  /// key loop, which the key loop's block skipping needs of its captures.
  MaskIntervalEmitter(mlir::OpBuilder &builder, mlir::Location loc, AuxRangeFn auxRange = {},
                      bool hoistUniforms = false)
      : b(builder), loc(loc), auxRange(std::move(auxRange)), hoistUniforms(hoistUniforms) {}

  /// What the analysis proves about one tile (i1 values).
  struct Facts {
    mlir::Value allVisible, anyVisible;
    /// Per band of `groupRows` rows: some element visible (empty: no bands).
    llvm::SmallVector<mlir::Value> rowsVisible;
  };
  /// Emits the analysis of `mask` at (its batch, head, query tile, key
  /// tile) and, when groupRows > 0 splits the tile's rows into two or more
  /// bands, per band.
  Facts classify(MaskOp mask, int64_t groupRows);

  // Constants of the analysis' types, for an AuxRangeFn.
  mlir::Value i64(int64_t v) { return mlir::arith::ConstantIntOp::create(b, loc, v, 64); }
  mlir::Value f32(float v) { return mlir::arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v)); }
  mlir::Value i1(bool v) { return mlir::arith::ConstantIntOp::create(b, loc, v ? 1 : 0, 1); }

private:
  /// The mask's region over query heads `heads`, query positions `rows`
  /// and key positions `keys` (fresh IR each call); returns the yielded boolean's range.
  Interval evaluate(MaskOp mask, Interval heads, Interval rows, Interval keys);
  mlir::Value cmpI(mlir::arith::CmpIPredicate p, mlir::Value x, mlir::Value y) {
    return mlir::arith::CmpIOp::create(b, loc, p, x, y);
  }
  mlir::Value cmpF(mlir::arith::CmpFPredicate p, mlir::Value x, mlir::Value y) {
    return mlir::arith::CmpFOp::create(b, loc, p, x, y);
  }
  mlir::Value select(mlir::Value c, mlir::Value x, mlir::Value y) {
    return mlir::arith::SelectOp::create(b, loc, c, x, y);
  }
  mlir::Value land(mlir::Value x, mlir::Value y) { return mlir::arith::AndIOp::create(b, loc, x, y); }
  mlir::Value lor(mlir::Value x, mlir::Value y) { return mlir::arith::OrIOp::create(b, loc, x, y); }
  mlir::Value lnot(mlir::Value x) { return mlir::arith::XOrIOp::create(b, loc, x, i1(true)); }
  mlir::Value minI(mlir::Value x, mlir::Value y) { return mlir::arith::MinSIOp::create(b, loc, x, y); }
  mlir::Value maxI(mlir::Value x, mlir::Value y) { return mlir::arith::MaxSIOp::create(b, loc, x, y); }
  mlir::Value minF(mlir::Value x, mlir::Value y) {
    return mlir::arith::MinimumFOp::create(b, loc, x, y);
  }
  mlir::Value maxF(mlir::Value x, mlir::Value y) {
    return mlir::arith::MaximumFOp::create(b, loc, x, y);
  }

  Interval boolean(mlir::Value mayTrue, mlir::Value mayFalse) {
    return {Interval::Kind::Bool, mayTrue, mayFalse};
  }
  Interval intRange(mlir::Value lo, mlir::Value hi) { return {Interval::Kind::Int, lo, hi}; }
  Interval floatRange(mlir::Value lo, mlir::Value hi) { return {Interval::Kind::Float, lo, hi}; }
  Interval unknown(mlir::Type type);
  /// A uniform scalar (i1, i32, f32, index) known exactly.
  Interval exact(mlir::Value value);
  /// Widens to the whole i32 range if [lo, hi] leaves it (wrap-around).
  Interval clampToI32(mlir::Value lo, mlir::Value hi);
  /// Replaces NaN bounds by infinities, so later ops stay sound.
  Interval sanitize(mlir::Value lo, mlir::Value hi);
  Interval corners(mlir::Value a, mlir::Value b, mlir::Value c, mlir::Value d, bool isFloat);

  Interval visit(mlir::Operation *op);
  Interval visitCmpI(mlir::arith::CmpIOp op);
  Interval visitCmpF(mlir::arith::CmpFOp op);
  Interval visitAuxLoad(AuxLoadOp op);
  Interval get(mlir::Value value);

  mlir::OpBuilder &b;
  mlir::Location loc;
  /// Where uniforms go with `hoistUniforms` (the forward kernel's entry
  /// block), or null: at the insertion point.
  mlir::Block *uniformBlock();
  /// A uniform op (no operands) cloned where `hoistUniforms` says.
  mlir::Value cloneUniform(mlir::Operation *uniform);
  /// The run-time size of `role` (a flash.dim placed like a uniform), i64.
  mlir::Value dim(DimRole role);
  /// With `hoistUniforms`, the op of a forward kernel's entry block that
  /// holds `mask` (its key loop), before which what depends on the tile
  /// only is computed; null otherwise.
  mlir::Operation *outsideKeyLoop(MaskOp mask);

  AuxRangeFn auxRange;
  bool hoistUniforms;
  llvm::DenseMap<mlir::Value, Interval> ranges;
};

/// Whether, for one query row, the keys `mask` admits may be a union of
/// pieces (a sink beside a window: `j < 4 || (j <= i && i - j < w)`), so
/// that whole key blocks inside the first..last visible range may be empty.
/// One prefix, suffix or interval of j is one piece (`j < p || j <= i` is a
/// prefix); predicates on tensor elements at j are taken as one piece
/// (sorted document ids, key lengths). config::traitsOf answers the same
/// question on the front end's AST, by the same rules.
bool keysMayComeInPieces(MaskOp mask);

} // namespace flashc::flash

#endif // FLASHC_DIALECT_FLASH_TRANSFORMS_MASKINTERVALS_H
