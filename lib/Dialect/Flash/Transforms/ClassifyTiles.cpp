//===- ClassifyTiles.cpp - flash-classify-tiles ---------------------------===//
//
// For each flash.mask, emits scalar IR that evaluates the mask region over
// intervals — i in [qt*Br, qt*Br + Br - 1], j in [kt*Bc, kt*Bc + Bc - 1], the
// other inputs exact — and attaches the two facts it proves to the mask:
// every element visible (the mask is the identity on this tile) and some
// element visible (otherwise the key block can be skipped). The analysis is
// sound for any expression of the language: integers are tracked in i64 and
// widened to the whole i32 range wherever 32-bit wrap-around could occur,
// and anything it cannot bound (an aux tensor element, a NaN) is unknown, so
// such tiles stay partial. Affine masks (causal, windows, prefix-LM,
// chunked) classify exactly.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

namespace flashc::flash {
#define GEN_PASS_DEF_FLASHCLASSIFYTILES
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"
} // namespace flashc::flash

using namespace mlir;
using namespace flashc::flash;

namespace {

/// The range of one region value over a tile. Integers: [lo, hi] in i64.
/// Floats: [lo, hi] in f32 (never NaN; unknown is [-inf, inf]). Booleans:
/// lo = "may be true", hi = "may be false" (both i1).
struct Interval {
  enum class Kind { Int, Float, Bool } kind;
  Value lo, hi;
  Value mayTrue() const { return lo; }
  Value mayFalse() const { return hi; }
};

class IntervalEmitter {
public:
  IntervalEmitter(OpBuilder &builder, Location loc) : b(builder), loc(loc) {}

  /// What classify proves about one tile (i1 values).
  struct Facts {
    Value allVisible, anyVisible;
    /// Per band of `groupRows` rows: some element visible (empty: no bands).
    SmallVector<Value> rowsVisible;
  };
  /// Emits the analysis of `mask` before it, for the whole tile and, when
  /// groupRows > 0 splits the tile's rows into two or more bands, per band.
  Facts classify(MaskOp mask, int64_t groupRows);

private:
  /// The mask's region over query positions `rows` and key positions
  /// `keys` (fresh IR each call); returns the yielded boolean's range.
  Interval evaluate(MaskOp mask, Interval rows, Interval keys);
  // Constants and small helpers.
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 64); }
  Value f32(float v) { return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v)); }
  Value i1(bool v) { return arith::ConstantIntOp::create(b, loc, v ? 1 : 0, 1); }
  Value cmpI(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value cmpF(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) { return arith::SelectOp::create(b, loc, c, x, y); }
  Value land(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value lor(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value lnot(Value x) { return arith::XOrIOp::create(b, loc, x, i1(true)); }
  Value minI(Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); }
  Value maxI(Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); }
  Value minF(Value x, Value y) { return arith::MinimumFOp::create(b, loc, x, y); }
  Value maxF(Value x, Value y) { return arith::MaximumFOp::create(b, loc, x, y); }

  Interval boolean(Value mayTrue, Value mayFalse) {
    return {Interval::Kind::Bool, mayTrue, mayFalse};
  }
  Interval intRange(Value lo, Value hi) { return {Interval::Kind::Int, lo, hi}; }
  Interval floatRange(Value lo, Value hi) { return {Interval::Kind::Float, lo, hi}; }
  Interval unknown(Type type);
  /// A uniform scalar (i1, i32, f32, index) known exactly.
  Interval exact(Value value);
  /// Widens to the whole i32 range if [lo, hi] leaves it (wrap-around).
  Interval clampToI32(Value lo, Value hi);
  /// Replaces NaN bounds by infinities, so later ops stay sound.
  Interval sanitize(Value lo, Value hi);
  Interval corners(Value a, Value b, Value c, Value d, bool isFloat);

  Interval visit(Operation *op);
  Interval visitCmpI(arith::CmpIOp op);
  Interval visitCmpF(arith::CmpFOp op);
  Interval get(Value value);

  OpBuilder &b;
  Location loc;
  llvm::DenseMap<Value, Interval> ranges;
};

Interval IntervalEmitter::unknown(Type type) {
  if (type.isInteger(1))
    return boolean(i1(true), i1(true));
  if (type.isF32())
    return floatRange(f32(-std::numeric_limits<float>::infinity()),
                      f32(std::numeric_limits<float>::infinity()));
  return intRange(i64(std::numeric_limits<int32_t>::min()),
                  i64(std::numeric_limits<int32_t>::max()));
}

Interval IntervalEmitter::exact(Value value) {
  Type type = value.getType();
  if (type.isInteger(1))
    return boolean(value, lnot(value));
  if (type.isF32())
    return floatRange(value, value);
  Value wide = type.isIndex()
                   ? Value(arith::IndexCastOp::create(b, loc, b.getI64Type(), value))
                   : Value(arith::ExtSIOp::create(b, loc, b.getI64Type(), value));
  return intRange(wide, wide);
}

Interval IntervalEmitter::clampToI32(Value lo, Value hi) {
  Value min = i64(std::numeric_limits<int32_t>::min());
  Value max = i64(std::numeric_limits<int32_t>::max());
  Value wraps = lor(cmpI(arith::CmpIPredicate::slt, lo, min),
                    cmpI(arith::CmpIPredicate::sgt, hi, max));
  return intRange(select(wraps, min, lo), select(wraps, max, hi));
}

Interval IntervalEmitter::sanitize(Value lo, Value hi) {
  Value nan = lor(cmpF(arith::CmpFPredicate::UNO, lo, lo),
                  cmpF(arith::CmpFPredicate::UNO, hi, hi));
  return floatRange(select(nan, f32(-std::numeric_limits<float>::infinity()), lo),
                    select(nan, f32(std::numeric_limits<float>::infinity()), hi));
}

Interval IntervalEmitter::corners(Value p, Value q, Value r, Value s, bool isFloat) {
  if (isFloat)
    return sanitize(minF(minF(p, q), minF(r, s)), maxF(maxF(p, q), maxF(r, s)));
  return clampToI32(minI(minI(p, q), minI(r, s)), maxI(maxI(p, q), maxI(r, s)));
}

Interval IntervalEmitter::get(Value value) {
  auto it = ranges.find(value);
  if (it != ranges.end())
    return it->second;
  // Defined above the region: uniform over the tile, so exact.
  Interval result = exact(value);
  ranges[value] = result;
  return result;
}

Interval IntervalEmitter::visitCmpI(arith::CmpIOp op) {
  Interval x = get(op.getLhs()), y = get(op.getRhs());
  using P = arith::CmpIPredicate;
  if (x.kind == Interval::Kind::Bool) {
    Value same = lor(land(x.mayTrue(), y.mayTrue()), land(x.mayFalse(), y.mayFalse()));
    Value differ = lor(land(x.mayTrue(), y.mayFalse()), land(x.mayFalse(), y.mayTrue()));
    if (op.getPredicate() == P::eq)
      return boolean(same, differ);
    if (op.getPredicate() == P::ne)
      return boolean(differ, same);
    return unknown(op.getType());
  }
  switch (op.getPredicate()) {
  case P::slt:
    return boolean(cmpI(P::slt, x.lo, y.hi), cmpI(P::sge, x.hi, y.lo));
  case P::sle:
    return boolean(cmpI(P::sle, x.lo, y.hi), cmpI(P::sgt, x.hi, y.lo));
  case P::sgt:
    return boolean(cmpI(P::sgt, x.hi, y.lo), cmpI(P::sle, x.lo, y.hi));
  case P::sge:
    return boolean(cmpI(P::sge, x.hi, y.lo), cmpI(P::slt, x.lo, y.hi));
  case P::eq:
  case P::ne: {
    Value overlap = land(cmpI(P::sle, x.lo, y.hi), cmpI(P::sle, y.lo, x.hi));
    Value bothSame = land(land(cmpI(P::eq, x.lo, x.hi), cmpI(P::eq, y.lo, y.hi)),
                          cmpI(P::eq, x.lo, y.lo));
    return op.getPredicate() == P::eq ? boolean(overlap, lnot(bothSame))
                                      : boolean(lnot(bothSame), overlap);
  }
  default:
    return unknown(op.getType()); // unsigned orders: not worth it here
  }
}

Interval IntervalEmitter::visitCmpF(arith::CmpFOp op) {
  Interval x = get(op.getLhs()), y = get(op.getRhs());
  using P = arith::CmpFPredicate;
  // An element may be NaN even inside finite bounds (log of a negative), and
  // an ordered comparison with NaN is false: "may be false" stays true.
  Value maybe = i1(true);
  switch (op.getPredicate()) {
  case P::OLT:
    return boolean(cmpF(P::OLT, x.lo, y.hi), maybe);
  case P::OLE:
    return boolean(cmpF(P::OLE, x.lo, y.hi), maybe);
  case P::OGT:
    return boolean(cmpF(P::OGT, x.hi, y.lo), maybe);
  case P::OGE:
    return boolean(cmpF(P::OGE, x.hi, y.lo), maybe);
  default:
    return unknown(op.getType());
  }
}

Interval IntervalEmitter::visit(Operation *op) {
  Type type = op->getResult(0).getType();
  auto operand = [&](unsigned i) { return get(op->getOperand(i)); };
  return llvm::TypeSwitch<Operation *, Interval>(op)
      // Uniform scalars: clone them in front of the mask and use them exactly.
      .Case<arith::ConstantOp, ParamOp, DimOp>([&](Operation *uniform) {
        return exact(b.clone(*uniform)->getResult(0));
      })
      .Case([&](arith::AddIOp) {
        Interval x = operand(0), y = operand(1);
        return clampToI32(arith::AddIOp::create(b, loc, x.lo, y.lo),
                          arith::AddIOp::create(b, loc, x.hi, y.hi));
      })
      .Case([&](arith::SubIOp) {
        Interval x = operand(0), y = operand(1);
        return clampToI32(arith::SubIOp::create(b, loc, x.lo, y.hi),
                          arith::SubIOp::create(b, loc, x.hi, y.lo));
      })
      .Case([&](arith::MulIOp) {
        Interval x = operand(0), y = operand(1);
        auto mul = [&](Value p, Value q) { return arith::MulIOp::create(b, loc, p, q); };
        return corners(mul(x.lo, y.lo), mul(x.lo, y.hi), mul(x.hi, y.lo), mul(x.hi, y.hi),
                       false);
      })
      .Case([&](arith::DivSIOp) {
        // Monotone in each argument while the divisor keeps its sign.
        Interval x = operand(0), y = operand(1);
        Value crossesZero = land(cmpI(arith::CmpIPredicate::sle, y.lo, i64(0)),
                                 cmpI(arith::CmpIPredicate::sge, y.hi, i64(0)));
        Value safeLo = select(crossesZero, i64(1), y.lo);
        Value safeHi = select(crossesZero, i64(1), y.hi);
        auto div = [&](Value p, Value q) { return arith::DivSIOp::create(b, loc, p, q); };
        Interval q = corners(div(x.lo, safeLo), div(x.lo, safeHi), div(x.hi, safeLo),
                             div(x.hi, safeHi), false);
        Interval all = unknown(type);
        return intRange(select(crossesZero, all.lo, q.lo), select(crossesZero, all.hi, q.hi));
      })
      .Case([&](arith::RemSIOp) {
        // |x rem y| < |y| and the result has the sign of x.
        Interval x = operand(0), y = operand(1);
        Value zero = i64(0);
        Value bound = maxI(maxI(arith::SubIOp::create(b, loc, zero, y.lo), y.hi), i64(1));
        Value limit = arith::SubIOp::create(b, loc, bound, i64(1));
        Value negLimit = arith::SubIOp::create(b, loc, zero, limit);
        Value lo = select(cmpI(arith::CmpIPredicate::sge, x.lo, zero), zero,
                          maxI(negLimit, x.lo));
        Value hi = select(cmpI(arith::CmpIPredicate::sle, x.hi, zero), zero, minI(limit, x.hi));
        return intRange(lo, hi);
      })
      .Case([&](arith::MinSIOp) {
        Interval x = operand(0), y = operand(1);
        return intRange(minI(x.lo, y.lo), minI(x.hi, y.hi));
      })
      .Case([&](arith::MaxSIOp) {
        Interval x = operand(0), y = operand(1);
        return intRange(maxI(x.lo, y.lo), maxI(x.hi, y.hi));
      })
      .Case([&](math::AbsIOp) {
        Interval x = operand(0);
        Value zero = i64(0);
        Value negLo = arith::SubIOp::create(b, loc, zero, x.lo);
        Value negHi = arith::SubIOp::create(b, loc, zero, x.hi);
        Value nonNegative = cmpI(arith::CmpIPredicate::sge, x.lo, zero);
        Value nonPositive = cmpI(arith::CmpIPredicate::sle, x.hi, zero);
        Value lo = select(nonNegative, x.lo, select(nonPositive, negHi, zero));
        Value hi = select(nonNegative, x.hi, select(nonPositive, negLo, maxI(negLo, x.hi)));
        return clampToI32(lo, hi);
      })
      .Case([&](arith::AndIOp) -> Interval {
        if (!type.isInteger(1))
          return unknown(type);
        Interval x = operand(0), y = operand(1);
        return boolean(land(x.mayTrue(), y.mayTrue()), lor(x.mayFalse(), y.mayFalse()));
      })
      .Case([&](arith::OrIOp) -> Interval {
        if (!type.isInteger(1))
          return unknown(type);
        Interval x = operand(0), y = operand(1);
        return boolean(lor(x.mayTrue(), y.mayTrue()), land(x.mayFalse(), y.mayFalse()));
      })
      .Case([&](arith::XOrIOp) -> Interval {
        if (!type.isInteger(1))
          return unknown(type);
        Interval x = operand(0), y = operand(1);
        return boolean(lor(land(x.mayTrue(), y.mayFalse()), land(x.mayFalse(), y.mayTrue())),
                       lor(land(x.mayTrue(), y.mayTrue()), land(x.mayFalse(), y.mayFalse())));
      })
      .Case([&](arith::SelectOp select) -> Interval {
        Interval c = get(select.getCondition());
        Interval x = get(select.getTrueValue()), y = get(select.getFalseValue());
        if (x.kind == Interval::Kind::Bool)
          return boolean(lor(land(c.mayTrue(), x.mayTrue()), land(c.mayFalse(), y.mayTrue())),
                         lor(land(c.mayTrue(), x.mayFalse()), land(c.mayFalse(), y.mayFalse())));
        bool isFloat = x.kind == Interval::Kind::Float;
        auto pick = [&](Value fromX, Value fromY, bool low) {
          Value both = isFloat ? (low ? minF(fromX, fromY) : maxF(fromX, fromY))
                               : (low ? minI(fromX, fromY) : maxI(fromX, fromY));
          return this->select(c.mayTrue(), this->select(c.mayFalse(), both, fromX), fromY);
        };
        Value lo = pick(x.lo, y.lo, true), hi = pick(x.hi, y.hi, false);
        return isFloat ? floatRange(lo, hi) : intRange(lo, hi);
      })
      .Case([&](arith::CmpIOp cmp) { return visitCmpI(cmp); })
      .Case([&](arith::CmpFOp cmp) { return visitCmpF(cmp); })
      .Case([&](arith::SIToFPOp) {
        Interval x = operand(0);
        return floatRange(arith::SIToFPOp::create(b, loc, b.getF32Type(), x.lo),
                          arith::SIToFPOp::create(b, loc, b.getF32Type(), x.hi));
      })
      .Case([&](arith::AddFOp) {
        Interval x = operand(0), y = operand(1);
        return sanitize(arith::AddFOp::create(b, loc, x.lo, y.lo),
                        arith::AddFOp::create(b, loc, x.hi, y.hi));
      })
      .Case([&](arith::SubFOp) {
        Interval x = operand(0), y = operand(1);
        return sanitize(arith::SubFOp::create(b, loc, x.lo, y.hi),
                        arith::SubFOp::create(b, loc, x.hi, y.lo));
      })
      .Case([&](arith::MulFOp) {
        Interval x = operand(0), y = operand(1);
        auto mul = [&](Value p, Value q) { return arith::MulFOp::create(b, loc, p, q); };
        return corners(mul(x.lo, y.lo), mul(x.lo, y.hi), mul(x.hi, y.lo), mul(x.hi, y.hi),
                       true);
      })
      .Case([&](arith::NegFOp) {
        Interval x = operand(0);
        return floatRange(arith::NegFOp::create(b, loc, x.hi), arith::NegFOp::create(b, loc, x.lo));
      })
      .Case<arith::MaximumFOp, arith::MaxNumFOp>([&](Operation *) {
        Interval x = operand(0), y = operand(1);
        return floatRange(maxF(x.lo, y.lo), maxF(x.hi, y.hi));
      })
      .Case<arith::MinimumFOp, arith::MinNumFOp>([&](Operation *) {
        Interval x = operand(0), y = operand(1);
        return floatRange(minF(x.lo, y.lo), minF(x.hi, y.hi));
      })
      // Monotone increasing functions map the bounds.
      .Case<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op, math::SqrtOp,
            math::TanhOp>([&](Operation *fn) {
        Interval x = operand(0);
        Operation *lo = b.clone(*fn);
        lo->setOperand(0, x.lo);
        Operation *hi = b.clone(*fn);
        hi->setOperand(0, x.hi);
        return sanitize(lo->getResult(0), hi->getResult(0));
      })
      .Default([&](Operation *) { return unknown(type); });
}

Interval IntervalEmitter::evaluate(MaskOp mask, Interval rows, Interval keys) {
  Block &body = mask.getBody().front();
  // Region arguments: b and h exact, i and j position ranges.
  ranges[body.getArgument(0)] = exact(mask.getBatch());
  ranges[body.getArgument(1)] = exact(mask.getHead());
  ranges[body.getArgument(2)] = rows;
  ranges[body.getArgument(3)] = keys;
  for (Operation &op : body.without_terminator())
    ranges[op.getResult(0)] = visit(&op);
  return get(cast<YieldOp>(body.getTerminator()).getValue());
}

IntervalEmitter::Facts IntervalEmitter::classify(MaskOp mask, int64_t groupRows) {
  auto tileType = cast<RankedTensorType>(mask.getScores().getType());
  int64_t rows = tileType.getDimSize(0), cols = tileType.getDimSize(1);
  Value firstRow = arith::MulIOp::create(b, loc, get(mask.getQueryTile()).lo, i64(rows));
  auto band = [&](int64_t offset, int64_t extent) {
    Value first = offset ? arith::AddIOp::create(b, loc, firstRow, i64(offset)) : firstRow;
    return clampToI32(first, arith::AddIOp::create(b, loc, first, i64(extent - 1)));
  };
  Interval tileRows = band(0, rows);
  Value firstKey = arith::MulIOp::create(b, loc, get(mask.getKeyTile()).lo, i64(cols));
  Interval keys = clampToI32(firstKey, arith::AddIOp::create(b, loc, firstKey, i64(cols - 1)));
  Interval visible = evaluate(mask, tileRows, keys);
  Facts facts{lnot(visible.mayFalse()), visible.mayTrue(), {}};
  // Bands only where the tile has two or more of them.
  if (groupRows > 0 && rows > groupRows && rows % groupRows == 0)
    for (int64_t offset = 0; offset < rows; offset += groupRows)
      facts.rowsVisible.push_back(evaluate(mask, band(offset, groupRows), keys).mayTrue());
  return facts;
}

/// A kernel with a run-time block summary knows more than the intervals
/// about a mask that reads aux tensors: the tile is full where either says
/// so and empty where either says so. Row bands keep the intervals' facts
/// (a band the summary empties lies in an empty tile, skipped whole).
void combineWithBlockSummary(OpBuilder &b, MaskOp mask, IntervalEmitter::Facts &facts) {
  auto kernel = mask->getParentOfType<KernelOp>();
  if (!kernel || !kernel.getBlockSummaryAttr() || !mask.readsAuxTensors())
    return;
  Location loc = mask.getLoc();
  Value blockClass = BlockClassOp::create(b, loc, b.getI32Type(), mask.getBatch(),
                                          mask.getHead(), mask.getQueryTile(), mask.getKeyTile());
  auto is = [&](arith::CmpIPredicate predicate, int64_t value) {
    return arith::CmpIOp::create(b, loc, predicate, blockClass,
                                 arith::ConstantIntOp::create(b, loc, value, 32));
  };
  facts.allVisible = arith::OrIOp::create(b, loc, facts.allVisible,
                                          is(arith::CmpIPredicate::eq, kBlockFull));
  facts.anyVisible = arith::AndIOp::create(b, loc, facts.anyVisible,
                                           is(arith::CmpIPredicate::ne, kBlockEmpty));
}

struct FlashClassifyTilesPass
    : flashc::flash::impl::FlashClassifyTilesBase<FlashClassifyTilesPass> {
  using Base::Base;

  void runOnOperation() override {
    getOperation()->walk([&](MaskOp mask) {
      if (mask.isClassified())
        return;
      OpBuilder builder(mask);
      IntervalEmitter::Facts facts =
          IntervalEmitter(builder, mask.getLoc()).classify(mask, groupRows);
      combineWithBlockSummary(builder, mask, facts);
      mask.getAllVisibleMutable().assign(facts.allVisible);
      mask.getAnyVisibleMutable().assign(facts.anyVisible);
      mask.getRowsVisibleMutable().assign(facts.rowsVisible);
    });
  }
};

} // namespace
