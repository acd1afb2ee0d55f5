//===- KeyLoop.cpp - The scf.for over key blocks and block skipping --------===//
//
// The loop over key blocks carries (m, l, A) as flattened registers; its K/V
// blocks stream through the backend's copy pipeline (KVPipeline). When the
// loop is the FlashAttention recurrence and its scores pass a flash.mask,
// blocks the mask empties are skipped: a mask `classified(%all, %any)`
// (flash-classify-tiles) has the slice of scalar ops computing %any lowered
// ahead of the body, and a scan of %any over every block first narrows the
// loop to its first..last visible block; an unclassified one is evaluated
// alone by the CTA, which votes with `bar.red.or`.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Dialect/Flash/Transforms/MaskIntervals.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

/// The mask that lets a whole key block be skipped when no element of the
/// block survives it. The loop must be the FlashAttention recurrence: it
/// yields exactly (new max, new sum, accumulator) of its one online_softmax,
/// the accumulator being diag(α)·A + P·V of that softmax, and the mask's
/// result reaches the softmax through masks only. For a block whose scores
/// are all -inf the recurrence leaves (m, l, A) unchanged (m' = m; α = 1, or
/// α = 0 with l = 0 and A = 0 while m = -inf; P = 0), so skipping the block
/// is exact.
flash::MaskOp lowering::findSkippableMask(scf::ForOp loop) {
  Block *body = loop.getBody();
  flash::OnlineSoftmaxOp softmax;
  for (flash::OnlineSoftmaxOp op : body->getOps<flash::OnlineSoftmaxOp>()) {
    if (softmax)
      return {};
    softmax = op;
  }
  if (!softmax)
    return {};
  flash::MaskOp mask;
  Value scores = softmax.getScores();
  while (!mask) {
    Operation *def = scores.getDefiningOp();
    if (auto found = dyn_cast_or_null<flash::MaskOp>(def))
      mask = found;
    else if (auto bounds = dyn_cast_or_null<flash::MaskKeyBoundsOp>(def))
      scores = bounds.getScores();
    else
      return {};
  }
  if (mask->getBlock() != body || mask.getKeyTile() != loop.getInductionVar())
    return {};
  for (Value value : {mask.getBatch(), mask.getHead(), mask.getQueryTile()})
    if (!loop.isDefinedOutsideOfLoop(value))
      return {};
  llvm::SetVector<Value> captured;
  getUsedValuesDefinedAbove(mask.getBody(), captured);
  for (Value value : captured)
    if (!loop.isDefinedOutsideOfLoop(value))
      return {};

  auto yield = cast<scf::YieldOp>(body->getTerminator());
  if (yield.getNumOperands() != 3)
    return {};
  auto iterArg = [&](Value value) -> int {
    auto arg = dyn_cast<BlockArgument>(value);
    if (!arg || arg.getOwner() != body || arg.getArgNumber() == 0)
      return -1;
    return static_cast<int>(arg.getArgNumber()) - 1;
  };
  int maxIndex = iterArg(softmax.getMax()), sumIndex = iterArg(softmax.getSum());
  if (maxIndex < 0 || sumIndex < 0 || maxIndex == sumIndex ||
      yield.getOperand(maxIndex) != softmax.getNewMax() ||
      yield.getOperand(sumIndex) != softmax.getNewSum())
    return {};
  int accIndex = 3 - maxIndex - sumIndex;
  Value acc = body->getArgument(accIndex + 1), result = yield.getOperand(accIndex);
  if (auto fused = result.getDefiningOp<flash::RescaleAccumulateOp>()) {
    if (fused.getAcc() == acc && fused.getAlpha() == softmax.getAlpha() &&
        fused.getProbs() == softmax.getProbs())
      return mask;
    return {};
  }
  if (auto pv = result.getDefiningOp<flash::PVAccumulateOp>()) {
    auto rescale = pv.getAcc().getDefiningOp<flash::RescaleOp>();
    if (rescale && rescale.getAcc() == acc && rescale.getAlpha() == softmax.getAlpha() &&
        pv.getProbs() == softmax.getProbs())
      return mask;
  }
  return {};
}

LogicalResult KernelEmitter::lowerFor(scf::ForOp loop) {
  Value lower = lookupScalar(loop.getLowerBound());
  Value upper = lookupScalar(loop.getUpperBound());
  Value step = lookupScalar(loop.getStep());
  if (!lower || !upper || !step)
    return error(loop, "loop bounds must be scalars defined before the loop");

  SmallVector<Value> inits;
  for (Value init : loop.getInitArgs()) {
    if (isa<RankedTensorType>(init.getType())) {
      auto it = tiles.find(init);
      if (it == tiles.end() || (it->second.kind != TileValue::Kind::Accum &&
                                it->second.kind != TileValue::Kind::Row))
        return error(loop, "only f32 tiles and row vectors may be loop-carried");
      flatten(it->second, inits);
    } else {
      Value mapped = lookupScalar(init);
      if (!mapped)
        return error(loop, "unknown loop-carried scalar");
      inits.push_back(mapped);
    }
  }

  // A loop that streams K/V starts its first copy before the loop.
  KVPipeline state;
  bool pipelined = false;
  for (Operation &op : loop.getBody()->without_terminator()) {
    auto load = dyn_cast<flash::LoadKVOp>(op);
    if (!load)
      continue;
    if (load.getKeyTile() != loop.getInductionVar())
      return error(load, "K/V blocks must be loaded at the loop's induction variable");
    if (!lookupScalar(load.getBatch()) || !lookupScalar(load.getKvHead()))
      return error(load, "batch and kv head must be defined before the key loop");
    flash::LoadKVOp &slot =
        load.getOperand() == flash::KVOperand::Key ? state.keyLoad : state.valueLoad;
    if (slot)
      return error(load, "one key and one value load per loop are supported");
    slot = load;
    pipelined = true;
  }
  if (pipelined && !state.keyLoad)
    return error(loop, "a loop that loads V blocks must load K blocks too");
  // The copy pipeline advances when a block is used: a block loaded and never
  // read would stall it (with TMA, waiting on a barrier phase that never
  // comes).
  for (flash::LoadKVOp load : {state.keyLoad, state.valueLoad})
    if (load && load->use_empty())
      return error(load, "a K/V block that is loaded must be used");
  // Key blocks the mask removes entirely (above the causal diagonal, outside
  // a window) are skipped by the whole CTA: outside the first..last visible
  // block by narrowing the loop; inside by walking the visible blocks only
  // where the mask's keys may come in pieces, else by a branch (below).
  flash::MaskOp skipMask = pipelined ? findSkippableMask(loop) : flash::MaskOp();
  walk.reset();
  bool deferred = false;
  if (pipelined) {
    enterKeyRange(loop, skipMask, lower, upper, /*wholeWarp=*/true);
    deferred = state.valueLoad && defersAccumulate(loop, skipMask);
    lower = keyLoopBegin;
    upper = keyLoopEnd;
    issueKVCopy(state.keyLoad, lower, keyLoopFirstBlock);
    if (deferred)
      startDeferredCopies();
    // With Q in registers, K(lower)'s cp.async group may stay in flight.
    if (queryLoad && !queryAcquired && acquireQueryBeforeLoop())
      acquireQuery(/*pendingGroups=*/config.qInRegisters ? 1 : 0);
  }

  if (deferred && failed(enterKeyLoop(loop, state)))
    return failure();
  if (deferred)
    std::tie(lower, upper) = threadKeyRange(skipMask, loop, lower, upper);
  size_t flashInits = inits.size();
  if (deferred)
    inits.append(deferredState());
  size_t deferredInits = inits.size() - flashInits;
  // A walk carries the key block of each position.
  if (walk)
    inits.push_back(keyLoopFirstBlock);
  auto newLoop = scf::ForOp::create(b, loc, lower, upper, step, inits);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(newLoop.getBody());
  Value block = walk ? newLoop.getRegionIterArgs().back() : newLoop.getInductionVar();
  Value nextBlock = walk ? nextVisibleBlock(add(block, i32(1)), /*wholeWarp=*/true) : Value();
  scalars.map(loop.getInductionVar(), block);
  if (failed(mapFlattened(loop, loop.getRegionIterArgs(), newLoop.getRegionIterArgs())))
    return failure();
  if (deferred)
    setDeferredState(newLoop.getRegionIterArgs().slice(flashInits, deferredInits));

  KVPipeline *outer = pipeline;
  if (pipelined) {
    state.inductionVar = newLoop.getInductionVar();
    state.block = block;
    state.nextVisibleBlock = nextBlock;
    state.lowerBound = lower;
    state.upperBound = upper;
    state.step = step;
    pipeline = &state;
  }
  // Inside the range, a skipped iteration only keeps the K copies flowing.
  // A classified mask says so in its any_visible scalar (uniform over the
  // CTA, computed ahead of the body); otherwise the CTA evaluates the mask
  // and votes with one bar.red.or. A walk visits visible blocks only.
  scf::IfOp skip;
  if (flash::MaskOp mask = deferred || walk ? flash::MaskOp() : skipMask) {
    loc = mask.getLoc();
    Value visible = mask.isClassified() ? hoistAnyVisible(mask, loop) : Value();
    if (!visible) {
      FailureOr<Value> vote = emitMaskVote(mask);
      if (failed(vote))
        return failure();
      visible = *vote;
    }
    ValueRange state = newLoop.getRegionIterArgs();
    skip = scf::IfOp::create(b, loc, state.getTypes(), visible, /*withElseRegion=*/true);
    b.setInsertionPointToStart(skip.elseBlock());
    skipKVBlock(add(newLoop.getInductionVar(), step), upper);
    scf::YieldOp::create(b, loc, state);
    b.setInsertionPointToStart(skip.thenBlock());
  }
  LogicalResult bodyResult = lowerBlock(*loop.getBody());
  pipeline = outer;
  if (failed(bodyResult))
    return failure();

  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  SmallVector<Value> yielded;
  for (Value operand : yield.getOperands()) {
    if (isa<RankedTensorType>(operand.getType())) {
      auto it = tiles.find(operand);
      if (it == tiles.end())
        return error(yield, "unknown yielded tile");
      flatten(it->second, yielded);
    } else {
      Value mapped = lookupScalar(operand);
      if (!mapped)
        return error(yield, "unknown yielded scalar");
      yielded.push_back(mapped);
    }
  }
  if (deferred)
    yielded.append(deferredState());
  if (walk)
    yielded.push_back(nextBlock);
  loc = loop.getLoc();
  scf::YieldOp::create(b, loc, yielded);
  if (skip) {
    b.setInsertionPointAfter(skip);
    scf::YieldOp::create(b, loc, skip.getResults());
  }

  b.setInsertionPointAfter(newLoop);
  if (failed(mapFlattened(loop, loop.getResults(), newLoop.getResults())))
    return failure();
  if (!deferred)
    return success();
  return finishDeferredAccumulate(loop, newLoop.getResults().slice(flashInits, deferredInits));
}

void KernelEmitter::enterKeyRange(scf::ForOp loop, flash::MaskOp skipMask, Value lower,
                                  Value upper, bool wholeWarp) {
  walk.reset();
  Value count;
  if (skipMask && skipMask.isClassified()) {
    Location outer = loc;
    loc = skipMask.getLoc();
    bool walks = flash::keysMayComeInPieces(skipMask);
    narrowToVisibleBlocks(skipMask, loop, lower, upper, walks ? &count : nullptr, wholeWarp);
    loc = outer;
  }
  keyLoopFirstBlock = lower;
  if (!count) {
    keyLoopBegin = lower;
    keyLoopEnd = upper;
    return;
  }
  walk = VisibleBlockWalk{skipMask, loop, upper};
  keyLoopBegin = i32(0);
  keyLoopEnd = count;
}

Value KernelEmitter::nextVisibleBlock(Value from, bool wholeWarp) {
  FailureOr<SmallVector<Operation *>> slice = factSlice({walk->mask.getAnyVisible()}, walk->loop);
  // The narrowing scan lowered this slice already, so it lowers here too.
  Value next = nextIndexWhere(
      walk->loop.getInductionVar(), *slice,
      [&] { return lookupScalar(walk->mask.getAnyVisible()); }, from, walk->end, wholeWarp);
  assert(next && "the walk's narrowing scan lowered this slice");
  scalars.map(walk->loop.getInductionVar(), from);
  return next;
}

Value KernelEmitter::hoistAnyVisible(flash::MaskOp mask, scf::ForOp loop) {
  FailureOr<SmallVector<Operation *>> slice = factSlice({mask.getAnyVisible()}, loop);
  if (failed(slice) || failed(lowerSlice(*slice)))
    return {};
  loweredAhead.insert(slice->begin(), slice->end());
  return lookupScalar(mask.getAnyVisible());
}

void KernelEmitter::narrowToVisibleBlocks(flash::MaskOp mask, scf::ForOp loop, Value &lower,
                                        Value &upper, Value *count, bool wholeWarp) {
  // A summary read is a global load per block: a whole warp tests 32
  // blocks per step (one ballot), one thread 8 (independent loads).
  flash::BlockClassOp summaryRead = blockSummaryRead(mask, loop);
  bool readsSummary = static_cast<bool>(summaryRead);
  if (readsSummary && !wholeWarp && narrowBySummary(summaryRead, loop, lower, upper, count))
    return;
  Value fact = mask.getAnyVisible();
  // The lane-strided scan costs registers (narrowToBlocksWhere), so only
  // tests that are expensive per block take it: walks, whose empty
  // stretches are long, and summary reads.
  bool laneStrided = wholeWarp && (count || readsSummary);
  narrowToBlocksWhere(loop, {fact}, [&] { return lookupScalar(fact); }, lower, upper, count,
                      laneStrided);
}

flash::BlockClassOp KernelEmitter::blockSummaryRead(flash::MaskOp mask, scf::ForOp loop) {
  FailureOr<SmallVector<Operation *>> slice = factSlice({mask.getAnyVisible()}, loop);
  flash::BlockClassOp blockClass;
  if (succeeded(slice))
    for (Operation *op : *slice)
      if (auto read = dyn_cast<flash::BlockClassOp>(op))
        blockClass = read;
  return blockClass;
}

bool KernelEmitter::narrowBySummary(flash::BlockClassOp blockClass, scf::ForOp loop,
                                    Value &lower, Value &upper, Value *count) {
  auto kernel = dyn_cast<flash::KernelOp>(kernelOp);
  if (!blockSummaryPtr || !kernel || !kernel.getBlockSummaryAttr())
    return false;
  // any_visible is (intervals) && class != empty, and the intervals are sound,
  // so the class alone says which blocks have a visible element.
  if (blockClass.getKeyTile() != loop.getInductionVar())
    return false;
  Value batch = lookupScalar(blockClass.getBatch()), head = lookupScalar(blockClass.getHead()),
        queryTile = lookupScalar(blockClass.getQueryTile());
  if (!batch || !head || !queryTile)
    return false;
  // Bytes [start, stop) of the summary are blocks [lower, upper) of this row;
  // 8 independent byte loads per step (clamped into the range, so nothing
  // past it is read) instead of one dependent load per block.
  constexpr int64_t kBytesPerStep = 8;
  using P = arith::CmpIPredicate;
  Value rowStart =
      blockSummaryOffset(kernel.getBlockSummaryAttr(), batch, head, queryTile, i32(0));
  Value start = add(rowStart, toI64(lower)), stop = add(rowStart, toI64(upper));
  Value lastByte = arith::SubIOp::create(b, loc, stop, i64(1));
  Value none = arith::SubIOp::create(b, loc, start, i64(1));
  auto scan = scf::ForOp::create(b, loc, start, stop, i64(kBytesPerStep),
                                 ValueRange{stop, none, i32(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(scan.getBody());
    Value first = scan.getRegionIterArgs()[0], last = scan.getRegionIterArgs()[1];
    Value visible = scan.getRegionIterArgs()[2];
    SmallVector<Value> bytes;
    for (int64_t k = 0; k < kBytesPerStep; ++k) {
      Value position = arith::MinSIOp::create(b, loc, add(scan.getInductionVar(), i64(k)), lastByte);
      bytes.push_back(LLVM::LoadOp::create(b, loc, b.getI8Type(), gepBytes(blockSummaryPtr, position),
                                           1, /*isVolatile=*/false, /*isNonTemporal=*/false,
                                           /*isInvariant=*/true));
    }
    for (int64_t k = 0; k < kBytesPerStep; ++k) {
      Value position = add(scan.getInductionVar(), i64(k));
      Value nonEmpty = arith::AndIOp::create(
          b, loc, cmpI(P::slt, position, stop),
          cmpI(P::ne, bytes[k], arith::ConstantIntOp::create(b, loc, flash::kBlockEmpty, 8)));
      first = select(nonEmpty, arith::MinSIOp::create(b, loc, first, position), first);
      last = select(nonEmpty, position, last);
      visible = add(visible, arith::ExtUIOp::create(b, loc, b.getI32Type(), nonEmpty));
    }
    scf::YieldOp::create(b, loc, ValueRange{first, last, visible});
  }
  if (count)
    *count = scan.getResult(2);
  // No non-empty block: first = stop and last = start - 1, an empty range.
  auto toBlock = [&](Value byte) {
    return arith::TruncIOp::create(b, loc, b.getI32Type(),
                                   arith::SubIOp::create(b, loc, byte, rowStart));
  };
  lower = toBlock(scan.getResult(0));
  upper = add(toBlock(scan.getResult(1)), i32(1));
  return true;
}

bool KernelEmitter::narrowToBlocksWhere(scf::ForOp loop, ArrayRef<Value> facts,
                                      function_ref<Value()> visible, Value &lower,
                                      Value &upper, Value *count, bool wholeWarp) {
  // The scan below walks blocks one by one.
  if (getConstantIntValue(loop.getStep()) != std::optional<int64_t>(1))
    return false;
  FailureOr<SmallVector<Operation *>> slice = factSlice(facts, loop);
  if (failed(slice))
    return false;
  // By default every thread tests every block: a handful of integer ops per
  // block. The lane-strided scan (wholeWarp) is 32x shorter, but ptxas then
  // cannot see that the key loop's bounds are uniform and gives the loop ~40
  // more registers (measured: causal D = 128, 127 -> 168); only walks, whose
  // empty stretches make the scan the larger cost, take it.
  Type i32Type = b.getI32Type();
  int64_t stride = wholeWarp ? 32 : 1;
  Value none = arith::SubIOp::create(b, loc, lower, i32(1));
  auto scan =
      scf::ForOp::create(b, loc, lower, upper, i32(stride), ValueRange{upper, none, i32(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(scan.getBody());
    Value base = scan.getInductionVar();
    Value first = scan.getRegionIterArgs()[0], last = scan.getRegionIterArgs()[1];
    Value visibleBlocks = scan.getRegionIterArgs()[2];
    if (wholeWarp) {
      Value lanes = visibleIndexBits(loop.getInductionVar(), *slice, visible, base, upper,
                                     /*wholeWarp=*/true);
      if (!lanes) {
        scan.erase();
        return false;
      }
      Value any = cmpI(arith::CmpIPredicate::ne, lanes, i32(0));
      Value lowest = add(base, LLVM::CountTrailingZerosOp::create(b, loc, i32Type, lanes, false));
      Value highest = arith::SubIOp::create(
          b, loc, add(base, i32(31)),
          LLVM::CountLeadingZerosOp::create(b, loc, i32Type, lanes, false));
      scf::YieldOp::create(
          b, loc,
          ValueRange{select(any, arith::MinSIOp::create(b, loc, first, lowest), first),
                     select(any, highest, last),
                     add(visibleBlocks, LLVM::CtPopOp::create(b, loc, i32Type, lanes))});
    } else {
      scalars.map(loop.getInductionVar(), base);
      Value blockVisible = succeeded(lowerSlice(*slice)) ? visible() : Value();
      if (!blockVisible) {
        scan.erase();
        return false;
      }
      scf::YieldOp::create(
          b, loc,
          ValueRange{select(blockVisible, arith::MinSIOp::create(b, loc, first, base), first),
                     select(blockVisible, base, last),
                     add(visibleBlocks, arith::ExtUIOp::create(b, loc, i32Type, blockVisible))});
    }
  }
  if (count)
    *count = scan.getResult(2);
  // Clamped to the original range, which stays empty when it was; with no
  // visible block first = upper and last = lower - 1 give an empty range.
  Value first = scan.getResult(0), end = add(scan.getResult(1), i32(1));
  lower = arith::MaxSIOp::create(b, loc, first, lower);
  upper = arith::MinSIOp::create(b, loc, end, upper);
  return true;
}

FailureOr<Value> KernelEmitter::emitMaskVote(flash::MaskOp op) {
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead()),
        queryTile = lookupScalar(op.getQueryTile()), keyTile = lookupScalar(op.getKeyTile());
  if (!batch || !head || !queryTile || !keyTile)
    return error(op, "unknown (b, h, qt, kt) operands");
  int64_t cols = cast<RankedTensorType>(op.getType()).getDimSize(1);
  Value firstKey = mul(keyTile, i32(cols));
  Value any;
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t nt = 0; nt < cols / 8; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        QueryRow row = queryRow(head, queryTile, mb, e);
        FailureOr<Value> keep = emitRegionElement(op, ValueRange(), batch, row.head,
                                                  row.position, add(firstKey, fragmentCol(nt, e)));
        if (failed(keep))
          return failure();
        any = any ? Value(arith::OrIOp::create(b, loc, any, *keep)) : *keep;
      }
  return ctaVote(any, NVVM::BarrierReduction::OR);
}

