//===- BackwardWgmma.cpp - flash.backward_kernel on wgmma ------------------===//
//
// The Hopper backward: sm80::BackwardEmitter's walk, copies, element-wise
// ops and stores, with the five GEMMs on wgmma.mma_async. Warpgroup g
// (warps 4g..4g+3) owns key rows 64g..64g+63 of the CTA's key block, so
// the m64nN accumulators are exactly the mma.sync kernel's transposed tiles
// (BackwardEmitter.h). Per warpgroup:
//
//   Sᵀ  = K·Qᵀ,  dPᵀ = V·dOᵀ   m64nBr   A: K/V rows (K-major)
//                                       B: Q/dO rows (K-major)
//   dV += Pᵀ·dO, dK += dSᵀ·Q   m64nD    A: Pᵀ/dSᵀ packed from registers
//                                       B: dO/Q rows as k (MN-major)
//
// and over the CTA, dQᵀ = Kᵀ·dSᵀ (m64nBr per 64 columns of D, the
// warpgroups taking turns): A = K rows as k (MN-major, transposed A), B =
// dS (Br rows of Bc keys, K-major, written by stmatrix.trans) from shared
// memory. The f32 dQ tile is staged in shared memory as it lies in
// dq_accum (its columns' rows in swizzled pairs, queryGradAccumTile: each
// 8-byte store of a warp's pair of rows is free of bank conflicts) and
// added by one cp.reduce.async.bulk .add.f32 per tile (FlashAttention-3 adds dQ by TMA
// too): an atomic add per element cost 8-15% of the kernel at D = 64. In
// the deterministic mode thread 0 waits for the tile's turn once the tile
// is staged, issues the reduce, waits for it to complete and passes the
// turn on, without a CTA barrier (addsQueryGradsFromOneThread).
// Computing dQ transposed keeps the m64 shape for any Br (dQ = dS·K would
// need 64 query rows per warpgroup), so Br = 32 halves Sᵀ and dPᵀ.
//
// Shared memory (from a 1024-byte-aligned base): K, V (Bc rows), Q, dO (Br
// rows) as 64-column panels of 128-byte swizzled rows (SharedMemory.cpp),
// then dS (Br rows x Bc keys, the same layout), then the staged dQ tile
// (f32, D/S columns of Br rows, dq_accum's layout); Q and dO in two stages where they fit (the
// query loop prefetches the next tile's). At D <= 64 pairsTransposedProducts
// issues dPᵀ right behind Sᵀ (wait_group 1 for Sᵀ, dPᵀ completed where
// used). With overlapsAccumulates (the default, --bwd-overlap-accumulates)
// dVᵀ is issued before dPᵀ is waited for (where dPᵀ is not paired: beside
// it dVᵀ spills), dKᵀ before dVᵀ is waited for, and dKᵀ completes at the
// dQ product's wait (right before it where the warpgroups and the dQ
// units differ in number, e.g. D <= 64 on two warpgroups): 1.02-1.06x at
// D = 128 (H100, bench/results/2026-12-07-*).
// Every product is complete by the tile's end, so the CTA barrier before
// the next query tile's copies also guarantees no wgmma still reads Q, dO
// or dSᵀ (with three stages, --bwd-merge-barriers=3, there is none: a
// barrier before the dSᵀ store orders it behind every dQ read, and the
// copies go only into the stage of the tile before last). What the
// threads write (cp.async copies, dSᵀ stores) goes through the generic
// proxy and wgmma reads through the async proxy:
// `fence.proxy.async.shared::cta` before the barrier that publishes it.
//
//===----------------------------------------------------------------------===//

#include "InlineAsm.h"
#include "SM90Emitter.h"
#include "Wgmma.h"

#include "flashc/Config/KernelRules.h"
#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Conversion/FlashToSM80/BackwardEmitter.h"
#include "flashc/Conversion/FlashToSM90/Passes.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;

namespace {

/// Byte offsets of the wgmma backward's shared memory (see the file
/// comment); sharedBytes includes the 1024 bytes the base is rounded up by.
struct WgmmaBackwardLayout {
  WgmmaBackwardLayout(const KernelConfig &config, int64_t stages, bool stagesQueryGrads,
                      bool recordsTiles = false)
      : config(config), stages(stages), stagesQueryGrads(stagesQueryGrads),
        recordsTiles(recordsTiles),
        gradColumns(config.headDim / config::backwardColumnSlices(config.headDim)) {}
  int64_t tileRowBytes() const { return (config.headDim + 63) / 64 * 128; }
  int64_t keyOffset() const { return 0; }
  int64_t valueOffset() const { return config.bc * tileRowBytes(); }
  int64_t queryOffset() const { return 2 * config.bc * tileRowBytes(); }
  int64_t outputGradOffset() const { return queryOffset() + config.br * tileRowBytes(); }
  /// Q and dO of the next stage (panels stay 1024-byte aligned: Br >= 32).
  int64_t stageBytes() const { return 2 * config.br * tileRowBytes(); }
  int64_t scoreGradOffset() const { return queryOffset() + stages * stageBytes(); }
  /// The f32 dQ tile on its way to the bulk reduce: the CTA's D/S columns
  /// of Br rows each, as the tile's block lies in dq_accum (one reduce
  /// moves the tile).
  int64_t queryGradColumnBytes() const { return config.br * 4; }
  int64_t queryGradBytes() const { return gradColumns * queryGradColumnBytes(); }
  int64_t queryGradOffset() const { return scoreGradOffset() + config.bc * config.br * 2; }
  /// Deferred turns or the dQ writer: the record of staged dQ tiles
  /// (WgmmaBackwardEmitter::RecordSlot, 40 bytes).
  int64_t tileRecordOffset() const {
    return llvm::alignTo(
        queryGradOffset() + (stagesQueryGrads ? queryGradBytes() : 0), 8);
  }
  int64_t sharedBytes() const { return tileRecordOffset() + (recordsTiles ? 40 : 0) + 1024; }

  const KernelConfig &config;
  int64_t stages;
  bool stagesQueryGrads;
  bool recordsTiles;
  int64_t gradColumns;
};

class WgmmaBackwardEmitter : public sm80::BackwardEmitter {
public:
  WgmmaBackwardEmitter(flash::BackwardKernelOp kernel, const KernelConfig &config,
                       gpu::GPUModuleOp gpuModule, bool deterministic, bool stageAuxGrads,
                       bool deferTurns, bool queryGradWriter, bool rotateQueryTiles,
                       bool overlapAccumulates, int64_t mergeBarriers)
      : BackwardEmitter(kernel, config, gpuModule, "flash-to-sm90", deterministic, stageAuxGrads),
        bulkQueryGrads(
            config.headDim % 4 == 0 &&
            llvm::alignTo(WgmmaBackwardLayout(config, 2, true,
                                              (deferTurns && deterministic) || queryGradWriter)
                              .sharedBytes(),
                          16) +
                    rowStatBytes(2) + stagingBytes() <=
                kMaxSharedBytes),
        writesQueryGradsFromWarp(queryGradWriter && bulkQueryGrads && warpgroups() >= 2),
        defersTurns(deferTurns && deterministic && bulkQueryGrads && !writesQueryGradsFromWarp),
        storesFirstAdd(writesQueryGradsFromWarp && deterministic && everyTurnAdds()),
        writerTakesOwnTurn(writesQueryGradsFromWarp && deterministic && awaitsOwnTurnOnly()) {
    rotatesQueryTiles = rotateQueryTiles && !deterministic;
    overlapsAccumulates = overlapAccumulates;
    this->mergeBarriers = mergeBarriers >= 0
                              ? mergeBarriers
                              : config::defaultBackwardBarrierMerge(config.headDim);
    // dPᵀ beside Sᵀ stays at D <= 64 (the base class's choice): above it,
    // it fits without spills but measured 1-2.5% slower at D = 128 (H100,
    // same run, 2026-12-05; bench/results/2026-12-05b-*), and 1-4% slower
    // with the products in flight (2026-12-07b).
  }
  /// Whether the dQ writer warpgroup adds the staged tiles (--dq-writer
  /// and it applies).
  bool writesQueryGrads() const { return writesQueryGradsFromWarp; }

  Value sharedChunkOffset(Value row, Value chunk, int64_t rows) override {
    return wgmma::panelChunkOffset(*this, row, chunk, rows);
  }
  std::optional<int64_t> sharedRowStepBytes(int64_t rowStep) override {
    return wgmma::panelRowStepBytes(rowStep);
  }

protected:
  void assignSharedBuffers() override;
  int64_t mainSharedBytes(int64_t stages) const override {
    return WgmmaBackwardLayout(config, stages, bulkQueryGrads,
                               defersTurns || writesQueryGradsFromWarp)
        .sharedBytes();
  }
  int64_t queryStageBytes() const override {
    return WgmmaBackwardLayout(config, 1, false).stageBytes();
  }
  /// This kernel's shared memory, at its query stages.
  WgmmaBackwardLayout sharedLayout() const {
    return WgmmaBackwardLayout(config, queryStages(), bulkQueryGrads,
                               defersTurns || writesQueryGradsFromWarp);
  }
  flash::GemmKind gemmKind() const override { return flash::GemmKind::Wgmma; }
  void fenceSharedWrites() override {
    AsmCall().emit(b, loc, "fence.proxy.async.shared::cta;");
  }
  SmallVector<Value> issueTransposedProduct(Value keyRows, Value queryRows) override;
  SmallVector<Value> completeTransposedProduct(ArrayRef<Value> inFlight,
                                               int64_t laterProducts) override {
    return wgmma::wait(*this, laterProducts, inFlight);
  }
  SmallVector<Value> accumulateProduct(ArrayRef<Value> acc, ArrayRef<Value> scores,
                                       Value queryRows) override;
  SmallVector<Value> issueAccumulate(ArrayRef<Value> acc, ArrayRef<Value> scores,
                                     Value queryRows) override;
  SmallVector<Value> awaitProducts(int64_t pending, ArrayRef<Value> inFlight) override {
    return wgmma::wait(*this, pending, inFlight);
  }
  void storeScoreGrads(ArrayRef<Value> scoreGrads) override;
  void addQueryGrads(Value keys, Value queryTile, Value accumTile, Value scale,
                     Value turnLock) override;
  bool awaitQueryGradReads() override;
  void drainQueryGrads() override;
  void completeQueryGrads() override;
  bool addsQueryGradsFromOneThread() const override { return deterministic && bulkQueryGrads; }
  bool firstAddStoresQueryGrads() const override { return storesFirstAdd; }
  bool queryGradAddsAwaitOwnTurn() const override { return writerTakesOwnTurn; }
  void settleDeferredTurns() override;
  int64_t auxiliaryThreads() const override { return writesQueryGradsFromWarp ? 128 : 0; }
  void splitBodyThreads() override;

private:
  /// dQ leaves through shared memory, one cp.reduce.async.bulk per query
  /// tile, instead of an atomic add per element, where the staging tile
  /// fits beside two query stages. In deterministic mode the reduce is
  /// complete before the tile's semaphore passes the turn on.
  const bool bulkQueryGrads;
  /// --dq-writer (the deterministic default; bulk dQ, two or more
  /// warpgroups): one more warpgroup joins the CTA at 24 registers (the
  /// body's take 240), and
  /// one of its warps adds the staged dQ tiles, taking the turn wait, the
  /// reduce and, in deterministic mode, the wait for its completion and
  /// the release off the body's threads. They hand it each staged tile by
  /// a record and named barrier 2 (bar.arrive: they do not wait), and wait
  /// at named barrier 3 before they write the staging tile again, which
  /// the writer arrives at once the reduce has read it.
  const bool writesQueryGradsFromWarp;
  /// Deterministic mode with bulk dQ (--defer-turns, experimental): thread
  /// 0 neither waits for a tile's turn nor for its reduce at the tile's
  /// end; it records the staged tile and, during the next tile's first
  /// dK/dV product, passes on the turn of the tile added before (its
  /// reduce has had a tile to complete) and adds the staged one if its
  /// turn has come; if not, it waits for the turn before the barrier after
  /// which the staging tile is written again.
  const bool defersTurns;
  /// The writer, where every turn adds (everyTurnAdds): the tile's first
  /// add (it awaits turn 0) copies the staged tile into dq_accum instead of
  /// adding it, so the preprocess does not zero dq_accum.
  const bool storesFirstAdd;
  /// The writer, where every add awaits the CTA's own turn
  /// (awaitsOwnTurnOnly): it computes the turns itself instead of reading
  /// them from the record, so the body does not hold them across the tile
  /// (at D = 128 that cost 8 bytes of spills at 240 registers).
  const bool writerTakesOwnTurn;
  /// dQᵀ's f32 accumulators of unit `unit` (64 columns of D), scaled, into
  /// the staging tile.
  void stageQueryGrads(ArrayRef<Value> acc, Value unit, Value scale);
  /// After the staging tile is complete: one bulk reduce of the whole tile
  /// (rows past N too) into its block of dq_accum at `accumTile`.
  void issueQueryGradReduce(Value accumTile, Value turnLock);
  Value smemQueryGrads;
  /// The record of staged dQ tiles in shared memory, written by thread 0:
  /// the staged tile (its semaphore, 0 for none or outside deterministic
  /// mode; the reduce's destination and bytes; the turn it waits for and
  /// the one it passes on, unless writerTakesOwnTurn) and, for defersTurns
  /// (only thread 0 reads it then), the semaphore of the tile added whose
  /// turn is not yet passed on. The dQ writer reads the staged tile; Bytes
  /// < 0 ends its loop.
  enum RecordSlot : int64_t {
    StagedLock = 0,
    StagedDestination = 8,
    StagedBytes = 16,
    StagedTurn = 20,
    ReleasedTurn = 24,
    AddedLock = 32
  };
  Value smemTileRecord;
  Value recordSlot(RecordSlot slot) { return gepBytes(smemTileRecord, i32(slot)); }
  /// Whether this tile's body has settled the previous tiles' turns (at its
  /// first dK/dV product).
  bool settledThisTile = false;
  /// The named barriers between the body's threads and the writer warp.
  void syncWithWriter(int64_t id, bool wait) {
    int64_t threads = threadsOf(sm80::BackwardStage::Main) + 32;
    if (wait)
      syncNamedBarrier(id, threads);
    else
      arriveAtNamedBarrier(id, threads);
  }
  static constexpr int64_t kStagedBarrier = 2, kStagingFreeBarrier = 3;
  /// The writer warp's loop (the first warp past the body's threads).
  void writeQueryGrads();
  /// Thread 0, defersTurns: passes on the added tile's turn once its reduce
  /// is complete.
  void passAddedTurn();
  /// One thread (thread 0 or the writer's first): adds `bytes` of the
  /// staging tile at `destination` by one bulk reduce; `afterAcquire`: the
  /// turn was just acquired (generic proxy), so the reduce (async proxy)
  /// is fenced behind it; `awaitRead`: waits until the reduce has read the
  /// tile; `awaited` (i32, storesFirstAdd): the turn the add waited for,
  /// 0 making it the tile's first add, a plain bulk copy.
  void reduceStagedTile(Value destination, Value bytes, bool afterAcquire, bool awaitRead,
                        Value awaited = Value());
  /// The same thread, once its reduces are complete: sets `lock` to
  /// `next`, passing the turn on.
  void passTurnOnceAdded(Value lock, Value next);
  /// Thread 0, defersTurns: adds the staged tile, once its turn has come
  /// (`wait`) or if it has (otherwise).
  void addStagedTile(bool wait);
  /// dQᵀ's register nt·4 + e of unit `unit` is column d = 64u + 16(w mod 4)
  /// + g + 8·(e >= 2) of D, query 8·nt + 2t + e mod 2 of the tile: the
  /// column of e < 2 (i32).
  Value firstQueryGradColumn(Value unit) {
    Value warpInGroup = arith::AndIOp::create(b, loc, warp, i32(3));
    return add(add(mul(unit, i32(64)), mul(warpInGroup, i32(16))), groupId);
  }
  /// Whether `column` is inside D (D = 96: the second unit's last 32
  /// columns are not); null where every column is.
  Value queryGradColumnInside(Value column) {
    return gradColumns() % 64 ? cmpI(arith::CmpIPredicate::slt, column, i32(gradColumns()))
                              : Value();
  }
  /// The shared-window address (i64) of a shared-memory pointer, as
  /// descriptors take it, through an opaque move: LLVM would otherwise hoist
  /// every descriptor of the loop-invariant buffers out of the query loop
  /// and hold them all (two registers each) across it.
  Value addressOf(Value pointer) {
    return LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), opaquePointer(pointer));
  }
  /// This thread's warpgroup (i32).
  Value warpgroup() { return arith::ShRUIOp::create(b, loc, warp, i32(2)); }
  int64_t warpgroups() const { return config.numWarps / 4; }
};

} // namespace

void WgmmaBackwardEmitter::assignSharedBuffers() {
  WgmmaBackwardLayout layout = sharedLayout();
  Value raw = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(),
                                       sharedMemoryBase(/*alignment=*/1024));
  Value aligned = arith::AndIOp::create(b, loc, add(raw, i64(1023)), i64(~int64_t(1023)));
  Value base = LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext(), 3),
                                        aligned);
  smemK = gepBytes(base, i32(layout.keyOffset()));
  smemV = gepBytes(base, i32(layout.valueOffset()));
  smemQ = gepBytes(base, i32(layout.queryOffset()));
  smemDO = gepBytes(base, i32(layout.outputGradOffset()));
  smemDS = gepBytes(base, i32(layout.scoreGradOffset()));
  smemQueryGrads = gepBytes(base, i32(layout.queryGradOffset()));
  if (defersTurns || writesQueryGradsFromWarp)
    smemTileRecord = gepBytes(base, i32(layout.tileRecordOffset()));
  if (defersTurns) {
    // No tile owed yet.
    onFirstThread([&] {
      for (RecordSlot slot : {AddedLock, StagedLock})
        LLVM::StoreOp::create(b, loc, i64(0), recordSlot(slot), 8);
    });
  }
}

SmallVector<Value> WgmmaBackwardEmitter::issueTransposedProduct(Value keyRows,
                                                                Value queryRows) {
  // This warpgroup's 64 keys start 64 rows into every panel of the block.
  Value keys = add(addressOf(keyRows), toI64(mul(warpgroup(), i32(64 * 128))));
  Value queries = addressOf(queryRows);
  return wgmma::productOverHeadDim(*this, keys, config.bc, queries, config.br, config.br);
}

SmallVector<Value> WgmmaBackwardEmitter::accumulateProduct(ArrayRef<Value> acc,
                                                           ArrayRef<Value> x,
                                                           Value queryRows) {
  SmallVector<Value> regs = wgmma::wait(*this, 0, issueAccumulate(acc, x, queryRows));
  regs.resize(acc.size());
  return regs;
}

SmallVector<Value> WgmmaBackwardEmitter::issueAccumulate(ArrayRef<Value> acc,
                                                         ArrayRef<Value> x,
                                                         Value queryRows) {
  // The Sᵀ-layout accumulators of n-tiles 2k and 2k+1, packed in pairs, are
  // the A fragment of k-step k (as P is in the forward's P·V).
  SmallVector<Value> operands(acc);
  for (int64_t kStep = 0; kStep < config.br / 16; ++kStep) {
    const Value *lo = &x[8 * kStep], *hi = lo + 4;
    for (auto [first, second] :
         {std::pair{lo[0], lo[1]}, {lo[2], lo[3]}, {hi[0], hi[1]}, {hi[2], hi[3]}})
      operands.push_back(packHalves(first, second));
  }
  operands = wgmma::fence(*this, operands);
  SmallVector<Value> regs(operands.begin(), operands.begin() + acc.size());
  ArrayRef<Value> packed = ArrayRef<Value>(operands).drop_front(acc.size());
  // This CTA's D/S columns start (D/S)/64 panels of Br rows into the tile.
  Value rows = addressOf(queryRows);
  if (Value slice = columnSliceOffset(gradColumns() / 64 * config.br * 128))
    rows = add(rows, toI64(slice));
  for (int64_t kStep = 0; kStep < config.br / 16; ++kStep) {
    Value y = wgmma::descriptor(*this, rows, kStep * 16 * 128, config.br * 128, 1024);
    regs = wgmma::mma(*this, gradColumns(), regs,
                      {Value(), packed.slice(4 * kStep, 4), y, /*transposeA=*/false,
                       /*transposeB=*/true});
  }
  // The packed operands stay tied until the wait: the wgmmas read them.
  regs.append(packed.begin(), packed.end());
  regs = wgmma::commit(*this, regs);
  // defersTurns: while this product runs, the tile added at the last
  // tile's settling (its reduce has had a tile to complete) passes its turn
  // on, and the last tile is added if its turn has come.
  if (defersTurns && !settledThisTile) {
    onFirstThread([&] {
      passAddedTurn();
      addStagedTile(/*wait=*/false);
    });
    settledThisTile = true;
  }
  return regs;
}

void WgmmaBackwardEmitter::storeScoreGrads(ArrayRef<Value> regs) {
  // dS goes to shared memory untransposed, Br rows of Bc keys (the K-major
  // B operand of dQᵀ), by stmatrix.trans: registers nt·4 + 2·half + {0, 1}
  // are the 8 x 8 block (keys 16w + 8·half + g, queries 8·nt + 2t + {0, 1})
  // of dSᵀ, stored transposed as rows 8·nt.. of dS at keys 16w + 8·half...,
  // one 16-byte chunk per row. Lane l gives the row address of block l / 8
  // of each x4 group (blocks (nt, 0), (nt, 1), (nt + 1, 0), (nt + 1, 1)).
  Value base = addressOf(smemDS);
  Value block = arith::ShRUIOp::create(b, loc, lane, i32(3));
  Value row = arith::AndIOp::create(b, loc, lane, i32(7));
  Value half = arith::AndIOp::create(b, loc, block, i32(1));
  Value keyChunk = add(mul(warp, i32(2)), half); // the keys' 16-byte chunk
  Value panel = arith::ShRUIOp::create(b, loc, keyChunk, i32(3));
  Value swizzled =
      arith::XOrIOp::create(b, loc, arith::AndIOp::create(b, loc, keyChunk, i32(7)), row);
  Value query = add(mul(arith::ShRUIOp::create(b, loc, block, i32(1)), i32(8)), row);
  Value laneAddress = add(base, toI64(add(add(mul(panel, i32(config.br * 128)),
                                              mul(query, i32(128))),
                                          mul(swizzled, i32(16)))));
  for (int64_t nt = 0; nt < config.br / 8; nt += 2) {
    AsmCall store;
    store.addInput(add(laneAddress, i64(nt * 8 * 128)));
    for (int64_t block = 0; block < 4; ++block) {
      const Value *pair = &regs[(nt + block / 2) * 4 + 2 * (block % 2)];
      store.addInput(packHalves(pair[0], pair[1]));
    }
    store.emit(b, loc, "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {$1, $2, $3, $4};");
  }
}

void WgmmaBackwardEmitter::addQueryGrads(Value keys, Value queryTile, Value accumTile,
                                         Value scale, Value turnLock) {
  // dQᵀ in units of 64 columns of the CTA's D/S (one panel of K each),
  // unit u computed by warpgroup u mod warpgroups().
  int64_t units = (gradColumns() + 63) / 64;
  int64_t slots = (units + warpgroups() - 1) / warpgroups();
  // The accumulating products in flight complete at the wait of a product
  // every thread issues; otherwise before it.
  bool tiesInFlight = slots == 1 && units == warpgroups();
  if (!tiesInFlight)
    settleAccumulates();
  Value firstQuery = mul(queryTile, i32(config.br));
  Value keyBase = addressOf(keys), scoreGrads = addressOf(smemDS);
  if (Value slice = columnSliceOffset(gradColumns() / 64 * config.bc * 128))
    keyBase = add(keyBase, toI64(slice));
  for (int64_t slot = 0; slot < slots; ++slot) {
    OpBuilder::InsertionGuard guard(b);
    Value unit = add(warpgroup(), i32(slot * warpgroups()));
    // Uniform over each warpgroup, as the .aligned wgmma needs.
    if ((slot + 1) * warpgroups() > units) {
      auto inside = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, unit, i32(units)),
                                      /*withElseRegion=*/false);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
    }
    Value panel = add(keyBase, toI64(mul(unit, i32(config.bc * 128))));
    wgmma::fence(*this, {});
    SmallVector<Value> acc;
    for (int64_t kStep = 0; kStep < config.bc / 16; ++kStep) {
      Value a = wgmma::descriptor(*this, panel, kStep * 16 * 128, config.bc * 128, 1024);
      Value y = wgmma::descriptor(*this, scoreGrads,
                                  kStep / 4 * config.br * 128 + kStep % 4 * 32, 16, 1024);
      acc = wgmma::mma(*this, config.br, acc,
                       {a, {}, y, /*transposeA=*/true, /*transposeB=*/false});
    }
    // Any product still in flight (tiesInFlight) completes with this one.
    size_t dqRegs = acc.size();
    acc.append(inFlightAccumulatorRegs());
    acc = wgmma::wait(*this, 0, wgmma::commit(*this, acc));
    defineSettled(ArrayRef<Value>(acc).drop_front(dqRegs));
    acc.resize(dqRegs);
    if (bulkQueryGrads) {
      stageQueryGrads(acc, unit, scale);
      continue;
    }
    Value firstColumn = firstQueryGradColumn(unit);
    Value firstRow = mul(threadInGroup, i32(2));
    for (int64_t e = 0; e < 4; ++e) {
      Value column = e >= 2 ? add(firstColumn, i32(8)) : firstColumn;
      Value columnInside = queryGradColumnInside(column);
      for (int64_t nt = 0; nt < config.br / 8; ++nt) {
        Value row = add(firstRow, i32(8 * nt + (e & 1)));
        Value valid = cmpI(arith::CmpIPredicate::slt, add(firstQuery, row), queryLen);
        if (columnInside)
          valid = arith::AndIOp::create(b, loc, valid, columnInside);
        Value index = add(accumTile, toI64(queryGradAccumElement(row, column)));
        atomicAdd(gepElements(queryGradAccumPtr, index, b.getF32Type()),
                  fmul(acc[nt * 4 + e], scale), valid);
      }
    }
  }
  if (bulkQueryGrads)
    issueQueryGradReduce(accumTile, turnLock);
}

void WgmmaBackwardEmitter::stageQueryGrads(ArrayRef<Value> acc, Value unit, Value scale) {
  // Registers nt·4 + e and e + 1 (firstQueryGradColumn) are rows 8nt + 2t
  // and + 1, pair p = 4nt + t, of one column: one 8-byte store into slot p
  // ^ x of the column. The columns of a warp's store are g and g + 8 from
  // a multiple of 16, so x = 4(g mod 4) & swizzle (Br % 32 == 0: bits 2-3,
  // nt's low two) spreads the lanes of g mod 4 = 0..3 over a 128-byte
  // wavefront and those of g = 4..7 over a second one: no conflict (an
  // unswizzled column would put the eight lanes of a t in one bank).
  // Rows past N are staged too (their block has room for them).
  int64_t columnBytes = sharedLayout().queryGradColumnBytes();
  Value firstColumn = firstQueryGradColumn(unit);
  Value pairSwizzle = arith::AndIOp::create(b, loc, mul(groupId, i32(4)),
                                            i32(queryGradPairSwizzle()));
  auto f32x2 = VectorType::get({2}, b.getF32Type());
  for (int64_t half = 0; half < 2; ++half) {
    Value column = half ? add(firstColumn, i32(8)) : firstColumn;
    OpBuilder::InsertionGuard guard(b);
    if (Value columnInside = queryGradColumnInside(column)) {
      auto inside = scf::IfOp::create(b, loc, columnInside, /*withElseRegion=*/false);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
    }
    Value columnBase = gepBytes(smemQueryGrads, add(mul(column, i32(columnBytes)),
                                                    mul(threadInGroup, i32(8))));
    for (int64_t nt = 0; nt < config.br / 8; ++nt) {
      Value pair = LLVM::UndefOp::create(b, loc, f32x2);
      for (int64_t odd = 0; odd < 2; ++odd)
        pair = LLVM::InsertElementOp::create(b, loc, pair,
                                             fmul(acc[nt * 4 + 2 * half + odd], scale), i32(odd));
      Value slots = arith::XOrIOp::create(b, loc, i32(4 * nt), pairSwizzle);
      LLVM::StoreOp::create(b, loc, pair, gepBytes(columnBase, mul(slots, i32(8))), 8);
    }
  }
}

void WgmmaBackwardEmitter::issueQueryGradReduce(Value accumTile, Value turnLock) {
  // The staged rows are read by the async proxy: fence, then publish them
  // (to the writer warp: at the hand-over below).
  AsmCall().emit(b, loc, "fence.proxy.async.shared::cta;");
  if (!writesQueryGradsFromWarp)
    syncBodyThreads();
  // The tile's block of dq_accum is laid out as the staging tile: thread
  // 0 adds it with one reduce. Its group is waited for before the next
  // tile's barrier that publishes dSᵀ (awaitQueryGradReads), so the tile
  // is not overwritten while read, and before the CTA exits
  // (drainQueryGrads).
  Value bytes = i32(sharedLayout().queryGradBytes());
  Value first = accumTile;
  if (writesQueryGradsFromWarp || (turnLock && defersTurns)) {
    // The tile is added by the writer warp, which takes it at barrier 2,
    // or (defersTurns) by thread 0 during the next tile's first dK/dV
    // product (or the settling before a skipped tile's wait, or the CTA's
    // end).
    onFirstThread([&] {
      auto store = [&](Value value, RecordSlot slot, int64_t bytes) {
        LLVM::StoreOp::create(b, loc, value, recordSlot(slot), bytes);
      };
      store(LLVM::PtrToIntOp::create(b, loc, b.getI64Type(),
                                     gepElements(queryGradAccumPtr, first, b.getF32Type())),
            StagedDestination, 8);
      store(bytes, StagedBytes, 4);
      store(turnLock ? LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), turnLock).getResult()
                     : i64(0),
            StagedLock, 8);
      // The writer computes both turns itself (lowerQueryGradAdd checked
      // that this tile awaits the CTA's own).
      if (writerTakesOwnTurn)
        return;
      store(turnLock ? awaitedTurn : i32(0), StagedTurn, 4);
      // (Thread 0 itself passes the turn on under defersTurns.)
      if (writesQueryGradsFromWarp)
        store(turnLock ? add(turn, i32(1)) : i32(0), ReleasedTurn, 4);
    });
    if (writesQueryGradsFromWarp)
      syncWithWriter(kStagedBarrier, /*wait=*/false);
    else
      settledThisTile = false;
    return;
  }
  AsmCall reduce;
  reduce.addInput(LLVM::PtrToIntOp::create(b, loc, b.getI64Type(),
                                           gepElements(queryGradAccumPtr, first, b.getF32Type())));
  reduce.addInput(addressOf(smemQueryGrads));
  reduce.addInput(bytes);
  reduce.addInput(arith::ExtUIOp::create(b, loc, b.getI32Type(),
                                         cmpI(arith::CmpIPredicate::eq, tid, i32(0))));
  // Deterministic: the tile's turn, for thread 0 alone.
  if (turnLock)
    waitForTurn(turnLock);
  // Deterministic: after the acquire that gave this CTA its turn (generic
  // proxy), before the reduce (async proxy).
  reduce.emit(b, loc,
              std::string("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $3, 0;\n\t") +
                  (deterministic ? "@p fence.proxy.async.global;\n\t" : "") +
                  "@p cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], "
                  "$2;\n\t@p cp.async.bulk.commit_group;\n\t}");
  if (turnLock) {
    // The reduce's writes are complete and ordered before the release.
    onFirstThread([&] {
      completeQueryGrads();
      emitAsm("fence.acq_rel.gpu;");
    });
    passTurn(turnLock);
  }
}

void WgmmaBackwardEmitter::passAddedTurn() {
  Value added = LLVM::LoadOp::create(b, loc, b.getI64Type(), recordSlot(AddedLock), 8);
  auto any = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ne, added, i64(0)),
                               /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(any.thenBlock()->getTerminator());
  passTurnOnceAdded(added, add(turn, i32(1)));
  LLVM::StoreOp::create(b, loc, i64(0), recordSlot(AddedLock), 8);
}

void WgmmaBackwardEmitter::reduceStagedTile(Value destination, Value bytes, bool afterAcquire,
                                            bool awaitRead, Value awaited) {
  std::string fence = afterAcquire ? "fence.proxy.async.global;\n\t" : "";
  std::string reduce =
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], $2;\n\t";
  std::string tail = std::string("cp.async.bulk.commit_group;") +
                     (awaitRead ? "\n\tcp.async.bulk.wait_group.read 0;" : "");
  if (!awaited) {
    emitAsm(fence + reduce + tail, "l,l,r", {destination, addressOf(smemQueryGrads), bytes});
    return;
  }
  emitAsm("{\n\t.reg .pred first;\n\tsetp.eq.b32 first, $3, 0;\n\t" + fence +
              "@first cp.async.bulk.global.shared::cta.bulk_group [$0], [$1], $2;\n\t@!first " +
              reduce + tail + "\n\t}",
          "l,l,r,r", {destination, addressOf(smemQueryGrads), bytes, awaited});
}

void WgmmaBackwardEmitter::passTurnOnceAdded(Value lock, Value next) {
  // The reduces' writes are complete and ordered before the release.
  completeQueryGrads();
  emitAsm("fence.acq_rel.gpu;\n\tst.global.release.gpu.b32 [$0], $1;", "l,r", {lock, next});
}

void WgmmaBackwardEmitter::addStagedTile(bool wait) {
  Type i64Type = b.getI64Type(), i32Type = b.getI32Type();
  Value staged = LLVM::LoadOp::create(b, loc, i64Type, recordSlot(StagedLock), 8);
  auto any = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ne, staged, i64(0)),
                               /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(any.thenBlock()->getTerminator());
  Value awaited = LLVM::LoadOp::create(b, loc, i32Type, recordSlot(StagedTurn), 4);
  if (wait) {
    spinForTurn(staged, awaited);
  } else {
    Value seen = emitAsmValue(i32Type, "ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", {staged});
    auto come = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::eq, seen, awaited),
                                  /*withElseRegion=*/false);
    b.setInsertionPoint(come.thenBlock()->getTerminator());
  }
  // Only the tile added before may be in flight: its turn was passed on,
  // so it is complete.
  reduceStagedTile(LLVM::LoadOp::create(b, loc, i64Type, recordSlot(StagedDestination), 8),
                   LLVM::LoadOp::create(b, loc, i32Type, recordSlot(StagedBytes), 4),
                   /*afterAcquire=*/true, /*awaitRead=*/false);
  LLVM::StoreOp::create(b, loc, staged, recordSlot(AddedLock), 8);
  LLVM::StoreOp::create(b, loc, i64(0), recordSlot(StagedLock), 8);
}

void WgmmaBackwardEmitter::settleDeferredTurns() {
  if (!defersTurns)
    return;
  onFirstThread([&] {
    passAddedTurn();
    addStagedTile(/*wait=*/true);
    passAddedTurn();
  });
}

void WgmmaBackwardEmitter::splitBodyThreads() {
  if (!writesQueryGradsFromWarp)
    return;
  int64_t bodyThreads = threadsOf(sm80::BackwardStage::Main);
  sm90::splitWarpgroups(b, loc, func, tid, launchThreadsOf(sm80::BackwardStage::Main),
                        bodyThreads, /*producerRegisters=*/24, [&] {
                          // The warpgroup's other three warps have nothing to do.
                          auto writer = scf::IfOp::create(
                              b, loc, cmpI(arith::CmpIPredicate::ult, tid, i32(bodyThreads + 32)),
                              /*withElseRegion=*/false);
                          OpBuilder::InsertionGuard guard(b);
                          b.setInsertionPoint(writer.thenBlock()->getTerminator());
                          writeQueryGrads();
                        });
}

void WgmmaBackwardEmitter::writeQueryGrads() {
  Type i64Type = b.getI64Type(), i32Type = b.getI32Type();
  auto load = [&](Type type, RecordSlot slot, int64_t bytes) -> Value {
    return LLVM::LoadOp::create(b, loc, type, recordSlot(slot), bytes);
  };
  // The writer's first thread issues and passes on.
  auto onFirst = [&](function_ref<void()> body) {
    onThread(threadsOf(sm80::BackwardStage::Main), body);
  };
  Value ownTurn = writerTakesOwnTurn ? ctaKeyColumn() : Value();
  // The staging tile starts free.
  syncWithWriter(kStagingFreeBarrier, /*wait=*/false);
  auto loop = scf::WhileOp::create(b, loc, TypeRange{i32Type}, ValueRange{});
  OpBuilder::InsertionGuard guard(b);
  b.createBlock(&loop.getBefore());
  // A tile is staged (or the body is done: Bytes < 0).
  syncWithWriter(kStagedBarrier, /*wait=*/true);
  Value bytes = load(i32Type, StagedBytes, 4);
  scf::ConditionOp::create(b, loc, cmpI(arith::CmpIPredicate::sge, bytes, i32(0)),
                           ValueRange{bytes});
  Block *after = b.createBlock(&loop.getAfter(), {}, {i32Type}, {loc});
  // Read before the staging tile is freed: the body then writes the next
  // record.
  Value lock = load(i64Type, StagedLock, 8), destination = load(i64Type, StagedDestination, 8);
  Value awaited = ownTurn ? ownTurn : load(i32Type, StagedTurn, 4),
        released = ownTurn ? add(ownTurn, i32(1)) : load(i32Type, ReleasedTurn, 4);
  onFirst([&] {
    if (deterministic)
      spinForTurn(lock, awaited);
    reduceStagedTile(destination, after->getArgument(0), /*afterAcquire=*/deterministic,
                     /*awaitRead=*/true, storesFirstAdd ? awaited : Value());
  });
  syncWithWriter(kStagingFreeBarrier, /*wait=*/false);
  if (deterministic)
    onFirst([&] { passTurnOnceAdded(lock, released); });
  scf::YieldOp::create(b, loc, ValueRange{});
  b.setInsertionPointAfter(loop);
  onFirst([&] { emitAsm("cp.async.bulk.wait_group 0;"); });
}

bool WgmmaBackwardEmitter::awaitQueryGradReads() {
  if (writesQueryGradsFromWarp) {
    // The writer has read the last tile staged. Every body thread waits
    // here (the writer only arrives, once per staged tile, so a phase
    // completes with all of them), which also publishes their dSᵀ.
    syncWithWriter(kStagingFreeBarrier, /*wait=*/true);
    return true;
  }
  // defersTurns: a tile still staged is added before the staging tile is
  // written again (after the barrier that follows).
  if (defersTurns)
    onFirstThread([&] {
      // A body without a dK/dV product before its dQ add has not settled.
      if (!settledThisTile)
        passAddedTurn();
      addStagedTile(/*wait=*/true);
    });
  if (bulkQueryGrads)
    AsmCall().emit(b, loc, "cp.async.bulk.wait_group.read 0;");
  return false;
}

void WgmmaBackwardEmitter::completeQueryGrads() {
  // The reduce's writes (async proxy) are done and ordered before the
  // generic-proxy release that passes the turn on.
  if (bulkQueryGrads)
    AsmCall().emit(b, loc, "cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;");
}

void WgmmaBackwardEmitter::drainQueryGrads() {
  if (writesQueryGradsFromWarp) {
    // Once the writer has taken the last tile: the record that ends its
    // loop.
    syncWithWriter(kStagingFreeBarrier, /*wait=*/true);
    onFirstThread([&] {
      LLVM::StoreOp::create(b, loc, i32(-1), recordSlot(StagedBytes), 4);
    });
    syncWithWriter(kStagedBarrier, /*wait=*/false);
    return;
  }
  if (defersTurns)
    settleDeferredTurns();
  else if (bulkQueryGrads)
    AsmCall().emit(b, loc, "cp.async.bulk.wait_group 0;");
}

/// The wgmma kernel's shape for `kernel`: a warpgroup per 64 keys, Br the
/// N of the transposed GEMMs (Sᵀ, dPᵀ, dQᵀ).
static FailureOr<KernelConfig> wgmmaBackwardConfig(flash::BackwardKernelOp kernel) {
  StringRef pass = "flash-to-sm90";
  FailureOr<KernelConfig> config = sm80::backwardBaseConfig(kernel, pass);
  if (failed(config))
    return failure();
  // Br is the N of Sᵀ, dPᵀ and dQᵀ and the K of dV and dK: a multiple of
  // 16 (wgmma's k step, and whole 8 x 8 stmatrix pairs of dS).
  if (config->br % 16 || config->br < 32 || config->br > 128)
    return sm80::rejectBackwardConfig(
        kernel, pass,
        "Br = " + Twine(config->br) +
            " must be a multiple of 16 in [32, 128] for the wgmma backward (use "
            "--gemm=mma.sync for others)");
  if (config->bc % 64 || config->bc < 64 || config->bc > 256)
    return sm80::rejectBackwardConfig(
        kernel, pass,
        "Bc = " + Twine(config->bc) +
            " must be 64, 128, 192 or 256 for the wgmma backward (a warpgroup per 64 keys)");
  config->numWarps = config->bc / 16;
  config->numThreads = 32 * config->numWarps;
  return config;
}

LogicalResult sm90::lowerBackwardKernels(ModuleOp module, bool deterministic,
                                         bool stageAuxGrads, bool deferTurns,
                                         bool queryGradWriter, bool rotateQueryTiles,
                                         bool overlapAccumulates, int64_t mergeBarriers) {
  return sm80::lowerBackwardKernels(
      module, wgmmaBackwardConfig,
      [&](flash::BackwardKernelOp kernel, const KernelConfig &config,
          gpu::GPUModuleOp gpuModule) -> std::unique_ptr<sm80::BackwardEmitter> {
        auto make = [&](bool ordered) {
          return std::make_unique<WgmmaBackwardEmitter>(
              kernel, config, gpuModule, deterministic || ordered, stageAuxGrads, deferTurns,
              queryGradWriter || ((ordered || kernel.getQueryGradWriter()) && !deferTurns),
              rotateQueryTiles && !ordered, overlapAccumulates, mergeBarriers);
        };
        // ordered_query_grads: the deterministic order, with the writer;
        // query_grad_writer: the writer, in any order.
        // Without it (one warpgroup of keys, or no room for the staged dQ
        // tile: a tile from --bwd-tile or the tuning cache) the turns cost
        // 1.33-1.48x, so such a kernel adds dQ in any order.
        std::unique_ptr<WgmmaBackwardEmitter> emitter = make(kernel.getOrderedQueryGrads());
        if (kernel.getOrderedQueryGrads() && !deterministic && !emitter->writesQueryGrads())
          emitter = make(false);
        return emitter;
      });
}
