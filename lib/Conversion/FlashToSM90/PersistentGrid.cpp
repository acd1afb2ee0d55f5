//===- PersistentGrid.cpp - One CTA per SM slot, looping over tiles -------===//
//
// With hopper.persistent (warp-specialized kernels) the grid is as many CTAs
// as fit on the GPU at once, and each loops over query tiles. A CTA that
// runs one tile and exits leaves its prologue (Q and the first K/V blocks
// in flight, nothing to compute) and its epilogue (O stored while the
// tensor cores idle) exposed; at N = 512 that is a large part of a tile.
// Here the CTA splits into producer and consumers once, and the producer
// runs ahead across tiles:
//
//   producer (one thread), per tile: the scalars before the key loop, wait
//       until Q is released, Q by TMA (a third tensor map) onto queryFull,
//       the visible key range, its K/V blocks into the rings
//   consumers, per tile: wait for queryFull, the overlapped key loop,
//       release Q on queryEmpty (every Q·Kᵀ is done), the last P·V,
//       finalize and store
//
// so the next tile's Q and first K/V blocks land while the consumers
// finish the last. Both sides walk the same tile sequence and key ranges;
// block ordinals continue from tile to tile (ordinalBase), so the rings'
// phases need no reset, and the Q barriers complete one phase per tile.
//
// The schedule is dynamic: a CTA's first tile is blockIdx.x, every later
// one gridDim.x + the next value of a global tile counter (a kernel
// argument), drawn by the producer as the tile before starts (tiles of
// equal cost) or once it has issued that tile's last copy (under a mask),
// so a CTA takes new work when it is nearly free, whatever its tiles cost.
// The producer writes the tile into a shared slot (two,
// alternating by tile iteration) before the Q copy's expect_tx arrives on
// queryFull (a release); the consumers wait for queryFull (an acquire) and
// read it. A tile past the last ends both loops (the slot then holds -1):
// the producer completes queryFull's phase with a plain arrive instead of a
// copy. The slot of
// iteration t was last read in iteration t - 2, before the consumers
// released that tile's Q, which the producer waited for in iteration t - 1.
//
// Tile order under a mask: position t → (group, query tile, head). A group
// is G (batch, head) pairs whose K and V together fit in an L2 budget
// (G ≥ 1; query heads of one KV head count once), so the CTAs that run
// together share them. Within a group the query tiles go last first
// (longest first, so the short ones fill the end) with the group's heads
// side by side. Without a mask G = 1: head by head, query tile by query
// tile. Under a block summary (a mask that reads tensors) position t goes
// through the summary's tile order instead (KernelEmitter::
// mapTileInSummaryOrder: costliest first, as the summary kernel measured
// them). The last CTA to finish resets the counter (tiles drawn, CTAs
// done) to zero: the next launch on the stream starts from zero without a
// memset.
// Launches of one kernel on two streams at once need two counters
// (flashrun::AttentionKernel keeps one per stream).
//
//===----------------------------------------------------------------------===//

#include "InlineAsm.h"
#include "SM90Emitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;

namespace {
// K and V of the heads of one schedule group fit in this much of the L2
// (50 MB on the H100 and H200).
constexpr int64_t kTileGroupL2Bytes = 32 << 20;
// What the producer writes into the tile slot once the tiles have run out
// (tile indices stay below 2^31).
constexpr int64_t kEndOfTiles = -1;
} // namespace

LogicalResult SM90Emitter::emitKernelBody() {
  if (!hopper.persistent)
    return KernelEmitter::emitKernelBody();
  SmallVector<scf::ForOp> loops(kernel.getEntryBlock().getOps<scf::ForOp>());
  if (loops.size() != 1)
    return error(kernel, "a persistent kernel needs exactly one key loop at its top level");
  scf::ForOp keyLoop = loops.front();

  LogicalResult producerResult = success();
  splitWarpgroups([&] {
    auto elected = scf::IfOp::create(
        b, loc, cmpI(arith::CmpIPredicate::eq, tid, i32(hopper.consumerThreads())),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(elected.thenBlock()->getTerminator());
    producerResult =
        forEachTile(/*isProducer=*/true, [&] { return emitProducerTile(keyLoop); });
  });
  if (failed(producerResult))
    return failure();
  openGemmTurns();
  LogicalResult consumerResult = forEachTile(/*isProducer=*/false, [&]() -> FailureOr<Value> {
    if (failed(lowerBlock(kernel.getEntryBlock())))
      return failure();
    return Value(arith::MaxSIOp::create(
        b, loc, arith::SubIOp::create(b, loc, keyLoopEnd, keyLoopBegin), i32(0)));
  });
  if (failed(consumerResult))
    return failure();
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

SM90Emitter::TileSchedule SM90Emitter::emitTileSchedule() {
  // The sizes through opaque moves: computed per tile, so that LLVM does
  // not hoist the schedule out of the tile loop into registers held across
  // it (the consumers at D = 256 have none to spare).
  Value queryLen = opaqueValue(launchSizeOf(flash::DimRole::QueryLen)),
        keyLen = opaqueValue(launchSizeOf(flash::DimRole::KeyLen));
  Value headCount = opaqueValue(this->headCount), batchSize = opaqueValue(this->batchSize);
  Value kvHeadCount = opaqueValue(this->kvHeadCount);
  TileSchedule schedule;
  schedule.tilesPerHead =
      arith::DivUIOp::create(b, loc, add(queryLen, i32(config.br - 1)), i32(config.br));
  Value pairs = mul(headCount, batchSize);
  schedule.pairs = pairs;
  schedule.tiles = mul(schedule.tilesPerHead, pairs);
  // Without a mask every tile costs the same: one pair per group, the
  // query tiles of a head in a row (the order of one CTA per tile), which
  // measured faster than head groups on the dense grid. Under a block
  // summary only the tile count is used (the summary's order maps tiles).
  if (!visitsLongestFirst() || readsTileOrder()) {
    schedule.headsPerGroup = i32(1);
    schedule.heads = headCount;
    return schedule;
  }
  // KV heads whose K and V (M x D elements each) fit in the budget, at
  // least one; times the query heads that share each. In 64 bits: the
  // product can pass 2^32 before it is clamped to the pair count.
  Type i64Type = b.getI64Type();
  Value kvHeads = arith::DivUIOp::create(
      b, loc, i64(kTileGroupL2Bytes / (4 * config.headDim)),
      arith::ExtUIOp::create(b, loc, i64Type, keyLen));
  kvHeads = arith::MaxUIOp::create(b, loc, kvHeads, i64(1));
  Value sharing = arith::ExtUIOp::create(
      b, loc, i64Type, arith::DivUIOp::create(b, loc, headCount, kvHeadCount));
  Value group = arith::MinUIOp::create(b, loc, mul(kvHeads, sharing),
                                       arith::ExtUIOp::create(b, loc, i64Type, pairs));
  schedule.headsPerGroup = arith::TruncIOp::create(b, loc, b.getI32Type(), group);
  schedule.heads = headCount;
  return schedule;
}

void SM90Emitter::mapTile(const TileSchedule &schedule, Value tile) {
  Value groupTiles = mul(schedule.headsPerGroup, schedule.tilesPerHead);
  Value group = arith::DivUIOp::create(b, loc, tile, groupTiles);
  Value firstPair = mul(group, schedule.headsPerGroup);
  // The last group may hold fewer pairs.
  Value pairs = arith::MinUIOp::create(b, loc, schedule.headsPerGroup,
                                       arith::SubIOp::create(b, loc, schedule.pairs, firstPair));
  Value within = arith::SubIOp::create(b, loc, tile, mul(group, groupTiles));
  Value query = arith::DivUIOp::create(b, loc, within, pairs);
  Value pair = add(firstPair, arith::RemUIOp::create(b, loc, within, pairs));
  if (visitsLongestFirst())
    query = arith::SubIOp::create(
        b, loc, arith::SubIOp::create(b, loc, schedule.tilesPerHead, i32(1)), query);
  scalars.map(kernel.getQueryTile(), query);
  scalars.map(kernel.getHead(), arith::RemUIOp::create(b, loc, pair, schedule.heads));
  scalars.map(kernel.getBatch(), arith::DivUIOp::create(b, loc, pair, schedule.heads));
}

Value SM90Emitter::tileSlot(Value iteration) {
  Value slots = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                        add(sharedBase, i64(hopper.tileSlotsSmemOffset())));
  return add(slots, mul(arith::AndIOp::create(b, loc, iteration, i32(1)), i32(4)));
}

LogicalResult SM90Emitter::forEachTile(bool isProducer,
                                       function_ref<FailureOr<Value>()> work) {
  Type i32Type = b.getI32Type();
  // The producer tests each tile it draws against the tile count; the
  // consumers read kEndOfTiles once it has run out.
  Value tiles;
  if (isProducer)
    tiles = emitTileSchedule().tiles;
  Value ctas = NVVM::GridDimXOp::create(b, loc, i32Type);
  // Carried: (the producer's next tile,) the ordinal base, the iteration.
  SmallVector<Value> initial;
  if (isProducer)
    initial.push_back(NVVM::BlockIdXOp::create(b, loc, i32Type));
  initial.append({i32(0), i32(0)});
  SmallVector<Type> carriedTypes(initial.size(), i32Type);
  SmallVector<Location> carriedLocs(initial.size(), loc);
  // Results and the after block: (tile, ordinal base, iteration).
  SmallVector<Type> tileTypes(3, i32Type);
  SmallVector<Location> tileLocs(3, loc);
  auto loop = scf::WhileOp::create(b, loc, tileTypes, initial);
  OpBuilder::InsertionGuard guard(b);

  // Before: the tile of this iteration, handed over through its slot.
  Block *before = b.createBlock(&loop.getBefore(), {}, carriedTypes, carriedLocs);
  Value base = before->getArgument(before->getNumArguments() - 2);
  Value iteration = before->getArguments().back();
  Value tile, more;
  if (isProducer) {
    tile = before->getArgument(0);
    more = cmpI(arith::CmpIPredicate::ult, tile, tiles);
    AsmCall store;
    store.addInput(tileSlot(iteration));
    store.addInput(select(more, tile, i32(kEndOfTiles)));
    store.emit(b, loc, "st.shared.u32 [$0], $1;");
  } else {
    waitForPhase(queryFull, arith::AndIOp::create(b, loc, iteration, i32(1)));
    AsmCall load;
    load.addOutputs(i32Type, 1);
    load.addInput(tileSlot(iteration));
    tile = load.emit(b, loc, "ld.shared.u32 $0, [$1];").front();
    more = cmpI(arith::CmpIPredicate::ne, tile, i32(kEndOfTiles));
  }
  scf::ConditionOp::create(b, loc, more, ValueRange{tile, base, iteration});

  // After: one tile.
  Block *after = b.createBlock(&loop.getAfter(), {}, tileTypes, tileLocs);
  // When the producer draws the next tile. Tiles that all cost the same
  // (no mask): as this one starts, so the atomic's round trip runs under
  // its copies (N = 512: 1.18x one CTA per tile, 16k: 1.09x). Tiles of
  // uneven cost (longest first under a mask): once this one's last copy
  // is issued, a ring's depth of blocks before the consumers finish it;
  // drawn at the start, a CTA took its next tile a whole tile early, which
  // unbalanced the end of long causal schedules (16k: 0.90x one CTA per
  // tile, against 1.01x drawn late; bench/results/2026-12-03-h200-summary-scan).
  auto drawTile = [&] {
    AsmCall draw;
    draw.addOutputs(i32Type, 1);
    draw.addInput(LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), tileCounter));
    return add(ctas, draw.emit(b, loc, "atom.global.add.u32 $0, [$1], 1;").front());
  };
  bool drawsEarly = !visitsLongestFirst();
  Value nextTile;
  if (isProducer && drawsEarly)
    nextTile = drawTile();
  // Under a block summary the tiles go in its order (costliest first).
  if (readsTileOrder())
    mapTileInSummaryOrder(after->getArgument(0));
  else
    mapTile(emitTileSchedule(), after->getArgument(0));
  // A varlen batch: the tile's own sequence (its lengths and rows). A tile
  // past its sequence's queries sees no key (producer and consumers alike:
  // an empty key range) and stores no row.
  if (kernel.getVarlenAttr()) {
    bindSequenceLengths(lookupScalar(kernel.getBatch()));
    if (queryRowStart) {
      Value outside = cmpI(arith::CmpIPredicate::sge,
                           mul(lookupScalar(kernel.getQueryTile()), i32(config.br)), queryLen);
      if (!launchKeyLen) // dense keys: the launch's M is restored after the loop
        launchKeyLen = keyLen;
      keyLen = select(outside, i32(0), keyLen);
    }
  }
  ordinalBase = after->getArgument(1);
  tileIteration = after->getArgument(2);
  FailureOr<Value> blocks = work();
  if (failed(blocks))
    return failure();
  SmallVector<Value> next;
  if (isProducer)
    next.push_back(drawsEarly ? nextTile : drawTile());
  next.append({add(ordinalBase, *blocks), add(tileIteration, i32(1))});
  scf::YieldOp::create(b, loc, next);

  b.setInsertionPointAfter(loop);
  // The tile's sequence was bound inside the loop: outside it the sizes are
  // the launch's again.
  if (kernel.getVarlenAttr()) {
    queryLen = launchSizeOf(flash::DimRole::QueryLen);
    keyLen = launchSizeOf(flash::DimRole::KeyLen);
    queryRowStart = keyRowStart = Value();
  }
  if (isProducer)
    finishTileSchedule(loop.getResult(2));
  return success();
}

void SM90Emitter::finishTileSchedule(Value iteration) {
  {
    RematerializedAddresses addresses(*this);
    // queryFull's last phase must have been seen by every consumer before
    // this one completes (they released that tile's Q after their wait).
    waitForPhase(queryEmpty,
                 arith::XOrIOp::create(b, loc, arith::AndIOp::create(b, loc, iteration, i32(1)),
                                       i32(1)));
    arriveOn(queryFull);
  }
  // acq_rel: every CTA's draws come before its count, and the last CTA's
  // reset after all of them.
  AsmCall done;
  done.addInput(LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), tileCounter));
  done.addInput(arith::SubIOp::create(b, loc, NVVM::GridDimXOp::create(b, loc, b.getI32Type()),
                                      i32(1)));
  done.emit(b, loc,
            "{\n.reg .u32 done, zero;\n.reg .pred last;\n"
            "atom.acq_rel.gpu.global.add.u32 done, [$0+4], 1;\n"
            "setp.eq.u32 last, done, $1;\nmov.u32 zero, 0;\n"
            "@last st.relaxed.gpu.global.u32 [$0], zero;\n"
            "@last st.relaxed.gpu.global.u32 [$0+4], zero;\n}");
}

FailureOr<Value> SM90Emitter::emitProducerTile(scf::ForOp keyLoop) {
  Location outer = loc;
  for (Operation &op : kernel.getEntryBlock()) {
    if (&op == keyLoop.getOperation())
      break;
    loc = op.getLoc();
    if (auto load = dyn_cast<flash::LoadQOp>(op)) {
      RematerializedAddresses addresses(*this);
      // The consumers released the last tile's Q (a fresh barrier reports
      // the phase before the first complete).
      waitForPhase(queryEmpty,
                   arith::XOrIOp::create(b, loc, arith::AndIOp::create(b, loc, tileIteration, i32(1)),
                                         i32(1)));
      // Packed varlen queries: the tile at its sequence's row (rows past the
      // sequence are never stored).
      auto [firstRow, batch] =
          boxRowAndBatch(mul(lookupScalar(load.getQueryTile()), i32(config.br)),
                         lookupScalar(load.getBatch()), queryRowStart);
      issueBoxCopy(qTensorMap, firstRow, lookupScalar(load.getHead()), batch, config.br,
                   queryTileAddress, queryFull);
      continue;
    }
    // Tiles (the loop's initial m, l, A) are the consumers' business.
    if (llvm::any_of(op.getResultTypes(), [](Type type) { return isa<ShapedType>(type); }))
      continue;
    if (failed(lowerScalarOp(&op)))
      return failure();
  }
  loc = keyLoop.getLoc();
  Value lower = lookupScalar(keyLoop.getLowerBound());
  Value upper = lookupScalar(keyLoop.getUpperBound());
  if (!lower || !upper)
    return error(keyLoop, "loop bounds must be scalars defined before the loop");
  // The same range (or walk) the consumers' loop takes (lowerFor), found by
  // one thread.
  enterKeyRange(keyLoop, lowering::findSkippableMask(keyLoop), lower, upper,
                /*wholeWarp=*/false);
  lowering::KVPipeline state;
  for (flash::LoadKVOp load : keyLoop.getBody()->getOps<flash::LoadKVOp>())
    (load.getOperand() == flash::KVOperand::Key ? state.keyLoad : state.valueLoad) = load;
  emitKeyBlockCopies(state);
  loc = outer;
  return Value(arith::MaxSIOp::create(
      b, loc, arith::SubIOp::create(b, loc, keyLoopEnd, keyLoopBegin), i32(0)));
}

void SM90Emitter::issueQueryCopy(flash::LoadQOp op) {
  // Persistent: the producer copies Q (emitProducerTile).
  if (!hopper.persistent)
    KernelEmitter::issueQueryCopy(op);
}

void SM90Emitter::acquireQuery(int64_t pendingGroups) {
  if (!hopper.persistent)
    return KernelEmitter::acquireQuery(pendingGroups);
  waitForPhase(queryFull, arith::AndIOp::create(b, loc, tileIteration, i32(1)));
  queryAcquired = true;
}
