//===- BlockSummary.cpp - The kernel that classifies a mask's tiles -------===//
//
// A flash.kernel with a #flash.block_summary gets a second GPU kernel,
// `<name>_summary`, launched before it over (CTAs per query tile,
// ceil(N / Br), summary batches x heads) CTAs of four warps; the CTAs of a
// query tile take its groups of four key blocks in turn, one key block per
// warp. First each warp runs the mask's interval
// analysis (MaskIntervals.h) with the range of every aux tensor element the
// mask reads, reduced over the tile's indices (doc[b, i]: the min and max
// document id of the tile's rows): sorted document ids, a key length or a
// causal edge decide most tiles this way, each for a few loads per lane.
// Then the CTA evaluates the mask on every element of each tile the
// intervals left undecided, each thread walking its columns down the rows,
// and one bar.red.or and one bar.red.and give the byte the main kernel's
// flash.block_class reads. Both paths give the exact class of the tile's
// elements inside the problem.
//
// Last, the tile order: each CTA adds its blocks' cost (1 per non-empty
// block, 2 per partial one) to its query tile's counter, and the launch's
// last CTA (found by counts, not by a second launch) sorts the query tiles
// costliest first into the order after the summary's bytes, which the
// attention kernel runs its tiles in: with
// documents of random lengths the longest tiles otherwise started last
// (SM active 72-79% of the kernel's cycles at N = 16k).
//
// The ABI is the main kernel's up to and including the summary pointer
// (the main kernel appends only its target arguments after it), so one
// argument list serves both launches; this kernel then takes the order's
// counters (kept by the runtime, zero between launches).
//
// A flash.backward_kernel with a #flash.block_summary gets the same kernel
// over its own Br x Bc tiling, `<name>_bwd_summary`, with the backward's
// ABI (the summary is its last argument) and without the tile order: the
// backward's grid runs over key blocks, each walking the query tiles the
// summary leaves.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Conversion/FlashToNVVM/KernelModule.h"
#include "flashc/Dialect/Flash/Transforms/MaskIntervals.h"

#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <limits>

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

namespace {

constexpr int64_t kSummaryThreads = 128;
constexpr int64_t kSummaryWarps = kSummaryThreads / 32;
/// Key blocks per CTA: one per warp while the intervals decide.
constexpr int64_t kKeyBlocksPerCta = kSummaryWarps;
/// The longest index range of an aux tensor a warp reduces (a tile's rows
/// or keys are 64-256); a longer one leaves the element unknown.
constexpr int64_t kMaxRangeElements = 4096;
/// Elements of an aux range each lane loads per step.
constexpr int64_t kLoadsPerLane = 4;
/// Bins of the tile order's counting sort (flash::BlockSummaryShape::orderBin).
constexpr int64_t kOrderBins = flash::BlockSummaryShape::kTileOrderBins;
/// Shared memory of the sort: the bins, then a total per warp.
constexpr int64_t kOrderSharedBytes = 4 * (kOrderBins + kSummaryWarps);

class BlockSummaryEmitter : public CompanionEmitter {
public:
  using CompanionEmitter::CompanionEmitter;

  LogicalResult emit();

private:
  /// The kernel's mask, at (b, h, qt, kt) of its query or key loop
  /// (flash::summarizedMask).
  LogicalResult findMask();
  /// Lowers the scalar ops `values` depend on (outside the mask's region),
  /// with the mask's (b, h, qt) and kt already mapped; fails
  /// silently when one is not a scalar op (a tile value).
  LogicalResult lowerDefinitions(ArrayRef<Value> values);
  /// The i1 facts (all visible, any visible) the interval analysis proves
  /// on (b, h, qt, keyTile) with the aux tensors' ranges over the tile,
  /// computed by this warp alone; failure when a value cannot be lowered.
  /// `ranges` says where the aux ranges come from.
  enum class AuxRanges {
    /// Every range its type's whole range (no loads, no shuffles): what the
    /// mask's index terms alone decide.
    Unknown,
    /// Reduce the ranges whose box does not depend on the key tile into
    /// hoistedRanges; the others stay unknown.
    Hoist,
    /// The hoisted range where there is one, else reduced here.
    Read,
  };
  FailureOr<std::pair<Value, Value>> warpIntervalFacts(Value keyTile,
                                                       AuxRanges ranges = AuxRanges::Read);
  /// Reduces, before the loop over key groups, every aux range the
  /// analysis asks for whose index box does not depend on the key tile
  /// (doc[b, i] over the query tile's rows: the same for every group of
  /// the CTA); warpIntervalFacts then uses them instead of loading again.
  LogicalResult hoistKeyInvariantRanges();
  /// The bounds of an aux range nothing is known of: an integer tensor's
  /// i32 range widened to i64, a floating-point one's [-inf, inf].
  std::pair<Value, Value> unknownRange(bool isFloat);
  /// The [min, max] of `load`'s tensor over the index box [lo, hi] (i64
  /// each, at most one index not a single value), reduced over the warp:
  /// i64 bounds for an integer tensor, f32 for a floating-point one; the
  /// type's whole range where the box is too long or an element is NaN.
  FailureOr<std::pair<Value, Value>> warpAuxRange(flash::AuxLoadOp load, ArrayRef<Value> lo,
                                                  ArrayRef<Value> hi);
  /// Stores the class (i32) of key block `keyTile` where `predicate` holds.
  void storeClass(Value keyTile, Value blockClass, Value predicate);
  /// The exact class of the tile's elements inside the problem: the mask on
  /// the tile's border first (mixed: partial), else on every element; each
  /// thread evaluates its share and the CTA votes.
  Value classifyElements(Value batch, Value head, Value queryTile, Value keyTile);
  /// The count of threads whose i1 `predicate` holds (bar.red.popc).
  Value ctaCount(Value predicate);
  /// Classifies the key blocks of group `keyGroup` (one per warp); returns
  /// their cost for the tile order (uniform i32), null on failure.
  Value emitKeyGroup(Value keyGroup, Value keyBlocks);
  /// Adds the CTA's cost (i32, uniform) to its query tile's counter; the
  /// last CTA of the launch sorts the tiles into the summary's order.
  LogicalResult emitTileOrder(Value counters, Value ctaCost);

  flash::MaskOp mask;
  Value batch, head, queryTile;
  /// A forward kernel's summary also orders its query tiles by cost (the
  /// attention kernel's schedule); the backward's grid runs over key
  /// blocks and has no use for it.
  bool writesTileOrder() { return isa<flash::KernelOp>(kernel.getOperation()); }
  /// Per aux-range request of the analysis, in the order it makes them:
  /// the bounds hoistKeyInvariantRanges reduced, or none (the request
  /// depends on the key tile).
  SmallVector<std::optional<std::pair<Value, Value>>> hoistedRanges;
};

LogicalResult BlockSummaryEmitter::findMask() {
  mask = flash::summarizedMask(kernel);
  if (!mask)
    return error(kernel, "a block summary needs the kernel's mask at (b, h, qt, kt) of its "
                         "query or key loop");
  return success();
}

LogicalResult BlockSummaryEmitter::lowerDefinitions(ArrayRef<Value> values) {
  llvm::SetVector<Operation *> defs;
  SmallVector<Value> work(values.begin(), values.end());
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (lookupScalar(value))
      continue;
    Operation *def = value.getDefiningOp();
    if (!def)
      return failure(); // a block argument that is not (b, h, qt, kt)
    if (!defs.insert(def))
      continue;
    if (def->getNumRegions() || def->getNumResults() != 1 ||
        isa<ShapedType>(def->getResult(0).getType()))
      return failure();
    llvm::append_range(work, def->getOperands());
  }
  // Outer blocks' definitions before the loop bodies' (the kernel's and
  // the mask's loops nest, one block each), each block in order.
  auto depth = [](Operation *op) {
    int64_t count = 0;
    for (Operation *parent = op->getParentOp(); parent; parent = parent->getParentOp())
      ++count;
    return count;
  };
  SmallVector<Operation *> ordered(defs.begin(), defs.end());
  llvm::sort(ordered, [&](Operation *x, Operation *y) {
    int64_t xDepth = depth(x), yDepth = depth(y);
    if (xDepth != yDepth)
      return xDepth < yDepth;
    return x->getBlock() == y->getBlock() && x->isBeforeInBlock(y);
  });
  for (Operation *op : ordered) {
    if (isa<flash::BlockClassOp>(op) || failed(lowerScalarOp(op)))
      return failure();
  }
  return success();
}

std::pair<Value, Value> BlockSummaryEmitter::unknownRange(bool isFloat) {
  float inf = std::numeric_limits<float>::infinity();
  if (isFloat)
    return {f32(-inf), f32(inf)};
  return {i64(std::numeric_limits<int32_t>::min()), i64(std::numeric_limits<int32_t>::max())};
}

FailureOr<std::pair<Value, Value>>
BlockSummaryEmitter::warpAuxRange(flash::AuxLoadOp load, ArrayRef<Value> lo, ArrayRef<Value> hi) {
  using P = arith::CmpIPredicate;
  bool isFloat = load.getType().isF32();
  // The box's length along its one varying index (1 when none varies).
  Value varyingCount = i32(0), length = i64(1);
  SmallVector<Value> varies;
  for (auto [first, last] : llvm::zip(lo, hi)) {
    Value differs = cmpI(P::ne, first, last);
    varies.push_back(differs);
    varyingCount = add(varyingCount, arith::ExtUIOp::create(b, loc, b.getI32Type(), differs));
    length = add(length, select(differs, arith::SubIOp::create(b, loc, last, first), i64(0)));
  }
  Value bounded = arith::AndIOp::create(b, loc, cmpI(P::ule, varyingCount, i32(1)),
                                        cmpI(P::sle, length, i64(kMaxRangeElements)));
  Value count = select(bounded, arith::TruncIOp::create(b, loc, b.getI32Type(), length), i32(0));
  float inf = std::numeric_limits<float>::infinity();
  Value lowest = isFloat ? f32(inf) : i32(std::numeric_limits<int32_t>::max());
  Value highest = isFloat ? f32(-inf) : i32(std::numeric_limits<int32_t>::min());
  // Each step loads kLoadsPerLane elements per lane, independent of one
  // another (a tile's 64-256 rows or keys in one step), instead of one
  // dependent load per step.
  auto elements = scf::ForOp::create(b, loc, lane, count, i32(32 * kLoadsPerLane),
                                     ValueRange{lowest, highest});
  auto minOf = [&](Value x, Value y) -> Value {
    return isFloat ? Value(arith::MinimumFOp::create(b, loc, x, y))
                   : Value(arith::MinSIOp::create(b, loc, x, y));
  };
  auto maxOf = [&](Value x, Value y) -> Value {
    return isFloat ? Value(arith::MaximumFOp::create(b, loc, x, y))
                   : Value(arith::MaxSIOp::create(b, loc, x, y));
  };
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(elements.getBody());
    Value least = elements.getRegionIterArgs()[0], most = elements.getRegionIterArgs()[1];
    for (int64_t k = 0; k < kLoadsPerLane; ++k) {
      Value step = add(elements.getInductionVar(), i32(32 * k));
      Value inside = cmpI(P::slt, step, count);
      // Past the box: the box's first element, not counted.
      Value offset = select(inside, step, i32(0));
      SmallVector<Value> indices;
      for (auto [first, differs] : llvm::zip(lo, varies))
        indices.push_back(add(arith::TruncIOp::create(b, loc, b.getI32Type(), first),
                              select(differs, offset, i32(0))));
      FailureOr<Value> element = lowerAuxLoadAt(load, indices);
      if (failed(element))
        return failure();
      least = select(inside, minOf(least, *element), least);
      most = select(inside, maxOf(most, *element), most);
    }
    scf::YieldOp::create(b, loc, ValueRange{least, most});
  }
  Value least = elements.getResult(0), most = elements.getResult(1);
  if (isFloat) {
    for (int64_t laneMask = 16; laneMask >= 1; laneMask /= 2) {
      least = minOf(least, shuffleXor(least, laneMask));
      most = maxOf(most, shuffleXor(most, laneMask));
    }
  } else {
    // One redux.sync each instead of five dependent shuffle-and-min steps:
    // the warp's range is on the summary's critical path (sm_80 and up;
    // f32 redux needs sm_100).
    auto warpReduce = [&](Value value, NVVM::ReduxKind kind) {
      return NVVM::ReduxOp::create(b, loc, value.getType(), value,
                                   NVVM::ReduxKindAttr::get(b.getContext(), kind), i32(-1))
          .getResult();
    };
    least = warpReduce(least, NVVM::ReduxKind::MIN);
    most = warpReduce(most, NVVM::ReduxKind::MAX);
  }
  if (isFloat) {
    // minimum/maximum propagate NaN: one NaN element makes the range unknown.
    Value nan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, least, most);
    Value known = arith::AndIOp::create(
        b, loc, bounded, arith::XOrIOp::create(b, loc, nan, arith::ConstantIntOp::create(b, loc, 1, 1)));
    auto [lowestBound, highestBound] = unknownRange(/*isFloat=*/true);
    return std::make_pair(select(known, least, lowestBound), select(known, most, highestBound));
  }
  auto wide = [&](Value x) { return arith::ExtSIOp::create(b, loc, b.getI64Type(), x); };
  auto [lowestBound, highestBound] = unknownRange(/*isFloat=*/false);
  return std::make_pair(select(bounded, wide(least), lowestBound),
                        select(bounded, wide(most), highestBound));
}

FailureOr<std::pair<Value, Value>> BlockSummaryEmitter::warpIntervalFacts(Value keyTile,
                                                                          AuxRanges ranges) {
  // The analysis is emitted as arith IR into a scratch block and lowered op
  // by op; each aux range is reduced where the analysis asks for it and
  // enters the scratch IR as two placeholder constants mapped to its bounds.
  Block scratch;
  OpBuilder scratchBuilder(kernel.getContext());
  scratchBuilder.setInsertionPointToEnd(&scratch);
  Operation *lowered = nullptr;
  bool lowerFailed = false;
  auto lowerPending = [&]() {
    Operation *op = lowered ? lowered->getNextNode() : (scratch.empty() ? nullptr : &scratch.front());
    for (; op && !lowerFailed; op = op->getNextNode()) {
      lowerFailed = failed(lowerScalarOp(op));
      lowered = op;
    }
    return !lowerFailed;
  };
  // Whether a scratch value depends on the key tile: the loop's induction
  // variable, or the bounds of an aux range whose box does (tbl[doc[b, j]]:
  // the placeholders have no operands to follow). Values from outside the
  // scratch block (the kernel's, the mask's captures) do not.
  llvm::SmallPtrSet<Value, 8> keyDependentBounds;
  auto dependsOnKeyTile = [&](Value root) {
    SmallVector<Value> work{root};
    llvm::SmallPtrSet<Operation *, 16> seen;
    while (!work.empty()) {
      Value value = work.pop_back_val();
      if (!value)
        continue;
      if (value == mask.getKeyTile() || keyDependentBounds.contains(value))
        return true;
      Operation *def = value.getDefiningOp();
      if (def && def->getBlock() == &scratch && seen.insert(def).second)
        llvm::append_range(work, def->getOperands());
    }
    return false;
  };
  size_t request = 0;
  auto auxRange = [&](flash::AuxLoadOp load,
                      ArrayRef<flash::Interval> indices) -> std::optional<flash::Interval> {
    if (!lowerPending())
      return std::nullopt;
    size_t index = request++;
    bool invariant = llvm::none_of(indices, [&](const flash::Interval &interval) {
      return dependsOnKeyTile(interval.lo) || dependsOnKeyTile(interval.hi);
    });
    SmallVector<Value> lo, hi;
    for (const flash::Interval &interval : indices) {
      lo.push_back(lookupScalar(interval.lo));
      hi.push_back(lookupScalar(interval.hi));
    }
    bool isFloat = load.getType().isF32();
    FailureOr<std::pair<Value, Value>> range = unknownRange(isFloat);
    if (ranges == AuxRanges::Hoist) {
      if (hoistedRanges.size() <= index)
        hoistedRanges.resize(index + 1);
      if (invariant) {
        range = warpAuxRange(load, lo, hi);
        if (succeeded(range))
          hoistedRanges[index] = *range;
      }
    } else if (ranges == AuxRanges::Read) {
      range = index < hoistedRanges.size() && hoistedRanges[index] ? *hoistedRanges[index]
                                                                    : warpAuxRange(load, lo, hi);
    }
    if (failed(range)) {
      lowerFailed = true;
      return std::nullopt;
    }
    auto placeholder = [&](Value bound) {
      Value value = isFloat ? Value(arith::ConstantOp::create(scratchBuilder, loc,
                                                              scratchBuilder.getF32FloatAttr(0)))
                            : Value(arith::ConstantIntOp::create(scratchBuilder, loc, 0, 64));
      scalars.map(value, bound);
      lowered = value.getDefiningOp();
      return value;
    };
    Value first = placeholder(range->first), last = placeholder(range->second);
    if (!invariant) {
      keyDependentBounds.insert(first);
      keyDependentBounds.insert(last);
    }
    return flash::Interval{isFloat ? flash::Interval::Kind::Float : flash::Interval::Kind::Int,
                           first, last};
  };
  scalars.map(mask.getKeyTile(), keyTile);
  flash::MaskIntervalEmitter::Facts facts =
      flash::MaskIntervalEmitter(scratchBuilder, mask.getLoc(), auxRange).classify(mask, 0);
  bool ok = lowerPending();
  std::pair<Value, Value> result;
  if (ok)
    result = {lookupScalar(facts.allVisible), lookupScalar(facts.anyVisible)};
  // The scratch values die with the block: forget their mappings.
  for (Operation &op : scratch)
    for (Value value : op.getResults())
      scalars.erase(value);
  scratch.dropAllReferences();
  scratch.clear();
  if (!ok)
    return failure();
  return result;
}

LogicalResult BlockSummaryEmitter::hoistKeyInvariantRanges() {
  // The analysis run once at key tile 0 for its requests' ranges; its facts
  // are dead (the loop's runs decide), so only the reductions remain.
  return success(succeeded(warpIntervalFacts(i32(0), AuxRanges::Hoist)));
}

void BlockSummaryEmitter::storeClass(Value keyTile, Value blockClass, Value predicate) {
  Value offset = blockSummaryOffset(kernel.getBlockSummaryAttr(), batch, head, queryTile, keyTile);
  auto ifStore = scf::IfOp::create(b, loc, TypeRange(), predicate, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifStore.thenBlock());
  LLVM::StoreOp::create(b, loc, arith::TruncIOp::create(b, loc, b.getI8Type(), blockClass),
                        gepBytes(blockSummaryPtr, offset));
}

Value BlockSummaryEmitter::classifyElements(Value batch, Value head, Value queryTile,
                                            Value keyTile) {
  using P = arith::CmpIPredicate;
  Value firstQuery = mul(queryTile, i32(config.br));
  Value firstKey = mul(keyTile, i32(config.bc));
  auto inside = [&](Value length, Value first, int64_t tile) -> Value {
    return arith::MinSIOp::create(
        b, loc,
        arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, length, first), i32(0)),
        i32(tile));
  };
  Value rowsInside = inside(queryLen, firstQuery, config.br);
  Value columnsInside = inside(keyLen, firstKey, config.bc);
  Value falseValue = arith::ConstantIntOp::create(b, loc, 0, 1);
  Value trueValue = arith::ConstantIntOp::create(b, loc, 1, 1);
  // The mask (i1) at (row, column) of the tile.
  auto visibleAt = [&](Value row, Value column) {
    return emitRegionElement(mask, ValueRange(), batch, head, add(firstQuery, row),
                             add(firstKey, column));
  };
  // Yields (any, all) with one more element's visibility folded in.
  auto yieldFolded = [&](Value any, Value all, Value visible) {
    scf::YieldOp::create(b, loc,
                         ValueRange{arith::OrIOp::create(b, loc, any, visible),
                                    arith::AndIOp::create(b, loc, all, visible)});
  };

  // First the tile's border inside the problem (its first and last row and
  // column, a few elements per thread): a visible and a hidden element there
  // make the tile partial without the full walk. That is every tile the
  // intervals leave undecided under monotonic data (sorted document ids:
  // any boundary crossing the tile reaches its border); a border all one
  // way leaves the tile to the walk below, so the class stays exact.
  int64_t borderLength = 2 * (config.br + config.bc);
  auto probe = scf::ForOp::create(b, loc, tid, i32(borderLength), i32(kSummaryThreads),
                                  ValueRange{falseValue, trueValue});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(probe.getBody());
    Value p = probe.getInductionVar();
    Value any = probe.getRegionIterArgs()[0], all = probe.getRegionIterArgs()[1];
    // p < 2·Bc: row 0 or the last row at column p mod Bc; then column 0 or
    // the last column at row (p - 2·Bc) mod Br.
    Value onRows = cmpI(P::slt, p, i32(2 * config.bc));
    Value rowSide = arith::SubIOp::create(b, loc, p, i32(2 * config.bc));
    Value lastRow = arith::SubIOp::create(b, loc, rowsInside, i32(1));
    Value lastColumn = arith::SubIOp::create(b, loc, columnsInside, i32(1));
    Value row = select(onRows,
                       select(cmpI(P::slt, p, i32(config.bc)), i32(0), lastRow),
                       arith::RemSIOp::create(b, loc, rowSide, i32(config.br)));
    Value column = select(onRows, arith::RemSIOp::create(b, loc, p, i32(config.bc)),
                          select(cmpI(P::slt, rowSide, i32(config.br)), i32(0), lastColumn));
    Value valid = arith::AndIOp::create(
        b, loc,
        arith::AndIOp::create(b, loc, cmpI(P::sge, row, i32(0)), cmpI(P::slt, row, rowsInside)),
        arith::AndIOp::create(b, loc, cmpI(P::sge, column, i32(0)),
                              cmpI(P::slt, column, columnsInside)));
    auto ifValid = scf::IfOp::create(b, loc, TypeRange{b.getI1Type(), b.getI1Type()}, valid,
                                     /*withElseRegion=*/true);
    b.setInsertionPointToStart(ifValid.thenBlock());
    FailureOr<Value> visible = visibleAt(row, column);
    if (failed(visible))
      return {};
    yieldFolded(any, all, *visible);
    b.setInsertionPointToStart(ifValid.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{any, all});
    b.setInsertionPointAfter(ifValid);
    scf::YieldOp::create(b, loc, ifValid.getResults());
  }
  Value borderMixed = arith::AndIOp::create(
      b, loc, ctaVote(probe.getResult(0), NVVM::BarrierReduction::OR),
      arith::XOrIOp::create(b, loc, ctaVote(probe.getResult(1), NVVM::BarrierReduction::AND),
                            trueValue));
  auto ifWalk = scf::IfOp::create(b, loc, b.getI32Type(), borderMixed, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifWalk.thenBlock());
  scf::YieldOp::create(b, loc, ValueRange{i32(flash::kBlockPartial)});
  b.setInsertionPointToStart(ifWalk.elseBlock());

  // Thread t takes columns t, t + T, ... and walks each down the tile's
  // rows inside the problem: the key side of the mask (doc[b, j], an
  // invariant load) leaves the row loop and the query side (doc[b, i]) is
  // the same address across the warp. A column at j >= M walks no rows.
  auto columnLoop = scf::ForOp::create(b, loc, tid, i32(config.bc), i32(kSummaryThreads),
                                       ValueRange{falseValue, trueValue});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(columnLoop.getBody());
    Value column = columnLoop.getInductionVar();
    Value rows = select(cmpI(P::slt, column, columnsInside), rowsInside, i32(0));
    auto rowLoop = scf::ForOp::create(b, loc, i32(0), rows, i32(1),
                                      columnLoop.getRegionIterArgs());
    b.setInsertionPointToStart(rowLoop.getBody());
    Value any = rowLoop.getRegionIterArgs()[0], all = rowLoop.getRegionIterArgs()[1];
    FailureOr<Value> visible = visibleAt(rowLoop.getInductionVar(), column);
    if (failed(visible))
      return {};
    yieldFolded(any, all, *visible);
    b.setInsertionPointAfter(rowLoop);
    scf::YieldOp::create(b, loc, rowLoop.getResults());
  }
  Value any = ctaVote(columnLoop.getResult(0), NVVM::BarrierReduction::OR);
  Value all = ctaVote(columnLoop.getResult(1), NVVM::BarrierReduction::AND);
  scf::YieldOp::create(b, loc,
                       ValueRange{select(any,
                                         select(all, i32(flash::kBlockFull),
                                                i32(flash::kBlockPartial)),
                                         i32(flash::kBlockEmpty))});
  b.setInsertionPointAfter(ifWalk);
  return ifWalk.getResult(0);
}

LogicalResult BlockSummaryEmitter::emit() {
  if (failed(findMask()))
    return failure();
  MLIRContext *ctx = kernel.getContext();
  SmallVector<Type> argTypes;
  // The main kernel's ABI up to the summary: the forward's, then the
  // schedule's counters (this kernel's own); or the backward's.
  unsigned firstSize = 5 + 12;
  if (writesTileOrder()) {
    if (failed(appendForwardArguments(argTypes)))
      return failure();
    argTypes.push_back(LLVM::LLVMPointerType::get(ctx, 1));
  } else {
    appendBackwardArguments(argTypes);
    firstSize = kBackwardPointers + kBackwardStrides;
  }
  b.setInsertionPointToEnd(gpuModule.getBody());
  func = LLVM::LLVMFuncOp::create(
      b, loc,
      writesTileOrder() ? blockSummaryKernelName(kernelName())
                        : backwardKernelName(kernelName(), "summary"),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  func->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func->setAttr(NVVM::NVVMDialect::getReqntidAttrName(),
                b.getDenseI32ArrayAttr({static_cast<int32_t>(kSummaryThreads), 1, 1}));
  // 36 registers (40 allocated): 12 CTAs per SM instead of 8 at 64. The
  // kernel is bound by the latency of its loads, votes and atomics, so
  // resident warps are what hides it; a cap of 32 (16 CTAs) measured the
  // same and spills in some variants (ptxas-examples.test checks none).
  func->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(), b.getI32IntegerAttr(36));
  // Only the aux tensors are read and only the summary (and the order's
  // counters) written.
  unsigned summaryArgument = argTypes.size() - (writesTileOrder() ? 2 : 1);
  unsigned firstTensor = firstSize + 5 + kernel.getParams().size();
  for (unsigned i = firstTensor; i < firstTensor + kernel.getTensors().size(); ++i) {
    func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
    func.setArgAttr(i, LLVM::LLVMDialect::getReadonlyAttrName(), b.getUnitAttr());
  }
  for (unsigned i = summaryArgument; i < argTypes.size(); ++i)
    func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());

  Block &entry = *func.addEntryBlock(b);
  b.setInsertionPointToStart(&entry);
  bindSizesAndInputs(entry.getArguments(), firstSize);
  blockSummaryPtr = entry.getArgument(summaryArgument);
  Value counters = writesTileOrder() ? entry.getArguments().back() : Value();
  bindThreadCoordinates();

  Type i32Type = b.getI32Type();
  flash::BlockSummaryAttr summary = kernel.getBlockSummaryAttr();
  queryTile = NVVM::BlockIdYOp::create(b, loc, i32Type);
  Value row = NVVM::BlockIdZOp::create(b, loc, i32Type);
  Value heads = summary.getPerHead() ? headCount : i32(1);
  batch = summary.getPerBatch() ? arith::DivUIOp::create(b, loc, row, heads) : i32(0);
  head = summary.getPerHead() ? arith::RemUIOp::create(b, loc, row, heads) : i32(0);
  // The mask's own operands: a backward kernel computes its query head
  // from the KV head and its loop over the group, which this grid does not
  // have.
  scalars.map(mask.getBatch(), batch);
  scalars.map(mask.getHead(), head);
  scalars.map(mask.getQueryTile(), queryTile);

  // The region's captures (CSE may have merged its flash.dim or constants
  // into the kernel's) must exist before it is emitted; none depends on
  // the key loop's induction variable, which no region op reads.
  llvm::SetVector<Value> captured;
  getUsedValuesDefinedAbove(mask.getBody(), captured);
  if (failed(lowerDefinitions(captured.getArrayRef())))
    return error(mask, "the block summary needs a mask region that captures scalars only");

  // The CTAs of a query tile take its groups of key blocks in turn (the
  // runtime launches fewer CTAs than groups at long N: each CTA is short,
  // so their dispatch, not their work, bounded the kernel).
  if (failed(hoistKeyInvariantRanges()))
    return error(mask, "the block summary could not lower the mask's interval analysis");
  Value keyBlocks = ceilDiv(keyLen, config.bc);
  auto groups = scf::ForOp::create(b, loc, NVVM::BlockIdXOp::create(b, loc, i32Type),
                                   ceilDiv(keyLen, config.bc * kKeyBlocksPerCta),
                                   NVVM::GridDimXOp::create(b, loc, i32Type), ValueRange{i32(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(groups.getBody());
    Value cost = emitKeyGroup(groups.getInductionVar(), keyBlocks);
    if (!cost)
      return failure();
    scf::YieldOp::create(b, loc, ValueRange{add(groups.getRegionIterArgs()[0], cost)});
  }
  if (writesTileOrder() && failed(emitTileOrder(counters, groups.getResult(0))))
    return failure();
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

Value BlockSummaryEmitter::emitKeyGroup(Value keyGroup, Value keyBlocks) {
  using P = arith::CmpIPredicate;
  Type i32Type = b.getI32Type();
  Value firstKeyTile = mul(keyGroup, i32(kKeyBlocksPerCta));
  Value falseValue = arith::ConstantIntOp::create(b, loc, 0, 1);
  Value warpKeyTile = add(firstKeyTile, warp);
  Value warpInside = cmpI(P::ult, warpKeyTile, keyBlocks);

  // Phase 0: where the mask's index terms alone leave all of the CTA's key
  // blocks empty (past a causal diagonal: half the grid of a causal mask),
  // each warp stores its block's byte and the CTA goes on to its next
  // group, without aux loads. Every thread computes the same decision.
  Value mayBeVisible = falseValue;
  for (int64_t slot = 0; slot < kKeyBlocksPerCta; ++slot) {
    Value keyTile = add(firstKeyTile, i32(slot));
    FailureOr<std::pair<Value, Value>> facts = warpIntervalFacts(keyTile, AuxRanges::Unknown);
    if (failed(facts))
      return {};
    mayBeVisible = arith::OrIOp::create(
        b, loc, mayBeVisible,
        arith::AndIOp::create(b, loc, cmpI(P::ult, keyTile, keyBlocks), facts->second));
  }
  auto ifMayBeVisible = scf::IfOp::create(b, loc, b.getI1Type(), mayBeVisible,
                                          /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifMayBeVisible.elseBlock());
  storeClass(warpKeyTile, i32(flash::kBlockEmpty),
             arith::AndIOp::create(b, loc, warpInside, cmpI(P::eq, lane, i32(0))));
  scf::YieldOp::create(b, loc, ValueRange{falseValue});
  b.setInsertionPointToStart(ifMayBeVisible.thenBlock());

  // Phase 1: warp w decides key block firstKeyTile + w by its intervals.
  auto ifInside = scf::IfOp::create(b, loc, TypeRange{b.getI1Type(), i32Type}, warpInside,
                                    /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifInside.thenBlock());
    FailureOr<std::pair<Value, Value>> facts = warpIntervalFacts(warpKeyTile);
    if (failed(facts))
      return {};
    auto [allVisible, anyVisible] = *facts;
    Value empty =
        arith::XOrIOp::create(b, loc, anyVisible, arith::ConstantIntOp::create(b, loc, 1, 1));
    Value decided = arith::OrIOp::create(b, loc, allVisible, empty);
    Value decidedClass = select(allVisible, i32(flash::kBlockFull), i32(flash::kBlockEmpty));
    storeClass(warpKeyTile, decidedClass,
               arith::AndIOp::create(b, loc, decided, cmpI(P::eq, lane, i32(0))));
    Value trueValue = arith::ConstantIntOp::create(b, loc, 1, 1);
    scf::YieldOp::create(b, loc,
                         ValueRange{arith::XOrIOp::create(b, loc, decided, trueValue), decidedClass});
    b.setInsertionPointToStart(ifInside.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{falseValue, i32(flash::kBlockEmpty)});
  }
  Value undecided = ifInside.getResult(0);

  // Phase 2: the CTA evaluates the elements of each undecided block. One
  // barrier tells every thread which warps' blocks are undecided: lane l of
  // warp w votes when its block is undecided and l < 2^w, so the count of
  // votes (bar.red.popc) is the bit mask of those warps.
  static_assert(kKeyBlocksPerCta <= 6, "2^w voting lanes of a warp of 32");
  Value votes = arith::AndIOp::create(
      b, loc, undecided, cmpI(P::ult, lane, arith::ShLIOp::create(b, loc, i32(1), warp)));
  Value undecidedWarps = ctaCount(votes);
  Value warpClass = ifInside.getResult(1);
  for (int64_t slot = 0; slot < kKeyBlocksPerCta; ++slot) {
    Value anyUndecided =
        cmpI(P::ne, arith::AndIOp::create(b, loc, undecidedWarps, i32(int64_t{1} << slot)),
             i32(0));
    auto ifEvaluate = scf::IfOp::create(b, loc, i32Type, anyUndecided, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifEvaluate.thenBlock());
      Value keyTile = add(firstKeyTile, i32(slot));
      Value blockClass = classifyElements(batch, head, queryTile, keyTile);
      if (!blockClass)
        return {};
      storeClass(keyTile, blockClass, cmpI(P::eq, tid, i32(0)));
      scf::YieldOp::create(b, loc, ValueRange{blockClass});
      b.setInsertionPointToStart(ifEvaluate.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{i32(flash::kBlockEmpty)});
    }
    // The class every thread of warp `slot` now knows for its block.
    warpClass = select(arith::AndIOp::create(b, loc, undecided, cmpI(P::eq, warp, i32(slot))),
                       ifEvaluate.getResult(0), warpClass);
  }
  // The block's cost for the schedule: 1 per non-empty block, 2 for a
  // partial one (it evaluates the mask); lanes below the cost vote.
  Value cost = add(arith::ExtUIOp::create(b, loc, i32Type,
                                          cmpI(P::ne, warpClass, i32(flash::kBlockEmpty))),
                   arith::ExtUIOp::create(b, loc, i32Type,
                                          cmpI(P::eq, warpClass, i32(flash::kBlockPartial))));
  scf::YieldOp::create(b, loc, ValueRange{cmpI(P::ult, lane, cost)});
  b.setInsertionPointAfter(ifMayBeVisible);
  return writesTileOrder() ? ctaCount(ifMayBeVisible.getResult(0)) : i32(0);
}

Value BlockSummaryEmitter::ctaCount(Value predicate) {
  return NVVM::BarrierOp::create(
             b, loc, b.getI32Type(), Value(), Value(),
             NVVM::BarrierReductionAttr::get(b.getContext(), NVVM::BarrierReduction::POPC),
             arith::ExtUIOp::create(b, loc, b.getI32Type(), predicate))
      .getRes();
}

LogicalResult BlockSummaryEmitter::emitTileOrder(Value counters, Value ctaCost) {
  using P = arith::CmpIPredicate;
  Type i32Type = b.getI32Type(), i64Type = b.getI64Type();
  // counters: per entry (summary row, query tile) a u64 whose high half
  // counts its CTAs done and whose low half sums their cost; per entry its
  // final cost (u32); then the entries done. The grid is (CTAs per query
  // tile, query tiles, summary rows).
  Value ctasPerEntry = NVVM::GridDimXOp::create(b, loc, i32Type);
  Value tiles = NVVM::GridDimYOp::create(b, loc, i32Type);
  Value entries = mul(tiles, NVVM::GridDimZOp::create(b, loc, i32Type));
  Value pointer = LLVM::PtrToIntOp::create(b, loc, i64Type, counters);
  auto packedAt = [&](Value index) { return add(pointer, mul(toI64(index), i64(8))); };
  Value finalCosts = packedAt(entries);
  auto costAt = [&](Value index) { return add(finalCosts, mul(toI64(index), i64(4))); };
  Value doneCounter = costAt(entries);
  auto pointerTo = [&](Value address) {
    return LLVM::IntToPtrOp::create(b, loc, counters.getType(), address).getResult();
  };

  // Thread 0 adds (1 CTA, its cost) to its entry in one relaxed atomic:
  // no fence, and the atomic alone says who is the entry's last (a
  // single-location count, with a fence per CTA, cost the summary 6-20 us
  // at N = 8k-32k). The entry's last CTA stores the entry's cost and
  // counts the entry done (acq_rel: after its store, and the launch's last
  // sees every entry's). That CTA sorts; it resets the counters.
  auto arrive = scf::IfOp::create(b, loc, b.getI1Type(), cmpI(P::eq, tid, i32(0)),
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(arrive.thenBlock());
    Value entry = add(mul(NVVM::BlockIdZOp::create(b, loc, i32Type), tiles),
                      NVVM::BlockIdYOp::create(b, loc, i32Type));
    Value increment = arith::OrIOp::create(b, loc, i64(int64_t{1} << 32),
                                           arith::ExtUIOp::create(b, loc, i64Type, ctaCost));
    Value before = emitAsmValue(i64Type, "atom.relaxed.gpu.global.add.u64 $0, [$1], $2;",
                                "=l,l,l", ValueRange{packedAt(entry), increment});
    Value ctasBefore = arith::TruncIOp::create(
        b, loc, i32Type, arith::ShRUIOp::create(b, loc, before, i64(32)));
    auto ifEntryDone = scf::IfOp::create(
        b, loc, b.getI1Type(),
        cmpI(P::eq, ctasBefore, arith::SubIOp::create(b, loc, ctasPerEntry, i32(1))),
        /*withElseRegion=*/true);
    b.setInsertionPointToStart(ifEntryDone.thenBlock());
    Value entryCost = add(arith::TruncIOp::create(b, loc, i32Type, before), ctaCost);
    LLVM::StoreOp::create(b, loc, entryCost, pointerTo(costAt(entry)));
    Value entriesBefore = emitAsmValue(i32Type, "atom.acq_rel.gpu.global.add.u32 $0, [$1], 1;",
                                       "=r,l,~{memory}", ValueRange{doneCounter});
    scf::YieldOp::create(
        b, loc,
        ValueRange{cmpI(P::eq, entriesBefore, arith::SubIOp::create(b, loc, entries, i32(1)))});
    b.setInsertionPointToStart(ifEntryDone.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{arith::ConstantIntOp::create(b, loc, 0, 1)});
    b.setInsertionPointAfter(ifEntryDone);
    scf::YieldOp::create(b, loc, ValueRange{ifEntryDone.getResult(0)});
    b.setInsertionPointToStart(arrive.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{arith::ConstantIntOp::create(b, loc, 0, 1)});
  }
  Value last = ctaVote(arrive.getResult(0), NVVM::BarrierReduction::OR);
  auto ifLast = scf::IfOp::create(b, loc, TypeRange(), last, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifLast.thenBlock());
  // No fence here: thread 0's acq_rel count and the barrier order the
  // entries' cost stores before every thread's loads below.

  // A counting sort of the entries by cost over kOrderBins bins, one per
  // thread: a histogram, a scan, a scatter (order within a bin is free).
  static_assert(kOrderBins == kSummaryThreads, "one bin per thread");
  Value shared = sharedMemoryBase(16);
  auto sharedWord = [&](Value index) { return gepElements(shared, toI64(index), i32Type); };
  auto storeShared = [&](Value index, Value value) {
    LLVM::StoreOp::create(b, loc, value, sharedWord(index));
  };
  auto loadShared = [&](Value index) {
    return LLVM::LoadOp::create(b, loc, i32Type, sharedWord(index)).getResult();
  };
  // Costs run 0 .. 2 x key blocks; bin 0 holds the costliest
  // (flash::BlockSummaryShape::orderBin, which the harness checks against).
  Value costBound = toI64(add(mul(ceilDiv(keyLen, config.bc), i32(2)), i32(1)));
  auto binOf = [&](Value cost) {
    Value scaled = arith::TruncIOp::create(
        b, loc, i32Type,
        arith::DivUIOp::create(b, loc, mul(toI64(cost), i64(kOrderBins)), costBound));
    return arith::SubIOp::create(b, loc, i32(kOrderBins - 1),
                                 arith::MinUIOp::create(b, loc, scaled, i32(kOrderBins - 1)))
        .getResult();
  };
  auto costOf = [&](Value index) {
    return LLVM::LoadOp::create(b, loc, i32Type, pointerTo(costAt(index)), 4, /*isVolatile=*/true)
        .getResult();
  };
  auto forEachEntry = [&](function_ref<void(Value)> body) {
    auto loop = scf::ForOp::create(b, loc, tid, entries, i32(kSummaryThreads));
    OpBuilder::InsertionGuard loopGuard(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    body(loop.getInductionVar());
  };
  auto atomicAdd = [&](Value index, Value value) {
    return LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, sharedWord(index), value,
                                     LLVM::AtomicOrdering::monotonic)
        .getResult();
  };
  storeShared(tid, i32(0));
  NVVM::Barrier0Op::create(b, loc);
  forEachEntry([&](Value index) { atomicAdd(binOf(costOf(index)), i32(1)); });
  NVVM::Barrier0Op::create(b, loc);
  // Exclusive scan of the bins: within each warp by shuffles, then the
  // warps' totals (after the bins in shared memory).
  Value count = loadShared(tid);
  Value inclusive = count;
  for (int64_t distance = 1; distance < 32; distance *= 2) {
    Value below = NVVM::ShflOp::create(b, loc, i32Type, i32(-1), inclusive, i32(distance),
                                       i32(0), NVVM::ShflKind::up, UnitAttr());
    inclusive = add(inclusive, select(cmpI(P::uge, lane, i32(distance)), below, i32(0)));
  }
  {
    auto ifLastLane = scf::IfOp::create(b, loc, TypeRange(), cmpI(P::eq, lane, i32(31)),
                                        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard laneGuard(b);
    b.setInsertionPointToStart(ifLastLane.thenBlock());
    storeShared(add(warp, i32(kOrderBins)), inclusive);
  }
  NVVM::Barrier0Op::create(b, loc);
  Value start = arith::SubIOp::create(b, loc, inclusive, count);
  for (int64_t other = 0; other < kSummaryWarps - 1; ++other)
    start = add(start, select(cmpI(P::ult, i32(other), warp),
                              loadShared(i32(kOrderBins + other)), i32(0)));
  storeShared(tid, start);
  NVVM::Barrier0Op::create(b, loc);
  Value order = blockSummaryOrder(kernel.getBlockSummaryAttr());
  forEachEntry([&](Value index) {
    Value slot = atomicAdd(binOf(costOf(index)), i32(1));
    LLVM::StoreOp::create(b, loc, index, gepElements(order, toI64(slot), i32Type));
    // Every counter back to zero, the costs too: the next launch may have
    // another entry count, so another layout over the same buffer.
    LLVM::StoreOp::create(b, loc, i64(0), pointerTo(packedAt(index)));
    LLVM::StoreOp::create(b, loc, i32(0), pointerTo(costAt(index)));
  });
  onFirstThread([&] { LLVM::StoreOp::create(b, loc, i32(0), pointerTo(doneCounter)); });
  return success();
}

} // namespace

flash::LaunchAttr lowering::emitBlockSummaryKernel(flash::KernelSignature kernel,
                                                   const KernelConfig &config,
                                                   gpu::GPUModuleOp gpuModule, StringRef passName,
                                                   flash::GemmKind gemm) {
  BlockSummaryEmitter emitter(kernel, config, gpuModule, passName);
  LogicalResult emitted = emitter.emit();
  return emitter.launchFacts(emitted, gemm, flash::GridKind::BlockSummary, kSummaryThreads,
                             isa<flash::KernelOp>(kernel.getOperation()) ? kOrderSharedBytes : 0);
}
