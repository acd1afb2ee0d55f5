//===- SM90Emitter.h - The Hopper (wgmma) kernel emitter --------*- C++ -*-===//
//
// flash-to-sm90 on the shared core (KernelEmitter: the kernel skeleton,
// scalars, regions, softmax, the key loop and its block skipping, cp.async
// copies, the stores) with what Hopper does differently: the shared-memory
// layout (128-byte swizzled panels), K/V (and Q) by TMA with mbarriers, the
// two GEMMs on wgmma.mma_async, P·V deferred under the next block's
// softmax, warp specialization with ping-pong, per-warpgroup key ranges and
// the persistent grid.
//
// A warpgroup (4 warps, 128 threads) owns 64 query rows; warp i of it owns
// rows 16i..16i+15 exactly as with 16 rows per warp on sm80, because the
// m64nNk16 accumulator of wgmma is, per warp, the m16n8 mma.sync layout
// repeated over N: register 4·nt + e holds row g + 8·(e >= 2), column
// 8·nt + 2t + e%2 (g = lane/4, t = lane%4).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_CONVERSION_FLASHTOSM90_SM90EMITTER_H
#define FLASHC_LIB_CONVERSION_FLASHTOSM90_SM90EMITTER_H

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

namespace flashc::sm90 {

/// A warp-specialized kernel over a paged cache: the producer threads that
/// loop over the key range (the whole warpgroup), all of which gather the
/// block a sequence ends in (with one warp ptxas spilled 300 bytes there).
constexpr int64_t kPagedProducerThreads = 128;

/// Splits the CTA at `b`'s insertion point (a kernel's top level): threads
/// from `consumerThreads` on give registers back down to
/// `producerRegisters` (setmaxnreg.dec), run `producerWork` and return;
/// the others go on with what that freed, at most 240 each. Caps the
/// kernel at 64K / `threads` registers (nvvm.maxnreg, which setmaxnreg
/// needs).
void splitWarpgroups(mlir::OpBuilder &b, mlir::Location loc, mlir::LLVM::LLVMFuncOp func,
                     mlir::Value tid, int64_t threads, int64_t consumerThreads,
                     int64_t producerRegisters, llvm::function_ref<void()> producerWork);

/// What the Hopper kernel adds to the shared configuration, and its
/// shared-memory layout: Q, the K buffers, the V buffers, then the
/// mbarriers, from a 1024-byte-aligned base (the kernel rounds its base up:
/// +1024 bytes). Every tile is ceil(D/64) panels of rows x 128 bytes in the
/// 128-byte swizzle wgmma descriptors read.
struct HopperConfig : lowering::KernelConfig {
  /// K and V blocks arrive by TMA (cp.async.bulk.tensor) into the swizzled
  /// panels, described by two tensor maps passed as grid-constant kernel
  /// parameters, and complete on mbarriers after the tiles.
  bool kvTensorMaps = false;
  /// With kvTensorMaps: the P·V GEMM of key block j is issued after the
  /// Q·Kᵀ GEMM of block j + 1 and runs under block j + 1's softmax (FA3's
  /// intra-warpgroup overlap); V then has two buffers, so V(j + 1) can
  /// land while P·V(j) reads V(j).
  bool deferPV = false;
  /// Paged, --paged-last-block=tma: where SM90Emitter::zeroesPagedTail, the
  /// block a sequence ends in comes by TMA and its rows past the sequence
  /// are zeroed (else gathered).
  bool pagedLastBlockByTma = false;
  /// With deferPV: the last warpgroup is a producer (24 or 40 registers via
  /// setmaxnreg) that issues every K/V copy into two-slot rings guarded by
  /// full/empty mbarriers; the Br/64 warpgroups before it compute, with the
  /// registers the producer gave up.
  bool warpSpecialized = false;
  /// Warp-specialized with two or more consumer warpgroups: they take turns
  /// issuing their GEMMs (named barriers), so one's softmax runs under the
  /// others' GEMMs.
  bool pingPong = false;
  /// Warp-specialized: a persistent grid. Each CTA loops over query tiles,
  /// which its producer draws from a global tile counter (PersistentGrid.cpp:
  /// longest first under a mask, heads in groups whose K/V fit in L2) and
  /// hands to the consumers through shared memory; the producer also loads
  /// each tile's Q by TMA (a third tensor map) into a buffer with its own
  /// full/empty barriers, so it fetches the next tile's Q and K/V while the
  /// consumers finish the current one.
  bool persistent = false;

  int64_t panels() const { return (headDim + 63) / 64; }
  /// Bytes per tile row.
  int64_t tileRowBytes() const { return panels() * 128; }
  int64_t qSmemOffset() const { return 0; }
  int64_t kSmemOffset() const { return br * tileRowBytes(); }
  int64_t vSmemOffset() const { return kSmemOffset() + keyBuffers() * bc * tileRowBytes(); }
  int64_t keyBuffers() const { return warpSpecialized ? 2 : 1; }
  int64_t valueBuffers() const { return deferPV || warpSpecialized ? 2 : 1; }
  /// Threads that compute (all but the producer warpgroup).
  int64_t consumerThreads() const { return warpSpecialized ? numThreads - 128 : numThreads; }
  /// mbarriers: with TMA one per K/V buffer; warp-specialized also one
  /// "empty" barrier per buffer; persistent also Q's full and empty ones.
  int64_t barrierCount() const {
    if (!kvTensorMaps)
      return 0;
    return (keyBuffers() + valueBuffers()) * (warpSpecialized ? 2 : 1) + (persistent ? 2 : 0);
  }
  int64_t valueBufferBytes() const { return bc * tileRowBytes(); }
  int64_t barrierSmemOffset() const {
    return vSmemOffset() + valueBuffers() * valueBufferBytes();
  }
  /// Persistent: two i32 slots after the barriers, where the producer
  /// writes the tile of each even and odd tile iteration.
  int64_t tileSlotsSmemOffset() const { return barrierSmemOffset() + 8 * barrierCount(); }
  int64_t sharedBytes() const { return tileSlotsSmemOffset() + (persistent ? 8 : 0) + 1024; }
  /// CUtensorMap kernel arguments: k and v with TMA, q too when persistent.
  int64_t tensorMaps() const { return kvTensorMaps ? (persistent ? 3 : 2) : 0; }
};

class SM90Emitter : public lowering::KernelEmitter {
public:
  SM90Emitter(flash::KernelOp kernel, const HopperConfig &hopper,
              mlir::gpu::GPUModuleOp gpuModule)
      : KernelEmitter(kernel, hopper, gpuModule), hopper(hopper) {}

  llvm::StringRef passName() const override { return "flash-to-sm90"; }
  bool storesWide() const override { return true; }
  int64_t dynamicSharedBytes() const override { return hopper.sharedBytes(); }
  bool persistentGrid() const override { return hopper.persistent; }
  /// One warpgroup up to D = 64 whose mask reads aux tensors at the key
  /// (packed documents) and that has no score mod: 128 registers, so four
  /// CTAs share an SM as in the dense kernels (136 registers gave three).
  /// ptxas then spills 8 bytes in the document kernel; on the H100 it
  /// measured 1.16x (N = 32k) and 1.15x (16k) faster, the same at 8k
  /// (bench/results/2026-12-06h-h100-document-loads).
  std::optional<int64_t> registerCap() override;

  // TensorMemoryAccess.cpp: the CUtensorMap arguments (k and v with TMA; q
  // too on a persistent grid), grid-constant byval parameters.
  void appendTargetArguments(llvm::SmallVectorImpl<mlir::Type> &types) override;
  void annotateTargetArguments(unsigned first) override;
  void bindTargetArguments(mlir::ValueRange arguments) override;
  int64_t tensorMapArguments() const override { return hopper.tensorMaps(); }

  // SharedMemory.cpp
  void emitSharedMemoryLayout() override;
  mlir::Value sharedChunkOffset(mlir::Value row, mlir::Value chunk, int64_t rows) override;
  std::optional<int64_t> sharedRowStepBytes(int64_t rowStep) override;
  void waitForCopies(int64_t pendingGroups) override;

  // TensorMemoryAccess.cpp (K and V by TMA when hopper.kvTensorMaps).
  void issueKVCopy(flash::LoadKVOp op, mlir::Value position, mlir::Value block) override;
  void waitForKVBlock(flash::KVOperand operand) override;
  void skipKVBlock(mlir::Value next, mlir::Value upper) override;
  bool acquireQueryBeforeLoop() override {
    return hopper.kvTensorMaps || KernelEmitter::acquireQueryBeforeLoop();
  }

  // Wgmma.cpp
  mlir::LogicalResult lowerQKDot(flash::QKDotOp op) override;
  mlir::LogicalResult lowerAccumulate(mlir::Operation *op, mlir::Value acc, mlir::Value alpha,
                                      mlir::Value probs, mlir::Value value) override;

  // DeferredAccumulate.cpp (hopper.deferPV)
  bool defersAccumulate(mlir::scf::ForOp loop, flash::MaskOp skipMask) override;
  void startDeferredCopies() override;
  // WarpSpecialization.cpp (hopper.warpSpecialized)
  mlir::LogicalResult enterKeyLoop(mlir::scf::ForOp loop,
                                   const lowering::KVPipeline &state) override;
  llvm::SmallVector<mlir::Value> deferredState() override;
  void setDeferredState(mlir::ValueRange values) override;
  mlir::LogicalResult finishDeferredAccumulate(mlir::scf::ForOp loop,
                                               mlir::ValueRange results) override;
  mlir::LogicalResult acquireKV(mlir::Operation *user, const lowering::TileValue &tile) override;
  // WarpgroupKeyRange.cpp (warp-specialized, masks with row bands)
  std::pair<mlir::Value, mlir::Value> threadKeyRange(flash::MaskOp skipMask,
                                                     mlir::scf::ForOp loop, mlir::Value lower,
                                                     mlir::Value upper) override;

private:
  HopperConfig hopper;
  /// With kvTensorMaps: the CUtensorMaps of K and V (generic pointers to
  /// the parameters); persistent: of Q too.
  mlir::Value qTensorMap, kTensorMap, vTensorMap;

  /// Shared-space byte addresses (i64) of the Q tile of this thread's
  /// warpgroup, of the K and of the V buffer.
  mlir::Value queryAddress, keyAddress, valueAddress;
  /// Second buffers (V with deferPV; K and V when warp-specialized) follow
  /// the first: kvSlot offsets the address and the barriers.
  /// With kvTensorMaps: the mbarriers the K and V copies complete on
  /// (32-bit shared addresses) and "this thread issues the copies".
  mlir::Value keyBarrier, valueBarrier, isCopyThread;
  /// Warp-specialized: the barriers consumers release the first K and V
  /// buffers on.
  mlir::Value keyEmpty, valueEmpty;

  /// One K or V buffer as seen for one key block: its shared address (i64),
  /// the mbarrier its copy completes on, the one consumers release it on
  /// (warp-specialized only) and the parity of the block's phase.
  struct Slot {
    mlir::Value address, full, empty, parity;
  };
  /// The K or V buffer of the block `ordinal` blocks after the loop's
  /// first. Two buffers (V with deferPV; K and V when warp-specialized):
  /// buffer o mod 2, phase o / 2 mod 2, so for o = -1 the parity is 1, which
  /// a fresh barrier reports complete at once. One buffer: phase o mod 2.
  Slot kvSlot(flash::KVOperand operand, mlir::Value ordinal);
  /// This thread arrives once on the mbarrier `barrier`: every consumer
  /// thread releases a slot (or Q) with it once its warpgroup's GEMMs no
  /// longer read the buffer; a skipped block completes V's phase with it.
  void arriveOn(mlir::Value barrier);
  /// One thread: arms `barrier` with the block's bytes and copies K or V
  /// block `keyTile` of `op`'s (batch, kv head) into the panels at `address`.
  void issueTensorCopy(flash::LoadKVOp op, mlir::Value keyTile, mlir::Value address,
                       mlir::Value barrier);
  /// One thread: arms `barrier` with the bytes of a rows x D box and copies
  /// rows firstRow.. of (batch, head) of the tensor `map` describes into the
  /// panels at `address` (i64 shared address).
  void issueBoxCopy(mlir::Value map, mlir::Value firstRow, mlir::Value head, mlir::Value batch,
                    int64_t rows, mlir::Value address, mlir::Value barrier);
  /// A box's first row and batch coordinate: `firstRow` and `batch`, or for
  /// packed varlen rows (`rowStart`, i64, set) rowStart + firstRow in batch 0.
  std::pair<mlir::Value, mlir::Value> boxRowAndBatch(mlir::Value firstRow, mlir::Value batch,
                                                     mlir::Value rowStart);
  /// This thread arrives on `barrier` and makes its phase wait for `bytes`
  /// more (mbarrier.arrive.expect_tx).
  void armForBytes(mlir::Value barrier, int64_t bytes);
  /// One TMA box of the 4-d tensor `tensorMap` (i64) describes, at
  /// `coordinates` (column, row, head, batch or page), into the shared
  /// address `destination` (i32), completing its bytes on `barrier`.
  void copyBox(mlir::Value tensorMap, mlir::Value destination,
               llvm::ArrayRef<mlir::Value> coordinates, mlir::Value barrier);
  /// One thread, paged cache: arms `barrier` with the block's bytes and
  /// copies key block `keyTile` of (batch, head) from its pages of the
  /// cache `map` describes: one box per page, or the block's rows of its
  /// page.
  void issuePagedBoxCopies(mlir::Value map, mlir::Value keyTile, mlir::Value head,
                           mlir::Value batch, mlir::Value address, mlir::Value barrier);
  /// The cache page of entry `entry` of a sequence's `tableRow`, or the
  /// page past the last (TMA fills it with zeros) for an entry outside the
  /// cache or, where `used` (i1) is given, one it says is not used.
  mlir::Value pageIndexAt(mlir::Value tableRow, mlir::Value entry, mlir::Value used);
  /// issuePagedBoxCopies where zeroesPagedTail, by warp 0: lane 0 arms
  /// `barrier`, lane l < Bc / page copies box l (32-bit shared
  /// `destination`, the sequence's `tableRow`).
  void issuePagedBoxesByLane(mlir::Value tensorMap, mlir::Value destination,
                             mlir::Value tableRow, mlir::Value firstKey, mlir::Value head,
                             mlir::Value barrier);
  /// Every thread (the producer warpgroup's when warp-specialized), paged
  /// cache without zeroesPagedTail: the block a sequence ends in, gathered
  /// by cp.async into `slot` with zeros past the sequence; each thread's
  /// arrival on the slot's full barrier comes when its copies have landed.
  void gatherLastPagedBlock(flash::LoadKVOp op, mlir::Value block, const Slot &slot);
  /// Whether key block `block` is the one its sequence ends in (it reaches
  /// past keyLen): a paged cache gathers it instead of TMA boxes, or zeroes
  /// its rows past the sequence (zeroesPagedTail).
  mlir::Value endsSequence(mlir::Value block);
  /// --paged-last-block=tma, a paged kernel without a producer warpgroup
  /// that does not defer P·V (one warpgroup, or more with
  /// --warp-specialize=off): the block a sequence ends in comes by TMA boxes like
  /// every other (pages past the sequence: zeros), and after the wait for
  /// it the threads zero its rows past the sequence (zeroPagedTail), whose
  /// last page's stale rows could be NaN (0 · NaN would poison P·V). No
  /// gather in the key loop: 20-40 registers fewer (ptxas, D = 64).
  bool zeroesPagedTail() const;
  /// Where `block` ends its sequence: zeroes the rows of its `operand`
  /// buffer past keyLen (generic stores, fenced for wgmma's async proxy;
  /// the caller synchronizes the CTA).
  void zeroPagedTail(flash::KVOperand operand, mlir::Value block);
  /// Arrivals a K/V full barrier expects per phase: one (the copy thread's
  /// arrive.expect_tx), or one per thread of a paged kernel that gathers
  /// the block a sequence ends in (every producer thread when
  /// warp-specialized; a one-warpgroup kernel that defers P·V).
  int64_t fullBarrierArrivals() const;
  /// The copy thread, after its own arrival on a full barrier: the other
  /// threads' arrivals in a paged kernel that is not warp-specialized and
  /// gathers (one counted arrive), nothing otherwise.
  void arriveForEveryThread(mlir::Value barrier);
  /// Warp-specialized: the producer's loop over the key range (one thread;
  /// over a paged cache the warpgroup, kPagedProducerThreads).
  void emitProducerLoop(const lowering::KVPipeline &state);
  /// The loop of emitProducerLoop, in the threads that issue the copies.
  void emitKeyBlockCopies(const lowering::KVPipeline &state);
  /// The producer's copy of `load`'s block `block` into `slot`: the TMA
  /// copy from its first thread, or over a paged cache the warpgroup's gather
  /// of the block a sequence ends in (gatherLastPagedBlock).
  void issueProducerCopy(flash::LoadKVOp load, mlir::Value block, const Slot &slot);
  /// Branches the CTA into the producer warpgroup (setmaxnreg.dec, then
  /// `producer` emits its work, then it returns) and the consumers
  /// (setmaxnreg.inc); returns with the insertion point in the consumers'
  /// block.
  void splitWarpgroups(llvm::function_ref<void()> producer);
  /// The registers the producer warpgroup keeps (setmaxnreg.dec).
  int64_t producerRegisters() const;

  // PersistentGrid.cpp (hopper.persistent)
  mlir::LogicalResult emitKernelBody() override;
  void issueQueryCopy(flash::LoadQOp op) override;
  void acquireQuery(int64_t pendingGroups) override;
  /// The schedule's constants, computed where needed from opaque copies of
  /// the sizes: query tiles per head, tiles in all, the (batch, head) pairs
  /// of one group (whose K/V the tiles of the group share in L2), all
  /// pairs, and H.
  struct TileSchedule {
    mlir::Value tilesPerHead, tiles, headsPerGroup, pairs, heads;
  };
  TileSchedule emitTileSchedule();
  /// Maps (b, h, qt) to schedule position `tile`: group by group, within a
  /// group query tile by query tile (the last first under a mask: longest
  /// first), its heads side by side.
  void mapTile(const TileSchedule &schedule, mlir::Value tile);
  /// Loops over this CTA's query tiles: maps (b, h, qt) to each and runs
  /// `work`, which returns the tile's key-block count. The producer draws
  /// each tile (the first is blockIdx.x, then gridDim.x + the global tile
  /// counter's next value) and writes it to the iteration's tile slot
  /// before Q's copy arms queryFull (kEndOfTiles once they have run out);
  /// the consumers wait for queryFull and read it; the end stops both. Carries the ordinal of
  /// the tile's first key block (ordinalBase) and the tile's index among
  /// this CTA's (tileIteration).
  mlir::LogicalResult forEachTile(bool isProducer,
                                  llvm::function_ref<mlir::FailureOr<mlir::Value>()> work);
  /// The producer after its last tile, in iteration `iteration`: completes
  /// queryFull's phase without a copy (the consumers read the end), then
  /// counts this CTA done; the last CTA resets the counter for the next
  /// launch on the stream.
  void finishTileSchedule(mlir::Value iteration);
  /// The 32-bit shared address of the tile slot of `iteration`.
  mlir::Value tileSlot(mlir::Value iteration);
  /// The producer's part of one tile: the scalars before the key loop, Q by
  /// TMA, the key range and its K/V copies; returns the block count.
  mlir::FailureOr<mlir::Value> emitProducerTile(mlir::scf::ForOp keyLoop);
  /// Persistent: the key-block ordinal the current tile starts at (every
  /// tile continues the K/V rings' phases) and the tile's index among this
  /// CTA's (the Q barriers' phase); null otherwise.
  mlir::Value ordinalBase, tileIteration;
  /// Persistent: the CTA's Q tile (i64 shared address) and its barriers.
  mlir::Value queryTileAddress, queryFull, queryEmpty;
  /// Persistent: the global tile counter (the last kernel argument: two
  /// u32, tiles drawn and CTAs done, zero before a launch and after it).
  mlir::Value tileCounter;
  /// Ping-pong: this consumer warpgroup's index; waits until the previous
  /// warpgroup has issued its GEMMs (named barrier 1 + w); lets the next one
  /// go (one tile: not after the last block of the last warpgroup, so every
  /// barrier ends complete; persistent: always, the next tile takes it).
  mlir::Value consumerWarpgroup;
  /// Persistent: the last warpgroup opens warpgroup 0's first turn once,
  /// before the CTA's first tile.
  void openGemmTurns();
  void waitForGemmTurn();
  void passGemmTurn(mlir::Value iteration);
  /// bar.arrive on named barrier `id` (i32) of two ping-pong warpgroups.
  void arriveAtTurnBarrier(mlir::Value id);

  /// The key blocks this consumer warpgroup computes, within the tile's
  /// [keyLoopBegin, keyLoopEnd) (the same range unless the mask's row bands
  /// narrow it): its first iteration has no pending P·V, its last block's
  /// P·V follows the loop.
  mlir::Value warpgroupBegin, warpgroupEnd;
  /// Whether threadKeyRange narrowed this loop per warpgroup (then blocks
  /// may follow the warpgroup's own, which finishDeferredAccumulate passes
  /// over).
  bool narrowedPerWarpgroup = false;
  /// For a tile block this warpgroup does not compute: waits for its GEMM
  /// turn and passes it on, so every consumer takes one turn per tile block.
  void takeEmptyTurn(mlir::Value block);
  /// For a tile block this warpgroup does not compute: waits until its K
  /// and V have landed (so the phase is this block's, not the previous
  /// one's in the same slot) and releases both slots.
  void releaseUnusedBlock(mlir::Value block);
  /// Both of the above for every block of [from, to), block by block.
  void passOverBlocks(mlir::Value from, mlir::Value to);

  /// The loop being lowered defers P·V (DeferredAccumulate.cpp): its fused
  /// accumulate and V load, and the packed P of the block whose P·V is
  /// pending (zeros before the first block).
  flash::RescaleAccumulateOp deferredOp;
  flash::LoadKVOp deferredValueLoad;
  llvm::SmallVector<mlir::Value> pendingProbs;

  /// Thread 0 initializes every mbarrier (one arrival per phase for the
  /// full ones, one per consumer thread for the empty ones); the CTA
  /// synchronizes before anyone waits on them.
  void initializeBarriers(mlir::Value sharedBase);
  /// Sets the barrier members from the 1024-aligned shared base (i64);
  /// returns how many barriers there are and, in `fullCount`, how many of
  /// them come first with one arrival per phase.
  int64_t assignBarriers(mlir::Value sharedBase, int64_t *fullCount = nullptr);
  /// Sets the shared addresses and barrier members from the base.
  void assignSharedAddresses(mlir::Value aligned);
  /// The 1024-aligned shared base (i64).
  mlir::Value sharedBase;
  /// For its lifetime, the shared addresses and barriers are recomputed from
  /// an opaque copy of the base at the insertion point: LLVM cannot hoist
  /// them, so a loop in the producer's few registers does not hold a dozen
  /// of them across its iterations. The kernel-level values come back after.
  class RematerializedAddresses {
  public:
    explicit RematerializedAddresses(SM90Emitter &emitter);
    ~RematerializedAddresses();

  private:
    SM90Emitter &emitter;
    std::tuple<mlir::Value, mlir::Value, mlir::Value, mlir::Value, mlir::Value, mlir::Value,
               mlir::Value, mlir::Value, mlir::Value, mlir::Value>
        saved;
  };
  /// After a wait for a K/V block of a paged cache: orders the cp.async
  /// writes of a gathered block (gatherLastPagedBlock) before wgmma's reads.
  void fenceGatheredBlock();
  /// Waits until the phase of `barrier` for the current key block is
  /// complete (parity: key blocks since the loop's first, mod 2).
  void waitForPhase(mlir::Value barrier);
  /// Waits until the phase of `barrier` with parity `parity` (i32 0/1) is
  /// complete.
  void waitForPhase(mlir::Value barrier, mlir::Value parity);
  /// Blocks from the loop's first to the one at `position` (i32; the loop
  /// has unit step), plus a persistent tile's ordinalBase: with a walk,
  /// visible blocks only.
  mlir::Value blockOrdinal(mlir::Value position);

  /// S = Q·Kᵀ with the K block at shared address `keyBuffer` (i64), issued
  /// and committed: the scores in flight.
  llvm::SmallVector<mlir::Value> issueQK(mlir::Value keyBuffer);
  /// The A fragments of P·V: the Br x Bc probabilities `probs`, packed to
  /// 16-bit pairs.
  llvm::SmallVector<mlir::Value> packProbabilities(mlir::Value probs);
  /// acc += P·V with the V block at shared address `valueBuffer` (i64),
  /// issued and committed: the accumulators in flight. `packedProbs` is
  /// replaced by the values the wgmmas read (after the fence): they must
  /// stay untouched until the group is waited for, so a deferred wait ties
  /// exactly those.
  llvm::SmallVector<mlir::Value> issuePV(llvm::ArrayRef<mlir::Value> acc,
                                         llvm::SmallVectorImpl<mlir::Value> &packedProbs,
                                         mlir::Value valueBuffer);
  /// Deferred: after Q·K(j)ᵀ is issued, P·V(j - 1) is issued (not in the
  /// loop's first iteration), then the scores are waited for; returns them.
  llvm::SmallVector<mlir::Value> issuePendingPV(llvm::ArrayRef<mlir::Value> scores);
  /// Deferred accumulate of block j: waits for P·V(j - 1), lets V(j + 1)
  /// replace V(j - 1), scales A by α and keeps P(j) pending.
  mlir::LogicalResult lowerDeferredAccumulate(mlir::Operation *op, mlir::Value acc,
                                              mlir::Value alpha, mlir::Value probs,
                                              mlir::Value value);
};

/// The fused accumulate of `loop` when the loop can defer its P·V by one
/// block (DeferredAccumulate.cpp): unit step, one Q·Kᵀ, only classified
/// masks, and the accumulator a loop-carried value updated by exactly one
/// rescale_accumulate with a V block of this loop. Null otherwise.
flash::RescaleAccumulateOp deferrableAccumulate(mlir::scf::ForOp loop);

} // namespace flashc::sm90

#endif // FLASHC_LIB_CONVERSION_FLASHTOSM90_SM90EMITTER_H
