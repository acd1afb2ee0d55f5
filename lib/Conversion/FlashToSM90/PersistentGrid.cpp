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
// Tile order: tile t = (batch · H + head) · T + q with T = ceil(N / Br), q
// the query tile (T - 1 - q under a mask: longest first), i.e. the
// non-persistent grid's order, which keeps the CTAs that run together on
// the same heads' K/V (L2). CTA c takes position c of even rounds and
// G - 1 - c of odd ones (G CTAs per round): under a causal mask a CTA that
// drew a long tile draws a short one next.
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
    producerResult = forEachTile([&] { return emitProducerTile(keyLoop); });
  });
  if (failed(producerResult))
    return failure();
  openGemmTurns();
  LogicalResult consumerResult = forEachTile([&]() -> FailureOr<Value> {
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

LogicalResult SM90Emitter::forEachTile(function_ref<FailureOr<Value>()> work) {
  Type i32Type = b.getI32Type();
  Value tilesPerHead = arith::DivUIOp::create(b, loc, add(queryLen, i32(config.br - 1)),
                                              i32(config.br));
  Value tiles = mul(mul(tilesPerHead, headCount), batchSize);
  Value ctas = NVVM::GridDimXOp::create(b, loc, i32Type);
  Value cta = NVVM::BlockIdXOp::create(b, loc, i32Type);
  Value rounds = arith::DivUIOp::create(
      b, loc, add(tiles, arith::SubIOp::create(b, loc, ctas, i32(1))), ctas);
  auto roundLoop = scf::ForOp::create(b, loc, i32(0), rounds, i32(1), ValueRange{i32(0), i32(0)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(roundLoop.getBody());
  Value round = roundLoop.getInductionVar();
  Value base = roundLoop.getRegionIterArgs()[0], iteration = roundLoop.getRegionIterArgs()[1];
  Value odd = cmpI(arith::CmpIPredicate::ne, arith::AndIOp::create(b, loc, round, i32(1)), i32(0));
  Value position = select(
      odd, arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, ctas, i32(1)), cta), cta);
  Value tile = add(mul(round, ctas), position);
  auto mine = scf::IfOp::create(b, loc, TypeRange{i32Type, i32Type},
                                cmpI(arith::CmpIPredicate::ult, tile, tiles),
                                /*withElseRegion=*/true);
  scf::YieldOp::create(b, loc, mine.getResults());

  b.setInsertionPointToStart(mine.elseBlock());
  scf::YieldOp::create(b, loc, ValueRange{base, iteration});

  b.setInsertionPointToStart(mine.thenBlock());
  Value query = arith::RemUIOp::create(b, loc, tile, tilesPerHead);
  Value batchHead = arith::DivUIOp::create(b, loc, tile, tilesPerHead);
  if (visitsLongestFirst())
    query = arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, tilesPerHead, i32(1)),
                                  query);
  scalars.map(kernel.getQueryTile(), query);
  scalars.map(kernel.getHead(), arith::RemUIOp::create(b, loc, batchHead, headCount));
  scalars.map(kernel.getBatch(), arith::DivUIOp::create(b, loc, batchHead, headCount));
  ordinalBase = base;
  tileIteration = iteration;
  FailureOr<Value> blocks = work();
  if (failed(blocks))
    return failure();
  scf::YieldOp::create(b, loc, ValueRange{add(base, *blocks), add(iteration, i32(1))});
  return success();
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
      issueBoxCopy(qTensorMap, mul(lookupScalar(load.getQueryTile()), i32(config.br)),
                   lookupScalar(load.getHead()), lookupScalar(load.getBatch()), config.br,
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
