//===- BlockSummary.cpp - The kernel that classifies a mask's tiles -------===//
//
// A flash.kernel with a #flash.block_summary gets a second GPU kernel,
// `<name>_summary`, launched before it over (CTAs per query tile,
// ceil(N / Br), summary batches x heads) CTAs of four warps; the CTAs of a
// query tile take its rounds of 128 key blocks in turn, one key block per
// thread. First every thread runs the mask's interval analysis
// (MaskIntervals.h) on its own block, with the range of every aux tensor
// element the mask reads, reduced over the tile's indices (doc[b, i]: the
// min and max document id of the tile's rows): sorted document ids, a key
// length or a causal edge decide most tiles this way. A range over the
// query tile's rows is reduced once per CTA; one over the thread's keys is
// reduced by its warp for all 32 lanes in turn (coalesced loads, a few
// lanes' boxes in flight at once), so the analysis itself runs once per
// tile, not once per lane of a warp that holds one tile. Then the blocks
// the intervals left undecided are listed in shared memory and each warp
// evaluates the mask on every element of one of them at a time (border
// first; one vote.any and one vote.all give the byte the main kernel's
// flash.block_class reads). Both paths give the exact class of the tile's
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
/// Key blocks per CTA and round: one per thread.
constexpr int64_t kKeyBlocksPerRound = kSummaryThreads;
/// The longest index range of an aux tensor a warp reduces (a tile's rows
/// or keys are 64-256); a longer one leaves the element unknown.
constexpr int64_t kMaxRangeElements = 4096;
/// Elements of an aux range each lane loads per step.
constexpr int64_t kLoadsPerLane = 4;
/// Lanes whose key ranges a warp reduces at once (their loads in flight
/// together).
constexpr int64_t kLaneBoxesPerStep = 4;
/// Bins of the tile order's counting sort (flash::BlockSummaryShape::orderBin).
constexpr int64_t kOrderBins = flash::BlockSummaryShape::kTileOrderBins;
/// Shared memory of the sort: the bins, then a total per warp.
constexpr int64_t kOrderSharedBytes = 4 * (kOrderBins + kSummaryWarps);
/// Shared memory of the rounds: the count of blocks listed, the CTA's cost,
/// then a ring of two rounds' undecided key blocks (a warp may list its
/// next round's while another still evaluates this one's).
constexpr int64_t kListRing = 2 * kKeyBlocksPerRound;
constexpr int64_t kRoundSharedBytes = 16 + 4 * kListRing;

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
  /// on (b, h, qt, keyTile) with the aux tensors' ranges over the tile;
  /// failure when a value cannot be lowered. `ranges` says where the aux
  /// ranges come from; keyTile may differ between the lanes except for
  /// Hoist.
  enum class AuxRanges {
    /// Every range its type's whole range (no loads, no shuffles): what the
    /// mask's index terms alone decide.
    Unknown,
    /// Reduce the ranges whose box does not depend on the key tile into
    /// hoistedRanges (keyTile uniform over the warp); the others stay
    /// unknown.
    Hoist,
    /// The hoisted range where there is one, else each lane's own box,
    /// reduced by the warp (laneAuxRange; every lane of the warp takes
    /// part).
    Read,
  };
  FailureOr<std::pair<Value, Value>> intervalFacts(Value keyTile,
                                                   AuxRanges ranges = AuxRanges::Read);
  /// Reduces, before the rounds, every aux range the analysis asks for
  /// whose index box does not depend on the key tile (doc[b, i] over the
  /// query tile's rows: the same for every key block of the CTA);
  /// intervalFacts then uses them instead of loading again.
  LogicalResult hoistKeyInvariantRanges();
  /// The bounds of an aux range nothing is known of: an integer tensor's
  /// i32 range widened to i64, a floating-point one's [-inf, inf].
  std::pair<Value, Value> unknownRange(bool isFloat);
  /// An aux range's index box [lo, hi], prepared for the warp's loads:
  /// its elements inside the tensor are `count` (i32) elements
  /// `strideBytes` (i32) apart from byte address `address` (i64);
  /// `outside` (i1): some element of the box is outside the tensor (and
  /// reads 0); `bounded` (i1): at most one index varies, the box has at
  /// most kMaxRangeElements elements and its stride is below 2 GiB (else
  /// its range is the type's whole range, and count is 0).
  struct PreparedBox {
    Value address, strideBytes, count, outside, bounded;
  };
  FailureOr<PreparedBox> prepareBox(flash::AuxLoadOp load, ArrayRef<Value> lo,
                                    ArrayRef<Value> hi);
  /// The [min, max] of `load`'s tensor over each box (uniform over the
  /// warp), reduced over the warp: i64 bounds for an integer tensor, f32
  /// for a floating-point one; the type's whole range where the box is not
  /// bounded or an element is NaN. The boxes' first loads are issued
  /// together.
  FailureOr<SmallVector<std::pair<Value, Value>>> warpAuxRanges(flash::AuxLoadOp load,
                                                                ArrayRef<PreparedBox> boxes);
  /// The same range over each lane's own box [lo, hi]: the warp reduces
  /// the 32 lanes' boxes kLaneBoxesPerStep at a time (each box's loads
  /// coalesced) and each lane keeps its own.
  FailureOr<std::pair<Value, Value>> laneAuxRange(flash::AuxLoadOp load, ArrayRef<Value> lo,
                                                  ArrayRef<Value> hi);
  /// Lane `source`'s `value` (i32 or i64) in every lane.
  Value shuffleFromLane(Value value, Value source);
  /// Stores the class (i32) of key block `keyTile` where `predicate` holds.
  void storeClass(Value keyTile, Value blockClass, Value predicate);
  /// The exact class of the tile's elements inside the problem (the tile
  /// uniform over the warp): the mask on the tile's border first (mixed:
  /// partial), else on every element; each lane evaluates its share and
  /// the warp votes.
  Value classifyElements(Value batch, Value head, Value queryTile, Value keyTile);
  /// The count of threads whose i1 `predicate` holds (bar.red.popc).
  Value ctaCount(Value predicate);
  /// The tile order's cost of a block of class `blockClass` (i32): 1 per
  /// non-empty block, 2 for a partial one (it evaluates the mask).
  Value blockCost(Value blockClass);
  /// Classifies key blocks 128·round + tid (round uniform); adds this
  /// thread's share of their cost to `laneCost` and returns it with the
  /// list ring's new base, or nulls on failure.
  std::pair<Value, Value> emitKeyRound(Value round, Value keyBlocks, Value laneCost,
                                       Value listBase);
  /// Adds the CTA's cost (i32, thread 0's) to its query tile's counter; the
  /// last CTA of the launch sorts the tiles into the summary's order.
  LogicalResult emitTileOrder(Value counters, Value ctaCost);

  /// The rounds' shared memory (kRoundSharedBytes, after the sort's).
  Value listCount, ctaCostTotal, listRing;
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

FailureOr<BlockSummaryEmitter::PreparedBox>
BlockSummaryEmitter::prepareBox(flash::AuxLoadOp load, ArrayRef<Value> lo, ArrayRef<Value> hi) {
  using P = arith::CmpIPredicate;
  flash::AuxTensorAttr decl = signature.lookupTensor(load.getTensor());
  if (!decl)
    return error(load, "unknown aux tensor '") << load.getTensor() << "'";
  if (static_cast<int64_t>(lo.size()) != decl.getRank())
    return error(load, "index count does not match the tensor's rank");
  Type elementType = decl.getElementType(), resultType = load.getType();
  if (elementType != resultType && (!resultType.isF32() || !isa<FloatType>(elementType)))
    return error(load, "aux tensor element type does not convert to the result type");
  Value pointer = auxPointers.lookup(load.getTensor());
  if (!pointer)
    return error(load, "unknown aux tensor '") << load.getTensor() << "'";
  int64_t elementBytes = elementType.getIntOrFloatBitWidth() / 8;
  Type i32Type = b.getI32Type();
  // Dense row-major: the stride of index k is the product of the sizes
  // after it.
  SmallVector<Value> sizes, strides(lo.size());
  for (int64_t extent : decl.getExtents())
    sizes.push_back(toI64(flash::AuxTensorAttr::isRole(extent)
                              ? launchSizeOf(flash::AuxTensorAttr::decodeRole(extent))
                              : i32(extent)));
  Value running = i64(1);
  for (size_t k = lo.size(); k-- > 0;) {
    strides[k] = running;
    running = mul(running, sizes[k]);
  }
  Value falseValue = arith::ConstantIntOp::create(b, loc, 0, 1);
  Value varyingCount = i32(0), length = i64(1), insideLength = i64(0);
  Value first = i64(0), stride = i64(0), outside = falseValue, empty = falseValue;
  for (auto [k, bounds] : llvm::enumerate(llvm::zip(lo, hi))) {
    Value low = toI64(std::get<0>(bounds)), high = toI64(std::get<1>(bounds));
    Value differs = cmpI(P::ne, low, high);
    varyingCount = add(varyingCount, arith::ExtUIOp::create(b, loc, i32Type, differs));
    length = add(length, select(differs, arith::SubIOp::create(b, loc, high, low), i64(0)));
    // The part of [low, high] inside the tensor; the rest reads 0.
    Value last = arith::SubIOp::create(b, loc, sizes[k], i64(1));
    Value lowInside = arith::MaxSIOp::create(b, loc, low, i64(0));
    Value highInside = arith::MinSIOp::create(b, loc, high, last);
    outside = arith::OrIOp::create(
        b, loc, outside,
        arith::OrIOp::create(b, loc, cmpI(P::slt, low, i64(0)), cmpI(P::sgt, high, last)));
    empty = arith::OrIOp::create(b, loc, empty, cmpI(P::sgt, lowInside, highInside));
    insideLength = add(insideLength, select(differs, arith::SubIOp::create(b, loc, highInside,
                                                                            lowInside),
                                            i64(0)));
    first = add(first, mul(lowInside, strides[k]));
    stride = add(stride, select(differs, strides[k], i64(0)));
  }
  PreparedBox box;
  // A stride of 2^31 bytes or more (never in practice) leaves the range
  // unknown: the loads' offsets stay 32-bit.
  Value strideBytes = mul(stride, i64(elementBytes));
  box.bounded = arith::AndIOp::create(
      b, loc,
      arith::AndIOp::create(b, loc, cmpI(P::ule, varyingCount, i32(1)),
                            cmpI(P::sle, length, i64(kMaxRangeElements))),
      cmpI(P::slt, strideBytes, i64(int64_t{1} << 31)));
  Value loads = arith::AndIOp::create(
      b, loc, box.bounded,
      arith::XOrIOp::create(b, loc, empty, arith::ConstantIntOp::create(b, loc, 1, 1)));
  box.count = select(loads, arith::TruncIOp::create(b, loc, i32Type, add(insideLength, i64(1))),
                     i32(0));
  // A box with nothing to load reads (and does not count) element 0.
  Value base = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), pointer);
  box.address = add(base, mul(select(loads, first, i64(0)), i64(elementBytes)));
  box.strideBytes = arith::TruncIOp::create(b, loc, i32Type, strideBytes);
  box.outside = outside;
  return box;
}

FailureOr<SmallVector<std::pair<Value, Value>>>
BlockSummaryEmitter::warpAuxRanges(flash::AuxLoadOp load, ArrayRef<PreparedBox> boxes) {
  using P = arith::CmpIPredicate;
  bool isFloat = load.getType().isF32();
  float inf = std::numeric_limits<float>::infinity();
  Value lowest = isFloat ? f32(inf) : i32(std::numeric_limits<int32_t>::max());
  Value highest = isFloat ? f32(-inf) : i32(std::numeric_limits<int32_t>::min());
  auto minOf = [&](Value x, Value y) -> Value {
    return isFloat ? Value(arith::MinimumFOp::create(b, loc, x, y))
                   : Value(arith::MinSIOp::create(b, loc, x, y));
  };
  auto maxOf = [&](Value x, Value y) -> Value {
    return isFloat ? Value(arith::MaximumFOp::create(b, loc, x, y))
                   : Value(arith::MaxSIOp::create(b, loc, x, y));
  };
  Type elementType = signature.lookupTensor(load.getTensor()).getElementType();
  unsigned alignment = elementType.getIntOrFloatBitWidth() / 8;
  // Element `step` of a box folded into (least, most): past the box, the
  // last element again (a repeat changes neither bound; a box with nothing
  // to load is dropped below).
  auto fold = [&](const PreparedBox &box, Value step, Value &least, Value &most) {
    Value last = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, box.count, i32(1)),
                                        i32(0));
    Value offset = arith::MinUIOp::create(b, loc, step, last);
    auto wide = [&](Value x) { return arith::ExtUIOp::create(b, loc, b.getI64Type(), x); };
    Value address = add(box.address, mul(wide(offset), wide(box.strideBytes)));
    Value element = LLVM::LoadOp::create(
        b, loc, elementType,
        LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext(), 1), address),
        alignment, /*isVolatile=*/false, /*isNonTemporal=*/false, /*isInvariant=*/true);
    if (elementType != load.getType())
      element = LLVM::FPExtOp::create(b, loc, load.getType(), element);
    least = minOf(least, element);
    most = maxOf(most, element);
  };
  // The first step of every box in one straight line: kLoadsPerLane
  // independent loads per lane and box (a tile's 64-256 rows or keys),
  // all in flight together.
  SmallVector<std::pair<Value, Value>> folded;
  for (const PreparedBox &box : boxes) {
    Value least = lowest, most = highest;
    for (int64_t k = 0; k < kLoadsPerLane; ++k)
      fold(box, add(lane, i32(32 * k)), least, most);
    folded.emplace_back(least, most);
  }
  // Longer boxes go on in a loop.
  for (auto [box, bounds] : llvm::zip(boxes, folded)) {
    auto rest = scf::ForOp::create(b, loc, add(lane, i32(32 * kLoadsPerLane)), box.count,
                                   i32(32 * kLoadsPerLane), ValueRange{bounds.first, bounds.second});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rest.getBody());
    Value least = rest.getRegionIterArgs()[0], most = rest.getRegionIterArgs()[1];
    for (int64_t k = 0; k < kLoadsPerLane; ++k)
      fold(box, add(rest.getInductionVar(), i32(32 * k)), least, most);
    scf::YieldOp::create(b, loc, ValueRange{least, most});
    bounds = {rest.getResult(0), rest.getResult(1)};
  }
  SmallVector<std::pair<Value, Value>> ranges;
  for (auto [box, bounds] : llvm::zip(boxes, folded)) {
    // A box with nothing to load folded element 0 in: drop it.
    Value loaded = cmpI(P::sgt, box.count, i32(0));
    Value least = select(loaded, bounds.first, lowest);
    Value most = select(loaded, bounds.second, highest);
    // Elements outside the tensor read 0.
    Value zero = isFloat ? f32(0.0) : i32(0);
    if (isFloat) {
      for (int64_t laneMask = 16; laneMask >= 1; laneMask /= 2) {
        least = minOf(least, shuffleXor(least, laneMask));
        most = maxOf(most, shuffleXor(most, laneMask));
      }
      least = select(box.outside, minOf(least, zero), least);
      most = select(box.outside, maxOf(most, zero), most);
      // minimum/maximum propagate NaN: one NaN element makes the range
      // unknown.
      Value nan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, least, most);
      Value known = arith::AndIOp::create(
          b, loc, box.bounded,
          arith::XOrIOp::create(b, loc, nan, arith::ConstantIntOp::create(b, loc, 1, 1)));
      auto [lowestBound, highestBound] = unknownRange(/*isFloat=*/true);
      ranges.emplace_back(select(known, least, lowestBound), select(known, most, highestBound));
      continue;
    }
    // One redux.sync each instead of five dependent shuffle-and-min steps
    // (sm_80 and up; f32 redux needs sm_100).
    auto warpReduce = [&](Value value, NVVM::ReduxKind kind) {
      return NVVM::ReduxOp::create(b, loc, value.getType(), value,
                                   NVVM::ReduxKindAttr::get(b.getContext(), kind), i32(-1))
          .getResult();
    };
    least = warpReduce(least, NVVM::ReduxKind::MIN);
    most = warpReduce(most, NVVM::ReduxKind::MAX);
    least = select(box.outside, minOf(least, zero), least);
    most = select(box.outside, maxOf(most, zero), most);
    auto wide = [&](Value x) { return arith::ExtSIOp::create(b, loc, b.getI64Type(), x); };
    auto [lowestBound, highestBound] = unknownRange(/*isFloat=*/false);
    ranges.emplace_back(select(box.bounded, wide(least), lowestBound),
                        select(box.bounded, wide(most), highestBound));
  }
  return ranges;
}

Value BlockSummaryEmitter::shuffleFromLane(Value value, Value source) {
  Type i32Type = b.getI32Type();
  auto shuffle = [&](Value word) {
    return NVVM::ShflOp::create(b, loc, i32Type, i32(-1), word, source, i32(31),
                                NVVM::ShflKind::idx, UnitAttr())
        .getResult();
  };
  if (value.getType().isInteger(32))
    return shuffle(value);
  assert(value.getType().isInteger(64) && "an i32 or i64 word");
  Type i64Type = b.getI64Type();
  Value low = shuffle(arith::TruncIOp::create(b, loc, i32Type, value));
  Value high = shuffle(arith::TruncIOp::create(
      b, loc, i32Type, arith::ShRUIOp::create(b, loc, value, i64(32))));
  return arith::OrIOp::create(
      b, loc, arith::ExtUIOp::create(b, loc, i64Type, low),
      arith::ShLIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i64Type, high), i64(32)));
}

FailureOr<std::pair<Value, Value>>
BlockSummaryEmitter::laneAuxRange(flash::AuxLoadOp load, ArrayRef<Value> lo, ArrayRef<Value> hi) {
  static_assert(32 % kLaneBoxesPerStep == 0, "whole steps over the warp's lanes");
  static_assert(kMaxRangeElements < (1 << 16), "a box's count fits 16 bits");
  FailureOr<PreparedBox> own = prepareBox(load, lo, hi);
  if (failed(own))
    return failure();
  // The box goes to the other lanes as its address, its stride and
  // (count, outside, bounded) packed in one word.
  Type i32Type = b.getI32Type();
  auto bit = [&](Value flag, int64_t position) {
    return arith::ShLIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i32Type, flag),
                                 i32(position));
  };
  Value packed = arith::OrIOp::create(
      b, loc, own->count,
      arith::OrIOp::create(b, loc, bit(own->outside, 16), bit(own->bounded, 17)));
  auto [lowestBound, highestBound] = unknownRange(load.getType().isF32());
  // A bound the compilers do not see (opaque): unrolled, the steps would
  // keep every lane's loads in flight (150 registers).
  auto steps = scf::ForOp::create(b, loc, i32(0), opaqueValue(i32(32)), i32(kLaneBoxesPerStep),
                                  ValueRange{lowestBound, highestBound});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(steps.getBody());
  Value firstLane = steps.getInductionVar();
  SmallVector<PreparedBox> boxes;
  for (int64_t k = 0; k < kLaneBoxesPerStep; ++k) {
    Value source = add(firstLane, i32(k));
    Value word = shuffleFromLane(packed, source);
    auto flag = [&](int64_t position) {
      return cmpI(arith::CmpIPredicate::ne,
                  arith::AndIOp::create(b, loc, word, i32(int64_t{1} << position)), i32(0));
    };
    boxes.push_back({shuffleFromLane(own->address, source),
                     shuffleFromLane(own->strideBytes, source),
                     arith::AndIOp::create(b, loc, word, i32(0xffff)), flag(16), flag(17)});
  }
  FailureOr<SmallVector<std::pair<Value, Value>>> ranges = warpAuxRanges(load, boxes);
  if (failed(ranges))
    return failure();
  Value least = steps.getRegionIterArgs()[0], most = steps.getRegionIterArgs()[1];
  for (int64_t k = 0; k < kLaneBoxesPerStep; ++k) {
    Value mine = cmpI(arith::CmpIPredicate::eq, lane, add(firstLane, i32(k)));
    least = select(mine, (*ranges)[k].first, least);
    most = select(mine, (*ranges)[k].second, most);
  }
  scf::YieldOp::create(b, loc, ValueRange{least, most});
  return std::make_pair(steps.getResult(0), steps.getResult(1));
}

FailureOr<std::pair<Value, Value>> BlockSummaryEmitter::intervalFacts(Value keyTile,
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
        FailureOr<PreparedBox> box = prepareBox(load, lo, hi);
        FailureOr<SmallVector<std::pair<Value, Value>>> reduced =
            failed(box) ? FailureOr<SmallVector<std::pair<Value, Value>>>(failure())
                        : warpAuxRanges(load, {*box});
        range = failed(reduced) ? FailureOr<std::pair<Value, Value>>(failure())
                                : FailureOr<std::pair<Value, Value>>(reduced->front());
        if (succeeded(range))
          hoistedRanges[index] = *range;
      }
    } else if (ranges == AuxRanges::Read) {
      range = index < hoistedRanges.size() && hoistedRanges[index] ? *hoistedRanges[index]
                                                                    : laneAuxRange(load, lo, hi);
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
  return success(succeeded(intervalFacts(i32(0), AuxRanges::Hoist)));
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
  auto warpVote = [&](Value predicate, NVVM::VoteSyncKind kind) {
    return NVVM::VoteSyncOp::create(b, loc, b.getI1Type(), i32(-1), predicate, kind).getResult();
  };
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
  auto probe = scf::ForOp::create(b, loc, lane, i32(borderLength), i32(32),
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
      b, loc, warpVote(probe.getResult(0), NVVM::VoteSyncKind::any),
      arith::XOrIOp::create(b, loc, warpVote(probe.getResult(1), NVVM::VoteSyncKind::all),
                            trueValue));
  auto ifWalk = scf::IfOp::create(b, loc, b.getI32Type(), borderMixed, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifWalk.thenBlock());
  scf::YieldOp::create(b, loc, ValueRange{i32(flash::kBlockPartial)});
  b.setInsertionPointToStart(ifWalk.elseBlock());

  // Lane l takes columns l, l + 32, ... and walks each down the tile's
  // rows inside the problem: the key side of the mask (doc[b, j], an
  // invariant load) leaves the row loop and the query side (doc[b, i]) is
  // the same address across the warp. A column at j >= M walks no rows.
  auto columnLoop = scf::ForOp::create(b, loc, lane, i32(config.bc), i32(32),
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
  Value any = warpVote(columnLoop.getResult(0), NVVM::VoteSyncKind::any);
  Value all = warpVote(columnLoop.getResult(1), NVVM::VoteSyncKind::all);
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
  // 128 registers: a warp keeps kLaneBoxesPerStep boxes' loads in flight
  // (at 96 the document summary spills 4 bytes), and the grid (a CTA per
  // query tile and 128 key blocks) is far below the 4 CTAs per SM this
  // leaves room for at N <= 16k.
  func->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(), b.getI32IntegerAttr(128));
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

  // The CTAs of a query tile take its rounds of key blocks in turn (the
  // runtime launches at most one wave: each CTA is short, so dispatch,
  // not work, bounded the kernel when it had more).
  if (failed(hoistKeyInvariantRanges()))
    return error(mask, "the block summary could not lower the mask's interval analysis");
  Value roundShared = gepBytes(sharedMemoryBase(16),
                               i32(writesTileOrder() ? llvm::alignTo(kOrderSharedBytes, 16) : 0));
  listCount = roundShared;
  ctaCostTotal = gepBytes(roundShared, i32(4));
  listRing = gepBytes(roundShared, i32(16));
  onFirstThread([&] {
    LLVM::StoreOp::create(b, loc, i32(0), listCount);
    LLVM::StoreOp::create(b, loc, i32(0), ctaCostTotal);
  });
  NVVM::Barrier0Op::create(b, loc);
  Value keyBlocks = ceilDiv(keyLen, config.bc);
  auto rounds = scf::ForOp::create(b, loc, NVVM::BlockIdXOp::create(b, loc, i32Type),
                                   ceilDiv(keyBlocks, kKeyBlocksPerRound),
                                   NVVM::GridDimXOp::create(b, loc, i32Type),
                                   ValueRange{i32(0), i32(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rounds.getBody());
    auto [laneCost, listBase] =
        emitKeyRound(rounds.getInductionVar(), keyBlocks, rounds.getRegionIterArgs()[0],
                     rounds.getRegionIterArgs()[1]);
    if (!laneCost)
      return failure();
    scf::YieldOp::create(b, loc, ValueRange{laneCost, listBase});
  }
  if (writesTileOrder()) {
    // The CTA's cost: each warp's sum, added in shared memory.
    Value warpCost = NVVM::ReduxOp::create(
        b, loc, i32Type, rounds.getResult(0),
        NVVM::ReduxKindAttr::get(b.getContext(), NVVM::ReduxKind::ADD), i32(-1));
    {
      auto firstLane = scf::IfOp::create(b, loc, TypeRange(),
                                         cmpI(arith::CmpIPredicate::eq, lane, i32(0)),
                                         /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(firstLane.thenBlock());
      LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, ctaCostTotal, warpCost,
                                LLVM::AtomicOrdering::monotonic);
    }
    NVVM::Barrier0Op::create(b, loc);
    Value ctaCost = LLVM::LoadOp::create(b, loc, i32Type, ctaCostTotal, 4);
    if (failed(emitTileOrder(counters, ctaCost)))
      return failure();
  }
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

Value BlockSummaryEmitter::blockCost(Value blockClass) {
  using P = arith::CmpIPredicate;
  Type i32Type = b.getI32Type();
  return add(
      arith::ExtUIOp::create(b, loc, i32Type, cmpI(P::ne, blockClass, i32(flash::kBlockEmpty))),
      arith::ExtUIOp::create(b, loc, i32Type, cmpI(P::eq, blockClass, i32(flash::kBlockPartial))));
}

std::pair<Value, Value> BlockSummaryEmitter::emitKeyRound(Value round, Value keyBlocks,
                                                          Value laneCost, Value listBase) {
  using P = arith::CmpIPredicate;
  Type i1Type = b.getI1Type(), i32Type = b.getI32Type();
  Value falseValue = arith::ConstantIntOp::create(b, loc, 0, 1);
  Value trueValue = arith::ConstantIntOp::create(b, loc, 1, 1);
  Value keyTile = add(mul(round, i32(kKeyBlocksPerRound)), tid);
  Value inside = cmpI(P::ult, keyTile, keyBlocks);

  // The mask's index terms alone first (no loads): past a causal diagonal
  // they leave the block empty, and a warp with no block left skips the
  // aux ranges.
  FailureOr<std::pair<Value, Value>> indexFacts = intervalFacts(keyTile, AuxRanges::Unknown);
  if (failed(indexFacts))
    return {};
  Value mayBeVisible = arith::AndIOp::create(b, loc, inside, indexFacts->second);
  Value warpMayBeVisible =
      NVVM::VoteSyncOp::create(b, loc, i1Type, i32(-1), mayBeVisible, NVVM::VoteSyncKind::any)
          .getResult();
  auto ifRanges = scf::IfOp::create(b, loc, TypeRange{i1Type, i1Type}, warpMayBeVisible,
                                    /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifRanges.thenBlock());
    FailureOr<std::pair<Value, Value>> facts = intervalFacts(keyTile);
    if (failed(facts))
      return {};
    scf::YieldOp::create(b, loc, ValueRange{facts->first, facts->second});
    b.setInsertionPointToStart(ifRanges.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{falseValue, falseValue});
  }
  Value allVisible = arith::AndIOp::create(b, loc, mayBeVisible, ifRanges.getResult(0));
  Value anyVisible = arith::AndIOp::create(b, loc, mayBeVisible, ifRanges.getResult(1));
  Value decided = arith::OrIOp::create(b, loc, allVisible,
                                       arith::XOrIOp::create(b, loc, anyVisible, trueValue));
  Value decidedClass = select(allVisible, i32(flash::kBlockFull), i32(flash::kBlockEmpty));
  Value decidedInside = arith::AndIOp::create(b, loc, inside, decided);
  storeClass(keyTile, decidedClass, decidedInside);
  laneCost = add(laneCost, select(decidedInside, blockCost(decidedClass), i32(0)));

  // The blocks the intervals left undecided go on the list (a ring of two
  // rounds); one barrier publishes it and counts them.
  Value undecided = arith::AndIOp::create(b, loc, inside,
                                          arith::XOrIOp::create(b, loc, decided, trueValue));
  {
    auto ifList = scf::IfOp::create(b, loc, TypeRange(), undecided, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifList.thenBlock());
    Value slot = LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, listCount, i32(1),
                                           LLVM::AtomicOrdering::monotonic);
    Value entry = arith::AndIOp::create(b, loc, slot, i32(kListRing - 1));
    LLVM::StoreOp::create(b, loc, keyTile, gepElements(listRing, toI64(entry), i32Type));
  }
  Value listed = ctaCount(undecided);

  // Warp w evaluates listed blocks w, w + 4, ...: their elements, border
  // first. Its lane 0 stores the class and counts the cost.
  auto evaluations = scf::ForOp::create(b, loc, warp, listed, i32(kSummaryWarps),
                                        ValueRange{laneCost});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(evaluations.getBody());
    static_assert((kListRing & (kListRing - 1)) == 0, "a power-of-two ring");
    Value entry = arith::AndIOp::create(b, loc, add(listBase, evaluations.getInductionVar()),
                                        i32(kListRing - 1));
    Value listedTile =
        LLVM::LoadOp::create(b, loc, i32Type, gepElements(listRing, toI64(entry), i32Type), 4);
    Value blockClass = classifyElements(batch, head, queryTile, listedTile);
    if (!blockClass)
      return {};
    Value firstLane = cmpI(P::eq, lane, i32(0));
    storeClass(listedTile, blockClass, firstLane);
    scf::YieldOp::create(b, loc,
                         ValueRange{add(evaluations.getRegionIterArgs()[0],
                                        select(firstLane, blockCost(blockClass), i32(0)))});
  }
  return {evaluations.getResult(0), add(listBase, listed)};
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

  // Thread 0 adds (1 CTA, its cost) to its entry in one relaxed atomic
  // where the entry has several CTAs: no fence, and the atomic alone says
  // who is the entry's last (a
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
    // One CTA per entry (the usual grid: a CTA takes 128 key blocks per
    // round) is its entry's last without the atomic's round trip.
    auto ifShared = scf::IfOp::create(b, loc, i64Type, cmpI(P::ugt, ctasPerEntry, i32(1)),
                                      /*withElseRegion=*/true);
    b.setInsertionPointToStart(ifShared.thenBlock());
    scf::YieldOp::create(b, loc,
                         emitAsmValue(i64Type, "atom.relaxed.gpu.global.add.u64 $0, [$1], $2;",
                                      "=l,l,l", ValueRange{packedAt(entry), increment}));
    b.setInsertionPointToStart(ifShared.elseBlock());
    scf::YieldOp::create(b, loc, i64(0));
    b.setInsertionPointAfter(ifShared);
    Value before = ifShared.getResult(0);
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
  auto atomicAdd = [&](Value index, Value value) {
    return LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, sharedWord(index), value,
                                     LLVM::AtomicOrdering::monotonic)
        .getResult();
  };
  // Each thread's first kHeldEntries entries keep their bins in registers
  // from the histogram to the scatter (their costs loaded together: one
  // round trip on the launch's tail, not two); entries past 128 x
  // kHeldEntries load theirs again.
  constexpr int64_t kHeldEntries = 4;
  SmallVector<Value> heldIndex, heldInside, heldBin;
  for (int64_t k = 0; k < kHeldEntries; ++k) {
    Value index = add(tid, i32(kSummaryThreads * k));
    Value inside = cmpI(P::ult, index, entries);
    heldIndex.push_back(index);
    heldInside.push_back(inside);
    heldBin.push_back(binOf(costOf(select(inside, index, i32(0)))));
  }
  // `body(index, bin)` for every entry of this thread.
  auto forEachEntry = [&](function_ref<void(Value, Value)> body) {
    for (int64_t k = 0; k < kHeldEntries; ++k) {
      auto ifInside = scf::IfOp::create(b, loc, TypeRange(), heldInside[k],
                                        /*withElseRegion=*/false);
      OpBuilder::InsertionGuard heldGuard(b);
      b.setInsertionPointToStart(ifInside.thenBlock());
      body(heldIndex[k], heldBin[k]);
    }
    auto loop = scf::ForOp::create(b, loc, add(tid, i32(kSummaryThreads * kHeldEntries)),
                                   entries, i32(kSummaryThreads));
    OpBuilder::InsertionGuard loopGuard(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    body(loop.getInductionVar(), binOf(costOf(loop.getInductionVar())));
  };
  storeShared(tid, i32(0));
  NVVM::Barrier0Op::create(b, loc);
  forEachEntry([&](Value, Value bin) { atomicAdd(bin, i32(1)); });
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
  forEachEntry([&](Value index, Value bin) {
    Value slot = atomicAdd(bin, i32(1));
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
                             (isa<flash::KernelOp>(kernel.getOperation())
                                  ? llvm::alignTo(kOrderSharedBytes, 16)
                                  : 0) +
                                 kRoundSharedBytes);
}
