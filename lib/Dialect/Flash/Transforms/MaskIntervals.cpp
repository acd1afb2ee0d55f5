//===- MaskIntervals.cpp - Interval evaluation of a flash.mask ------------===//
//
// The region is evaluated over intervals — i in [qt*Br, qt*Br + Br - 1], j in
// [kt*Bc, kt*Bc + Bc - 1], the other inputs exact (a packed_heads kernel's
// tile spans positions [qt*Br / G, (qt*Br + Br - 1) / G] and query heads). The analysis is sound for
// any expression of the language: integers are tracked in i64 and widened to
// the whole i32 range wherever 32-bit wrap-around could occur, and anything
// it cannot bound (an aux tensor element without an AuxRangeFn, a NaN) is
// unknown. Affine masks (causal, windows, prefix-LM, chunked) classify
// exactly.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/Transforms/MaskIntervals.h"

#include "flashc/Config/KernelRules.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace flashc::flash;

Interval MaskIntervalEmitter::unknown(Type type) {
  if (type.isInteger(1))
    return boolean(i1(true), i1(true));
  if (type.isF32())
    return floatRange(f32(-std::numeric_limits<float>::infinity()),
                      f32(std::numeric_limits<float>::infinity()));
  return intRange(i64(std::numeric_limits<int32_t>::min()),
                  i64(std::numeric_limits<int32_t>::max()));
}

Interval MaskIntervalEmitter::exact(Value value) {
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

Interval MaskIntervalEmitter::clampToI32(Value lo, Value hi) {
  Value min = i64(std::numeric_limits<int32_t>::min());
  Value max = i64(std::numeric_limits<int32_t>::max());
  Value wraps = lor(cmpI(arith::CmpIPredicate::slt, lo, min),
                    cmpI(arith::CmpIPredicate::sgt, hi, max));
  return intRange(select(wraps, min, lo), select(wraps, max, hi));
}

Interval MaskIntervalEmitter::sanitize(Value lo, Value hi) {
  Value nan = lor(cmpF(arith::CmpFPredicate::UNO, lo, lo),
                  cmpF(arith::CmpFPredicate::UNO, hi, hi));
  return floatRange(select(nan, f32(-std::numeric_limits<float>::infinity()), lo),
                    select(nan, f32(std::numeric_limits<float>::infinity()), hi));
}

Interval MaskIntervalEmitter::corners(Value p, Value q, Value r, Value s, bool isFloat) {
  if (isFloat)
    return sanitize(minF(minF(p, q), minF(r, s)), maxF(maxF(p, q), maxF(r, s)));
  return clampToI32(minI(minI(p, q), minI(r, s)), maxI(maxI(p, q), maxI(r, s)));
}

Interval MaskIntervalEmitter::get(Value value) {
  auto it = ranges.find(value);
  if (it != ranges.end())
    return it->second;
  // Defined above the region: uniform over the tile, so exact.
  Interval result = exact(value);
  ranges[value] = result;
  return result;
}

Interval MaskIntervalEmitter::visitCmpI(arith::CmpIOp op) {
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

Interval MaskIntervalEmitter::visitCmpF(arith::CmpFOp op) {
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

Block *MaskIntervalEmitter::uniformBlock() {
  // Forward kernels only: the backward's skipping does not need it, and
  // dims live across its loop cost registers (gqa at D = 128 spilled).
  Region *region = b.getInsertionBlock()->getParent();
  while (hoistUniforms && region && region->getParentOp() &&
         !isa<KernelOp, BackwardKernelOp>(region->getParentOp()))
    region = region->getParentOp()->getParentRegion();
  if (!hoistUniforms || !region || !isa_and_nonnull<KernelOp>(region->getParentOp()))
    return nullptr;
  return &region->front();
}

Value MaskIntervalEmitter::cloneUniform(Operation *uniform) {
  OpBuilder::InsertionGuard guard(b);
  if (Block *block = uniformBlock())
    b.setInsertionPointToStart(block);
  return b.clone(*uniform)->getResult(0);
}

Value MaskIntervalEmitter::dim(DimRole role) {
  Value size;
  {
    OpBuilder::InsertionGuard guard(b);
    if (Block *block = uniformBlock())
      b.setInsertionPointToStart(block);
    size = DimOp::create(b, loc, b.getIndexType(), role);
  }
  return arith::IndexCastOp::create(b, loc, b.getI64Type(), size);
}

Interval MaskIntervalEmitter::visitAuxLoad(AuxLoadOp op) {
  if (!auxRange)
    return unknown(op.getType());
  SmallVector<Interval> indices;
  for (Value index : op.getIndices())
    indices.push_back(get(index));
  std::optional<Interval> range = auxRange(op, indices);
  if (!range)
    return unknown(op.getType());
  return op.getType().isF32() ? sanitize(range->lo, range->hi) : *range;
}

Interval MaskIntervalEmitter::visit(Operation *op) {
  Type type = op->getResult(0).getType();
  auto operand = [&](unsigned i) { return get(op->getOperand(i)); };
  return llvm::TypeSwitch<Operation *, Interval>(op)
      // Uniform scalars: clone them in front of the mask and use them exactly.
      .Case<arith::ConstantOp, ParamOp, DimOp>(
          [&](Operation *uniform) { return exact(cloneUniform(uniform)); })
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
      .Case([&](AuxLoadOp load) { return visitAuxLoad(load); })
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

Operation *MaskIntervalEmitter::outsideKeyLoop(MaskOp mask) {
  auto kernel = mask->getParentOfType<KernelOp>();
  if (!hoistUniforms || !kernel)
    return nullptr;
  // The mask's ancestor in the kernel's entry block (its key loop).
  Operation *ancestor = mask;
  while (ancestor && ancestor->getBlock() != &kernel.getEntryBlock())
    ancestor = ancestor->getParentOp();
  return ancestor;
}

Interval MaskIntervalEmitter::evaluate(MaskOp mask, Interval heads, Interval rows,
                                       Interval keys) {
  Block &body = mask.getBody().front();
  // Region arguments: b exact, h, i and j ranges.
  ranges[body.getArgument(0)] = exact(mask.getBatch());
  ranges[body.getArgument(1)] = heads;
  ranges[body.getArgument(2)] = rows;
  ranges[body.getArgument(3)] = keys;
  for (Operation &op : body.without_terminator())
    ranges[op.getResult(0)] = visit(&op);
  return get(cast<YieldOp>(body.getTerminator()).getValue());
}

MaskIntervalEmitter::Facts MaskIntervalEmitter::classify(MaskOp mask, int64_t groupRows) {
  auto tileType = cast<RankedTensorType>(mask.getScores().getType());
  int64_t rows = tileType.getDimSize(0), cols = tileType.getDimSize(1);
  Interval head;
  Value firstRow;
  // A packed_heads kernel's rows p hold position p / G of query head
  // h·G + p mod G (h the KV head): a band of rows spans the positions
  // [first / G, last / G] and, unless it stays at one position, every head
  // of the group.
  auto kernel = mask->getParentOfType<KernelOp>();
  Value group, firstRowOutside;
  if (kernel && kernel.getPackedHeads()) {
    OpBuilder::InsertionGuard guard(b);
    if (Operation *beforeLoop = outsideKeyLoop(mask))
      b.setInsertionPoint(beforeLoop);
    group = maxI(arith::DivSIOp::create(b, loc, dim(DimRole::Heads),
                                        maxI(dim(DimRole::KVHeads), i64(1))),
                 i64(1));
    firstRowOutside = arith::MulIOp::create(b, loc, exact(mask.getQueryTile()).lo, i64(rows));
    head = exact(mask.getHead());
  } else {
    firstRow = arith::MulIOp::create(b, loc, get(mask.getQueryTile()).lo, i64(rows));
    head = get(mask.getHead());
  }
  struct Band {
    Interval heads, rows;
  };
  auto band = [&](int64_t offset, int64_t extent) -> Band {
    // A packed band depends on the tile only: computed once, before the key
    // loop, not per key block (divisions and their operands would otherwise
    // stay live in the loop).
    OpBuilder::InsertionGuard guard(b);
    Operation *beforeLoop = group ? outsideKeyLoop(mask) : nullptr;
    if (beforeLoop)
      b.setInsertionPoint(beforeLoop);
    Value start = group ? firstRowOutside : firstRow;
    Value first = offset ? arith::AddIOp::create(b, loc, start, i64(offset)) : start;
    Value last = arith::AddIOp::create(b, loc, first, i64(extent - 1));
    if (!group)
      return {head, clampToI32(first, last)};
    Value firstPosition = arith::DivSIOp::create(b, loc, first, group);
    Value lastPosition = arith::DivSIOp::create(b, loc, last, group);
    Value onePosition = cmpI(arith::CmpIPredicate::eq, firstPosition, lastPosition);
    Value groupHead = arith::MulIOp::create(b, loc, head.lo, group);
    Value lowMember = select(onePosition, arith::RemSIOp::create(b, loc, first, group), i64(0));
    Value highMember = select(onePosition, arith::RemSIOp::create(b, loc, last, group),
                              arith::SubIOp::create(b, loc, group, i64(1)));
    return {clampToI32(arith::AddIOp::create(b, loc, groupHead, lowMember),
                       arith::AddIOp::create(b, loc, groupHead, highMember)),
            clampToI32(firstPosition, lastPosition)};
  };
  Band tile = band(0, rows);
  Value firstKey = arith::MulIOp::create(b, loc, get(mask.getKeyTile()).lo, i64(cols));
  Interval keys = clampToI32(firstKey, arith::AddIOp::create(b, loc, firstKey, i64(cols - 1)));
  Interval visible = evaluate(mask, tile.heads, tile.rows, keys);
  Facts facts{lnot(visible.mayFalse()), visible.mayTrue(), {}};
  // Bands only where the tile has two or more of them.
  if (groupRows > 0 && rows > groupRows && rows % groupRows == 0)
    for (int64_t offset = 0; offset < rows; offset += groupRows) {
      Band rowBand = band(offset, groupRows);
      facts.rowsVisible.push_back(evaluate(mask, rowBand.heads, rowBand.rows, keys).mayTrue());
    }
  return facts;
}


//===----------------------------------------------------------------------===//
// The shape of a row's visible keys
//===----------------------------------------------------------------------===//

namespace {

namespace config = flashc::config;
using config::KeySet;

class KeySetAnalysis {
public:
  explicit KeySetAnalysis(MaskOp mask) : key(mask.getBody().front().getArgument(3)) {}

  KeySet of(Value value) {
    if (!readsKey(value))
      return KeySet::Row;
    Operation *op = value.getDefiningOp();
    if (auto andOp = dyn_cast<arith::AndIOp>(op))
      return config::intersectKeySets(of(andOp.getLhs()), of(andOp.getRhs()));
    if (auto orOp = dyn_cast<arith::OrIOp>(op))
      return config::uniteKeySets(of(orOp.getLhs()), of(orOp.getRhs()));
    if (auto xorOp = dyn_cast<arith::XOrIOp>(op)) {
      // !x is x xor true.
      Value other = matchPattern(xorOp.getRhs(), m_One()) ? xorOp.getLhs()
                    : matchPattern(xorOp.getLhs(), m_One()) ? xorOp.getRhs()
                                                             : Value();
      if (!other)
        return KeySet::Pieces;
      return config::negateKeySet(of(other));
    }
    if (isa<arith::SelectOp>(op))
      return KeySet::Pieces;
    if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
      using P = arith::CmpIPredicate;
      P p = cmp.getPredicate();
      bool below = p == P::slt || p == P::sle, above = p == P::sgt || p == P::sge;
      return config::comparisonKeySet(keyCoefficient(cmp.getLhs()),
                                      keyCoefficient(cmp.getRhs()), below, above);
    }
    if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
      using P = arith::CmpFPredicate;
      P p = cmp.getPredicate();
      bool below = p == P::OLT || p == P::OLE || p == P::ULT || p == P::ULE;
      bool above = p == P::OGT || p == P::OGE || p == P::UGT || p == P::UGE;
      return config::comparisonKeySet(keyCoefficient(cmp.getLhs()),
                                      keyCoefficient(cmp.getRhs()), below, above);
    }
    return KeySet::Interval; // tensor predicates and the like
  }

private:
  bool readsKey(Value value) {
    auto it = readsKeyCache.find(value);
    if (it != readsKeyCache.end())
      return it->second;
    bool reads = value == key;
    if (Operation *op = value.getDefiningOp())
      reads = llvm::any_of(op->getOperands(), [&](Value operand) { return readsKey(operand); });
    readsKeyCache[value] = reads;
    return reads;
  }

  /// c in value = c * j + (terms without j), through +, -, products with
  /// constants and int-to-float.
  std::optional<int64_t> keyCoefficient(Value value) {
    if (!readsKey(value))
      return 0;
    if (value == key)
      return 1;
    Operation *op = value.getDefiningOp();
    if (isa<arith::SIToFPOp>(op))
      return keyCoefficient(op->getOperand(0));
    if (isa<arith::NegFOp>(op)) {
      std::optional<int64_t> inner = keyCoefficient(op->getOperand(0));
      return inner ? std::optional<int64_t>(-*inner) : std::nullopt;
    }
    if (isa<arith::MulIOp>(op)) {
      // j times a constant.
      for (unsigned side = 0; side < 2; ++side) {
        APInt factor;
        if (!matchPattern(op->getOperand(side), m_ConstantInt(&factor)))
          continue;
        std::optional<int64_t> inner = keyCoefficient(op->getOperand(1 - side));
        return inner ? std::optional<int64_t>(*inner * factor.getSExtValue()) : std::nullopt;
      }
      return std::nullopt;
    }
    bool add = isa<arith::AddIOp, arith::AddFOp>(op), sub = isa<arith::SubIOp, arith::SubFOp>(op);
    if (!add && !sub)
      return std::nullopt;
    std::optional<int64_t> lhs = keyCoefficient(op->getOperand(0));
    std::optional<int64_t> rhs = keyCoefficient(op->getOperand(1));
    if (!lhs || !rhs)
      return std::nullopt;
    return add ? *lhs + *rhs : *lhs - *rhs;
  }

  Value key;
  llvm::DenseMap<Value, bool> readsKeyCache;
};

} // namespace

bool flashc::flash::keysMayComeInPieces(MaskOp mask) {
  auto yield = cast<YieldOp>(mask.getBody().front().getTerminator());
  return KeySetAnalysis(mask).of(yield.getValue()) == KeySet::Pieces;
}
