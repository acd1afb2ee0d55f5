//===- DeferredAccumulate.cpp - P·V of block j under block j+1's softmax --===//
//
// FA3's intra-warpgroup overlap. Without it a warpgroup runs, per key block,
// Q·Kᵀ, waits, softmax, P·V, waits: the tensor cores idle during its
// softmax unless another CTA fills them. With hopper.deferPV the loop
// carries P(j) (packed, 16-bit pairs) into iteration j + 1, which does
//
//   issue S = Q·K(j+1)ᵀ; commit      issue A += P(j)·V(j); commit
//   wait_group 1   (S is done; P·V(j) still runs)
//   mask, softmax of S -> m, l, α, P(j+1)      (overlaps P·V(j))
//   wait_group 0   (A is done)
//   A *= α; P(j+1) becomes pending
//
// and the block after the loop issues the last P·V. This is exact: A stays
// Σ_{i<=j} exp(S_i - m_j)·V_i after each iteration, as in the plain order.
// The first iteration has nothing pending and only waits for S.
//
// Copies: K(j+1) replaces K(j) once every warp's Q·K(j)ᵀ is done (after the
// wait for S). P·V(j) now reads V(j) while V(j+1) lands, so V has two
// buffers: V(j+1) goes to buffer (j+1) mod 2 once P·V(j-1), which read that
// buffer, is done (after the wait for A). Block ordinals count from the
// tile's first block (keyLoopBegin), also where a warpgroup's own range
// starts later (WarpgroupKeyRange.cpp); buffer o mod 2 completes its phases
// o / 2 mod 2.
//
// A deferring loop has no skip branch inside its range (the range itself is
// still narrowed to the first..last visible block): a block the mask removes
// entirely gives P = 0 and α = 1, so computing it changes nothing. Under a
// mask whose keys come in pieces the loop walks the visible blocks only
// (positions instead of blocks: KernelEmitter::walk), and the copies of
// "the next block" are of the next visible one.
//
//===----------------------------------------------------------------------===//

#include "InlineAsm.h"
#include "SM90Emitter.h"
#include "Wgmma.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;
using lowering::TileValue;

flash::RescaleAccumulateOp sm90::deferrableAccumulate(scf::ForOp loop) {
  if (!matchPattern(loop.getStep(), m_One()))
    return {};
  Block *body = loop.getBody();
  if (llvm::range_size(body->getOps<flash::QKDotOp>()) != 1)
    return {};
  // A mask that is not classified skips blocks by a CTA-wide vote inside
  // the range: such loops stay plain. One whose keys may come in pieces (a
  // sink beside a window) leaves empty blocks inside the range, which the
  // loop skips by walking the visible blocks only (KernelEmitter::walk).
  for (flash::MaskOp mask : body->getOps<flash::MaskOp>())
    if (!mask.isClassified())
      return {};
  // The accumulator must be a loop-carried value the loop yields as
  // diag(α)·A + P·V of its one fused accumulate, with V a block of this loop.
  auto yield = cast<scf::YieldOp>(body->getTerminator());
  flash::RescaleAccumulateOp fused;
  for (auto op : body->getOps<flash::RescaleAccumulateOp>()) {
    if (fused)
      return {};
    fused = op;
  }
  if (!fused || !fused->hasOneUse() || *fused->user_begin() != yield.getOperation())
    return {};
  auto acc = dyn_cast<BlockArgument>(fused.getAcc());
  if (!acc || acc.getOwner() != body || acc.getArgNumber() == 0 || !acc.hasOneUse())
    return {};
  auto value = fused.getValue().getDefiningOp<flash::LoadKVOp>();
  if (!value || value->getBlock() != body || value.getOperand() != flash::KVOperand::Value ||
      value.getKeyTile() != loop.getInductionVar())
    return {};
  return fused;
}

bool SM90Emitter::defersAccumulate(scf::ForOp loop, flash::MaskOp skipMask) {
  deferredOp = {};
  if (!hopper.deferPV || !hopper.kvTensorMaps)
    return false;
  deferredOp = deferrableAccumulate(loop);
  if (!deferredOp)
    return false;
  deferredValueLoad = deferredOp.getValue().getDefiningOp<flash::LoadKVOp>();
  pendingProbs.assign(config.bc / 4, i32(0));
  return true;
}

void SM90Emitter::startDeferredCopies() {
  issueKVCopy(deferredValueLoad, keyLoopBegin, keyLoopFirstBlock);
}

SmallVector<Value> SM90Emitter::deferredState() { return pendingProbs; }

void SM90Emitter::setDeferredState(ValueRange values) {
  pendingProbs.assign(values.begin(), values.end());
}

LogicalResult SM90Emitter::acquireKV(Operation *user, const TileValue &tile) {
  if (!deferredOp)
    return KernelEmitter::acquireKV(user, tile);
  if (failed(checkKVUse(user, tile)))
    return failure();
  // V blocks are waited for where their P·V is issued, a block later.
  if (tile.operand == flash::KVOperand::Key && !pipeline->keyAcquired) {
    Slot key = kvSlot(flash::KVOperand::Key, blockOrdinal(pipeline->inductionVar));
    waitForPhase(key.full, key.parity);
    fenceGatheredBlock();
    pipeline->keyAcquired = true;
  }
  return success();
}

SmallVector<Value> SM90Emitter::issuePendingPV(ArrayRef<Value> scores) {
  TileValue &acc = tiles[deferredOp.getAcc()];
  Value iteration = pipeline->inductionVar;
  // Results: the scores, the accumulators (in flight after P·V) and the A
  // operands P·V reads, which the wait for it must tie.
  SmallVector<Type> types;
  for (Value value : llvm::concat<const Value>(scores, acc.regs, pendingProbs))
    types.push_back(value.getType());
  // Uniform per warpgroup (whose first block may differ from the other's),
  // as wgmma's .sync.aligned needs.
  auto branch = scf::IfOp::create(b, loc, types,
                                  cmpI(arith::CmpIPredicate::ne, iteration, warpgroupBegin),
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Slot value = kvSlot(flash::KVOperand::Value,
                        arith::SubIOp::create(b, loc, blockOrdinal(iteration), i32(1)));
    waitForPhase(value.full, value.parity);
    fenceGatheredBlock();
    SmallVector<Value> probs(pendingProbs);
    SmallVector<Value> accumulating = issuePV(acc.regs, probs, value.address);
    passGemmTurn(iteration);
    SmallVector<Value> results = wgmma::wait(*this, 1, scores);
    results.append(accumulating);
    results.append(probs);
    scf::YieldOp::create(b, loc, results);

    b.setInsertionPointToStart(branch.elseBlock());
    passGemmTurn(iteration);
    results = wgmma::wait(*this, 0, scores);
    results.append(acc.regs.begin(), acc.regs.end());
    results.append(pendingProbs.begin(), pendingProbs.end());
    scf::YieldOp::create(b, loc, results);
  }
  ValueRange results = branch.getResults();
  ValueRange accumulators = results.drop_front(scores.size()).take_front(acc.regs.size());
  acc.regs.assign(accumulators.begin(), accumulators.end());
  ValueRange probs = results.take_back(pendingProbs.size());
  pendingProbs.assign(probs.begin(), probs.end());
  if (hopper.warpSpecialized) {
    // This warpgroup's Q·K(j)ᵀ is done: the producer may refill the slot
    // once every consumer says so.
    arriveOn(kvSlot(flash::KVOperand::Key, blockOrdinal(iteration)).empty);
  } else {
    // Every warp is done with K(j): K(j+1) may replace it.
    NVVM::Barrier0Op::create(b, loc);
    Value next = add(iteration, i32(1));
    issueKVCopy(pipeline->keyLoad, next, pipeline->nextBlock(next));
  }
  return SmallVector<Value>(results.take_front(scores.size()));
}

LogicalResult SM90Emitter::lowerDeferredAccumulate(Operation *op, Value acc, Value alpha,
                                                   Value probs, Value value) {
  auto accIt = tiles.find(acc);
  if (accIt == tiles.end())
    return error(op, "expects a Br x D accumulator, Br x Bc probabilities and a V block");
  // P·V(j-1) done: its accumulators and A operands are free again.
  SmallVector<Value> tied(accIt->second.regs);
  tied.append(pendingProbs);
  tied = wgmma::wait(*this, 0, tied);
  accIt->second.regs.assign(tied.begin(), tied.begin() + accIt->second.regs.size());
  Value iteration = pipeline->inductionVar;
  if (hopper.warpSpecialized) {
    // P·V(j-1) of this warpgroup is done: release V(j-1)'s slot.
    auto afterFirst = scf::IfOp::create(
        b, loc, cmpI(arith::CmpIPredicate::ne, iteration, warpgroupBegin), /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(afterFirst.thenBlock()->getTerminator());
    arriveOn(kvSlot(flash::KVOperand::Value,
                       arith::SubIOp::create(b, loc, blockOrdinal(iteration), i32(1)))
                    .empty);
  } else {
    // Every warp is done with V(j-1)'s buffer: V(j+1) may replace it.
    NVVM::Barrier0Op::create(b, loc);
    Value next = add(iteration, i32(1));
    issueKVCopy(deferredValueLoad, next, pipeline->nextBlock(next));
  }
  FailureOr<SmallVector<Value>> scaled = checkAccumulate(op, acc, alpha, probs, value);
  if (failed(scaled))
    return failure();
  pendingProbs = packProbabilities(probs);
  defineAccumTile(op->getResult(0), *scaled, config.headDim);
  return success();
}

LogicalResult SM90Emitter::finishDeferredAccumulate(scf::ForOp loop, ValueRange results) {
  // Persistent: every Q·Kᵀ of this tile is done, the producer may load the
  // next tile's Q.
  if (hopper.persistent)
    arriveOn(queryEmpty);
  pendingProbs.assign(results.begin(), results.end());
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  Value accResult;
  for (auto [yielded, result] : llvm::zip(yield.getOperands(), loop.getResults()))
    if (yielded == deferredOp.getResult())
      accResult = result;
  deferredOp = {};
  TileValue &acc = tiles[accResult];
  // Tile blocks after this warpgroup's last (WarpgroupKeyRange.cpp): the
  // first turn now, so the other warpgroup's GEMMs do not wait for this
  // P·V; the rest after it, whose V slot release the next block's wait
  // needs.
  if (narrowedPerWarpgroup) {
    auto first = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, warpgroupEnd, keyLoopEnd),
                                   /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    takeEmptyTurn(warpgroupEnd);
  }
  SmallVector<Type> types(acc.regs.size(), b.getF32Type());
  // The last block's P·V, unless this warpgroup's range was empty.
  auto branch = scf::IfOp::create(b, loc, types,
                                  cmpI(arith::CmpIPredicate::slt, warpgroupBegin, warpgroupEnd),
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Value last = arith::SubIOp::create(b, loc, warpgroupEnd, i32(1));
    Slot value = kvSlot(flash::KVOperand::Value, blockOrdinal(last));
    waitForPhase(value.full, value.parity);
    fenceGatheredBlock();
    SmallVector<Value> probs(pendingProbs);
    SmallVector<Value> tied = issuePV(acc.regs, probs, value.address);
    tied.append(probs);
    tied = wgmma::wait(*this, 0, tied);
    tied.resize(acc.regs.size());
    // The last V slot goes back too: a persistent producer refills it for
    // the next tile.
    if (hopper.warpSpecialized)
      arriveOn(value.empty);
    scf::YieldOp::create(b, loc, tied);
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, acc.regs);
  }
  acc.regs.assign(branch.getResults().begin(), branch.getResults().end());
  if (narrowedPerWarpgroup) {
    auto rest = scf::ForOp::create(b, loc, warpgroupEnd, keyLoopEnd, i32(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(rest.getBody()->getTerminator());
    Value block = rest.getInductionVar();
    auto later = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ne, block, warpgroupEnd),
                                   /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard turnGuard(b);
      b.setInsertionPoint(later.thenBlock()->getTerminator());
      takeEmptyTurn(block);
    }
    releaseUnusedBlock(block);
  }
  return success();
}
