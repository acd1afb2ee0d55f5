//===- WarpgroupKeyRange.cpp - Key blocks per consumer warpgroup ----------===//
//
// The CTA's key range covers every block some row of the tile sees; under a
// causal mask with Br = 128 and Bc = 64 the last block is empty for the
// first 64 rows, i.e. for consumer warpgroup 0. flash-classify-tiles proves
// visibility per band of 64 rows (row_groups), so each consumer warpgroup
// narrows the tile's range to the blocks its own rows see and skips the
// others' GEMMs, softmax and waits. The producer still fills every block
// of the tile's range, so a warpgroup passes over the blocks outside its
// own range in block order (passOverBlocks):
//
//   before its loop, per block: its ping-pong turn (wait, pass on), then
//       wait until K and V have landed, release both slots;
//   after its loop: the first turn, the last P·V, then the rest as above.
//
// Every consumer thus takes one turn per block of the tile, so the named
// barriers alternate as before, and arrives once per block on every empty
// barrier. It waits for a skipped block's copies before releasing it: its
// arrival must count for that block's phase, not for the previous block in
// the same slot, which the other warpgroup may still be reading.
//
//===----------------------------------------------------------------------===//

#include "SM90Emitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;

std::pair<Value, Value> SM90Emitter::threadKeyRange(flash::MaskOp skipMask, scf::ForOp loop,
                                                    Value lower, Value upper) {
  warpgroupBegin = lower;
  warpgroupEnd = upper;
  narrowedPerWarpgroup = false;
  // A walk's positions are not blocks: its warpgroups take every visible
  // block of the tile.
  if (!hopper.warpSpecialized || !skipMask || !skipMask.isClassified() || walk)
    return {lower, upper};
  // One band per consumer warpgroup (64 rows each).
  SmallVector<Value> bands(skipMask.getRowsVisible());
  int64_t consumers = hopper.consumerThreads() / 128;
  if (static_cast<int64_t>(bands.size()) != consumers)
    return {lower, upper};
  Value warpgroup = hopper.pingPong ? consumerWarpgroup
                                    : Value(arith::DivUIOp::create(b, loc, tid, i32(128)));
  auto ownBand = [&]() -> Value {
    Value visible = lookupScalar(bands.back());
    for (int64_t w = consumers - 2; w >= 0 && visible; --w) {
      Value band = lookupScalar(bands[w]);
      visible = band ? select(cmpI(arith::CmpIPredicate::eq, warpgroup, i32(w)), band, visible)
                     : Value();
    }
    return visible;
  };
  Value begin = lower, end = upper;
  if (!narrowToBlocksWhere(loop, bands, ownBand, begin, end))
    return {lower, upper};
  // No block of its own: begin = upper and end = lower; every block of the
  // tile comes before begin and none after end.
  end = arith::MaxSIOp::create(b, loc, end, begin);
  passOverBlocks(lower, begin);
  warpgroupBegin = begin;
  warpgroupEnd = end;
  narrowedPerWarpgroup = true;
  return {begin, end};
}

void SM90Emitter::takeEmptyTurn(Value block) {
  waitForGemmTurn();
  passGemmTurn(block);
}

void SM90Emitter::releaseUnusedBlock(Value block) {
  Value ordinal = blockOrdinal(block);
  for (flash::KVOperand operand : {flash::KVOperand::Key, flash::KVOperand::Value}) {
    Slot slot = kvSlot(operand, ordinal);
    waitForPhase(slot.full, slot.parity);
    arriveOn(slot.empty);
  }
}

void SM90Emitter::passOverBlocks(Value from, Value to) {
  auto loop = scf::ForOp::create(b, loc, from, to, i32(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(loop.getBody()->getTerminator());
  takeEmptyTurn(loop.getInductionVar());
  releaseUnusedBlock(loop.getInductionVar());
}
