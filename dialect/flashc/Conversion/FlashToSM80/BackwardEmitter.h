//===- BackwardEmitter.h - flash.backward_kernel on the GPU -----*- C++ -*-===//
//
// A flash.backward_kernel becomes three kernels sharing one ABI (documented
// in flashc/Target/NVPTX/EmitPTX.h):
//
//   <name>_bwd_preprocess  grid (ceil(N / Br), H, B), one thread per query
//                          row: Δ = rowsum(dO ∘ O) (the `preprocess`
//                          region), and the row's f32 dQ accumulator zeroed
//   <name>_bwd             grid (ceil(M / Bc), HKV, B): the `main` region
//   <name>_bwd_convert     grid (ceil(N / Br), H, B): dQ from its f32
//                          accumulator to the element type
//
// The main kernel (FlashAttention-2's transposed order): Bc/16 warps, warp w
// owning key rows 16w..16w+15 of the CTA's key block. K and V stay in shared
// memory; Q and dO come by cp.async, the next query tile's into a second
// stage while this one's GEMMs run (lowerFor). Every Br x Bc tile of
// the IR (S, P, dP, dS) is held *transposed*, as the m16n8 accumulator of
// Sᵀ = K·Qᵀ: register (nt·4 + e) of a thread is key row 16w + g + 8·(e >= 2),
// query column 8·nt + 2t + e%2 (g = lane/4, t = lane%4). So Pᵀ and dSᵀ are
// already the A operands of dV += Pᵀ·dO and dK += dSᵀ·Q (packed in pairs,
// as P is in the forward P·V), and dK, dV (Bc x D, f32) stay in registers
// for the whole kernel. Row statistics of the IR (LSE, Δ: one per query
// row) are per *column* here: register 2·nt + c is query 8·nt + 2t + c.
//
// dQ += dS·K needs every warp's keys for one query row: dSᵀ goes to shared
// memory (element type), and the warps split the Br x D product (A = dS by
// ldmatrix.trans of dSᵀ, B = K by ldmatrix.trans), adding it into the f32
// accumulator with red.global.add.f32 (the wgmma kernel stages the f32 tile
// in shared memory and adds it with one bulk reduce instead). LSE and Δ of
// a pipelined loop's tile come by cp.async with its Q and dO.
//
// Above D = 128 dK and dV of a warp's keys do not fit in registers: the
// main kernel's grid is ceil(M / Bc) · S CTAs along x (S column slices of
// D, config::backwardColumnSlices), CTA x owning key block x / S and
// columns [s · D/S, (s + 1) · D/S) of dK, dV and dQ, s = x mod S. Each
// computes Sᵀ and dPᵀ over the whole of D (K, V, Q and dO are copied
// whole); only slice 0 adds aux gradients. The dQ accumulator is then laid
// out [B, H, S, N, D/S], so a query tile's rows of one slice stay one
// contiguous range (the wgmma kernel's bulk reduce).
//
// That is the mma.sync kernel. flash-to-sm90 derives its wgmma kernel from
// this class (FlashToSM90/BackwardWgmma.cpp): a warpgroup's m64nN
// accumulator is, per warp, the same m16n8 layout repeated over N, so the
// walk, the copies, the element-wise ops and the stores are shared; only the
// shared-memory layout and the GEMMs (the target hooks below) differ.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONVERSION_FLASHTOSM80_BACKWARDEMITTER_H
#define FLASHC_CONVERSION_FLASHTOSM80_BACKWARDEMITTER_H

#include "flashc/Conversion/FlashToNVVM/EmitterCore.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <array>
#include <functional>
#include <memory>
#include <optional>

namespace flashc::sm80 {

/// Shared memory of the main kernel: K and V (Bc rows), then `stages`
/// copies of Q and dO (Br rows each: the query loop prefetches the next
/// tile's into the other stage), rows of D + 8 elements (the padding of the
/// forward's layout: the 8 row addresses of an ldmatrix hit 8 distinct bank
/// groups), then dSᵀ (Bc rows of Br + 8 elements).
struct BackwardLayout {
  explicit BackwardLayout(const lowering::KernelConfig &config,
                          int64_t stages = 1)
      : config(config), stages(stages) {}
  int64_t rowBytes() const { return (config.headDim + 8) * 2; }
  int64_t scoreRowBytes() const { return (config.br + 8) * 2; }
  int64_t keyOffset() const { return 0; }
  int64_t valueOffset() const { return config.bc * rowBytes(); }
  int64_t queryOffset() const { return 2 * config.bc * rowBytes(); }
  int64_t outputGradOffset() const {
    return queryOffset() + config.br * rowBytes();
  }
  /// From a Q or dO buffer to the same buffer of the next stage.
  int64_t stageBytes() const { return 2 * config.br * rowBytes(); }
  int64_t scoreGradOffset() const {
    return queryOffset() + stages * stageBytes();
  }
  int64_t sharedBytes() const {
    return scoreGradOffset() + config.bc * scoreRowBytes();
  }

  const lowering::KernelConfig &config;
  int64_t stages;
};

/// The three kernels of a backward pass.
enum class BackwardStage { Preprocess, Main, Convert };

/// What one thread holds of a value of the backward IR.
struct BackwardValue {
  enum class Kind {
    Scores,  // Br x Bc f32, transposed: (Br/8)·4 registers
    KeyAcc,  // Bc x D f32 (dK, dV): (D/8)·4 registers, key rows as Scores
    Columns, // Br f32 (LSE, Δ): (Br/8)·2 registers
    Shared,  // a tile in shared memory (Q, dO: Br rows; K, V: Bc rows)
  };
  Kind kind = Kind::Scores;
  llvm::SmallVector<mlir::Value> regs;
  mlir::Value smem;     // Shared: its base
  bool keyRows = false; // Shared: K or V (else Q or dO)
  /// Columns without registers: loaded column by column where used (from
  /// shared memory when the loop prefetches them, prefetchedStatBuffers).
  flash::LoadRowStatOp rowStat;
};

class BackwardEmitter : public lowering::EmitterCore {
public:
  BackwardEmitter(flash::BackwardKernelOp kernel,
                  const lowering::KernelConfig &config,
                  mlir::gpu::GPUModuleOp gpuModule, llvm::StringRef pass,
                  bool deterministic = false, bool stageAuxGrads = false);

  llvm::StringRef passName() const override { return pass; }
  /// The tensor-core instructions of the main kernel (its #flash.launch).
  virtual flash::GemmKind gemmKind() const { return flash::GemmKind::MmaSync; }
  /// Emits the llvm.func of `stage` (errors are reported on the kernel).
  mlir::LogicalResult emit(BackwardStage stage);
  /// The #flash.launch of `stage` (null, with an error, when inconsistent).
  flash::LaunchAttr launchAttr(BackwardStage stage);
  static std::string functionName(flash::BackwardKernelOp kernel,
                                  BackwardStage stage);
  mlir::LLVM::LLVMFuncOp getFunc() { return func; }

  /// The threads that run `stage`'s body (the main kernel's walk, copies
  /// and GEMMs).
  int64_t threadsOf(BackwardStage stage) const;
  /// Its block size: the body's threads and any beside them.
  int64_t launchThreadsOf(BackwardStage stage) const;
  /// Copies of the Q and dO buffers: two (the next query tile's copies
  /// overlap this one's GEMMs) where they fit in shared memory, else one.
  int64_t queryStages() const;
  int64_t sharedBytesOf(BackwardStage stage) const;

  // EmitterCore: the padded layout's copies.
  mlir::Value sharedChunkOffset(mlir::Value row, mlir::Value chunk,
                                int64_t rows) override;
  std::optional<int64_t> sharedRowStepBytes(int64_t rowStep) override;
  mlir::LogicalResult lowerRegionEffect(mlir::Operation *op) override;

protected:
  // Target hooks: mma.sync here (BackwardGemms.cpp), wgmma in flash-to-sm90.
  /// Main kernel: sets smemK, smemV, smemQ, smemDO and smemDS (and what the
  /// GEMMs precompute from them).
  virtual void assignSharedBuffers();
  /// The main kernel's layout with `stages` copies of the Q and dO buffers.
  virtual int64_t mainSharedBytes(int64_t stages) const;
  /// From a Q or dO buffer to the same buffer of the next stage.
  virtual int64_t queryStageBytes() const;
  /// Issued by every thread after its shared-memory writes (copies landed,
  /// dSᵀ stored), before the CTA barrier that publishes them to the GEMMs.
  virtual void fenceSharedWrites() {}
  /// Sᵀ or dPᵀ (unscaled, Scores layout) = X·Yᵀ with X the Bc-row tile at
  /// `keyRows` (K, V) and Y the Br-row tile at `queryRows` (Q, dO), perhaps
  /// still in flight (here computed at once).
  virtual llvm::SmallVector<mlir::Value>
  issueTransposedProduct(mlir::Value keyRows, mlir::Value queryRows);
  /// The product's registers readable, with the `laterProducts` products
  /// issued after it still in flight.
  virtual llvm::SmallVector<mlir::Value>
  completeTransposedProduct(llvm::ArrayRef<mlir::Value> inFlight,
                            int64_t laterProducts) {
    return llvm::SmallVector<mlir::Value>(inFlight);
  }
  /// `acc` (KeyAcc layout) + Xᵀ·Y with X the Scores registers `scores`
  /// (Pᵀ, dSᵀ) and Y the Br-row tile at `queryRows` (dO, Q).
  virtual llvm::SmallVector<mlir::Value>
  accumulateProduct(llvm::ArrayRef<mlir::Value> acc,
                    llvm::ArrayRef<mlir::Value> scores, mlir::Value queryRows);
  /// accumulateProduct's product issued only: the registers it returns
  /// (the accumulators first, then what the product reads) are in flight
  /// until awaitProducts ties them. Here computed at once.
  virtual llvm::SmallVector<mlir::Value>
  issueAccumulate(llvm::ArrayRef<mlir::Value> acc, llvm::ArrayRef<mlir::Value> scores,
                  mlir::Value queryRows) {
    return accumulateProduct(acc, scores, queryRows);
  }
  /// `inFlight` readable once at most `pending` of the products issued
  /// last remain in flight.
  virtual llvm::SmallVector<mlir::Value> awaitProducts(int64_t pending,
                                                      llvm::ArrayRef<mlir::Value> inFlight) {
    return llvm::SmallVector<mlir::Value>(inFlight);
  }
  /// Writes the Scores registers `scoreGrads` (dSᵀ) to smemDS.
  virtual void storeScoreGrads(llvm::ArrayRef<mlir::Value> scoreGrads);
  /// After the barrier that publishes dSᵀ: adds `scale`·dS·K (the key block
  /// at `keys`) into the f32 accumulator of query tile `queryTile`, whose
  /// block (this CTA's slice of it) starts at element `accumTile` of
  /// dq_accum. `turnLock` (deterministic
  /// and addsQueryGradsFromOneThread only, else null): the tile's
  /// semaphore, which thread 0 waits for right before its add and passes on
  /// after it (with deferred turns, during the next tile:
  /// settleDeferredTurns).
  virtual void addQueryGrads(mlir::Value keys, mlir::Value queryTile,
                             mlir::Value accumTile, mlir::Value scale,
                             mlir::Value turnLock);
  /// Before the barrier that publishes dSᵀ (after which threads overwrite
  /// what the previous tile's dQ adds read): those reads are done. True
  /// where that wait was itself a barrier of every body thread (after
  /// their dSᵀ stores), so the one that publishes dSᵀ is not needed.
  virtual bool awaitQueryGradReads() { return false; }
  /// Before the CTA exits: every dQ add this CTA issued is done.
  virtual void drainQueryGrads() {}
  /// Deterministic mode, before the fence that passes the turn on: the
  /// tile's dQ adds are complete (atomics need nothing: the fence orders
  /// them).
  virtual void completeQueryGrads() {}
  /// Deterministic mode: whether thread 0 alone adds a tile's dQ (one
  /// bulk reduce). It then waits for the tile's turn once the tile is
  /// computed and staged, right before the reduce, and passes the turn on
  /// itself once the reduce is complete, without a CTA barrier.
  virtual bool addsQueryGradsFromOneThread() const { return false; }
  /// Deterministic mode: whether the first add into each query tile (the one
  /// that awaits turn 0) stores its dQ tile instead of adding it, so the
  /// preprocess leaves dq_accum unwritten and the conversion reads a tile
  /// no turn added (its semaphore still 0) as zeros.
  virtual bool firstAddStoresQueryGrads() const { return false; }
  /// Whether every dQ add must await the CTA's own turn (`awaitedTurn` is
  /// `turn`): the wgmma dQ writer then computes the turns itself
  /// (awaitsOwnTurnOnly); lowerQueryGradAdd refuses a tile that awaits
  /// another.
  virtual bool queryGradAddsAwaitOwnTurn() const { return false; }
  /// Deterministic mode with deferred turns (--defer-turns): thread 0 adds
  /// the tile it has staged but not added (once it is the tile's turn) and
  /// passes on every turn it owes, each once its add is complete.
  virtual void settleDeferredTurns() {}
  /// Main kernel: threads launched beside the body's (threadsOf), which
  /// splitBodyThreads sends elsewhere before the body starts.
  virtual int64_t auxiliaryThreads() const { return 0; }
  /// Main kernel, before the body: the auxiliary threads leave for their
  /// own work.
  virtual void splitBodyThreads() {}
  /// The barrier of the body's threads: barrier 0, or named barrier 1 over
  /// them where auxiliary threads run beside.
  void syncBodyThreads();

  flash::BackwardKernelOp kernel;
  std::string pass;
  /// Column slices of D (S above) and the columns of dK, dV and dQ one CTA
  /// owns.
  int64_t columnSlices = 1;
  int64_t gradColumns() const { return config.headDim / columnSlices; }
  /// The main kernel's column slice (i32); null when S = 1.
  mlir::Value columnSlice;
  /// `columnSlice` times `bytes` (i32), the offset of this CTA's columns in
  /// a buffer whose slices are `bytes` apart; null when S = 1.
  mlir::Value columnSliceOffset(int64_t bytes);
  /// Where aux gradient adds may happen: `predicate`, and (S > 1) slice 0.
  mlir::Value ownsAuxGrads(mlir::Value predicate);
  /// dq_accum, the f32 dQ the main kernel adds into, is ours to lay out:
  /// per (b, h, query tile) a block of Br x D floats (rows past N too),
  /// column after column, each column's rows in pairs (2p, 2p + 1) of which
  /// pair p lies in slot p ^ (4c & queryGradPairSwizzle()). The wgmma
  /// kernel's staged dQᵀ tile has that layout, so its stores are free of
  /// bank conflicts and one bulk reduce adds the whole tile; the dQ
  /// conversion undoes it. Column slice s is columns s·D/S.. of the block.
  /// Element (i64) of dq_accum where query tile `queryTile` of (b, h)
  /// starts, from slice `slice` (i32; null when S = 1) on.
  mlir::Value queryGradAccumTile(mlir::Value batch, mlir::Value head, mlir::Value queryTile,
                                 mlir::Value slice);
  /// (b·H + h)·tiles + qt (i32): query tile qt of (b, h) among all.
  mlir::Value queryTileIndex(mlir::Value batch, mlir::Value head, mlir::Value queryTile);
  /// Element (i32) of (row, column) of a tile inside its block (both i32,
  /// the column counted from the slice's first).
  mlir::Value queryGradAccumElement(mlir::Value row, mlir::Value column);
  /// The pair-index bits the column swizzles: bits 2-3 where Br % 32 == 0
  /// (a wgmma dQᵀ store of a warp covers two 128-byte wavefronts), bit 2
  /// where Br % 16 == 0, none otherwise (the pairs stay inside the column).
  int64_t queryGradPairSwizzle() const {
    return config.br % 32 == 0 ? 12 : config.br % 16 == 0 ? 4 : 0;
  }
  /// dQ adds in a fixed order (FlashAttention-3's deterministic backward):
  /// CTA x of a (kv_head, b) has turn r = x / S and takes the r-th key
  /// block from the last (shortest first under a causal or window mask);
  /// it adds into query tile (b, h, qt) once the tile's semaphore holds one
  /// past the last earlier turn whose key block sees the tile
  /// (turnBeforeTile; 0 if none), then sets it to r + 1. A tile a turn
  /// skips costs it nothing, and every wait is for a CTA that started
  /// before (lower blockIdx.x).
  bool deterministic = false;
  /// The main kernel's turn (i32), deterministic mode only.
  mlir::Value turn;
  /// Deterministic mode: the semaphore value the current query tile's dQ
  /// add waits for (i32; `turn` where every earlier turn adds or passes).
  mlir::Value awaitedTurn;
  /// Stage non-uniform aux gradient adds in shared memory (stagedAddsOf).
  bool stageAuxGrads = false;
  /// Without turns: key block k's walk over the query tiles starts k·Bc/Br
  /// tiles in (mod the walk's length) and wraps, so the CTAs of one head,
  /// which start together, add into different dQ tiles (lowerFor).
  bool rotatesQueryTiles = false;
  BackwardStage stage = BackwardStage::Main;

  // The ABI (BackwardKernels.cpp).
  mlir::Value qPtr, kPtr, vPtr, oPtr, outputGradPtr, lsePtr, deltaPtr,
      queryGradAccumPtr, queryGradLockPtr, queryGradPtr, keyGradPtr,
      valueGradPtr;
  // Strides (i64) of q, k, v, o, dO, dQ, dK, dV.
  enum StrideSet { QS, KS, VS, OS, DOS, DQS, DKS, DVS, kStrideSets };
  mlir::Value strides[kStrideSets][3];
  llvm::StringMap<mlir::Value> auxGradPointers;
  /// Deterministic mode: per aux tensor, i64 [1 + elements]: a flag (an
  /// add was not finite or left the range) and the gradient in units of
  /// kFixedPointUnit. Integer adds are exact, so any order gives the same
  /// bits; convert turns them into the f32 gradient (NaN where flagged).
  llvm::StringMap<mlir::Value> auxGradFixedPointers;
  static constexpr float kFixedPointUnit = 0x1p-32f;
  void emitFunction(llvm::StringRef name);

  // The two small kernels.
  mlir::LogicalResult emitPreprocess();
  mlir::LogicalResult emitConvert();
  /// Runs `body(name, index)` over [0, extra + elements) of every aux
  /// tensor the main kernel adds gradients into whose pointer in `pointers`
  /// is not null, spread over the whole grid of a small kernel.
  void forEachTensorGradElement(
      const llvm::StringMap<mlir::Value> &pointers, int64_t extra,
      llvm::function_ref<void(llvm::StringRef name, mlir::Value index)> body);
  /// Elements (i64) of aux tensor `name` at this launch's sizes.
  mlir::Value tensorElementCount(llvm::StringRef name);
  mlir::Value isNonNull(mlir::Value pointer);
  /// In the preprocess: zeroes the gradient (or, deterministic, its
  /// fixed-point accumulator) of every aux tensor the main kernel adds into.
  void zeroTensorGrads();
  /// In the convert kernel (deterministic): the f32 gradients from their
  /// fixed-point accumulators.
  void convertFixedPointGrads();

  // The main kernel: a walk over the main region.
  llvm::DenseMap<mlir::Value, BackwardValue> values;
  llvm::DenseSet<mlir::Operation *> loweredAhead;
  mlir::Value smemK, smemV, smemQ, smemDO, smemDS;
  /// Per-lane ldmatrix byte offsets (BackwardGemms.cpp).
  mlir::Value keyRowsA, queryRowsB, queryRowsTransB, keyRowsTransB,
      scoreGradTransA;
  /// cp.async copies were issued since the last wait.
  bool copiesPending = false;
  /// A barrier is due before the next Q/dO copy: GEMMs (of an earlier
  /// iteration) may still read the Q, dO and dSᵀ buffers.
  bool sharedReadSinceCopy = false;
  mlir::LogicalResult emitMain();
  mlir::LogicalResult lowerBlock(mlir::Block &block);
  mlir::LogicalResult lowerOp(mlir::Operation *op);
  mlir::LogicalResult lowerFor(mlir::scf::ForOp loop);
  /// The body of a query loop's iteration, after its prefetch; appends the
  /// lowered values it yields to `yielded`.
  mlir::LogicalResult lowerQueryTileBody(mlir::scf::ForOp loop,
                                         llvm::SmallVectorImpl<mlir::Value> &yielded);
  /// At the top of a query loop's iteration whose tile is in stage `parity`
  /// mod 2: points the prefetched copies at that stage, waits for the CTA
  /// (the previous tile's GEMMs read the other stage) and copies the next
  /// tile into the other one where it exists; `nextTile` (emitted after the
  /// barrier) gives that tile and whether it is copied.
  void prefetchIntoOtherStage(llvm::ArrayRef<mlir::Operation *> prefetch, mlir::Value parity,
                              llvm::function_ref<std::pair<mlir::Value, mlir::Value>()> nextTile);
  /// The query loop of a mask that reads a block summary, as a walk over
  /// the tiles whose `anyVisible` (its `visibleSlice` in the loop body)
  /// holds, from `lower` to `upper` (lowered bounds, unit step): an
  /// scf.while carrying the tile, its ordinal (the prefetch stage) and the
  /// loop's values.
  mlir::LogicalResult lowerVisibleWalk(mlir::scf::ForOp loop,
                                       llvm::ArrayRef<mlir::Operation *> visibleSlice,
                                       mlir::Value anyVisible, mlir::Value lower,
                                       mlir::Value upper);
  /// For its lifetime (one loop body), the thread coordinates, sizes and
  /// pointers are opaque copies made at the insertion point: what the body
  /// computes from them per element (indices, addresses) then depends on
  /// the loop, and LLVM cannot hoist dozens of such partial sums out of it
  /// and hold them, each in a register, across every iteration.
  class OpaqueLoopValues {
  public:
    explicit OpaqueLoopValues(BackwardEmitter &emitter);
    ~OpaqueLoopValues();

  private:
    BackwardEmitter &emitter;
    llvm::SmallVector<mlir::Value *> members;
    llvm::SmallVector<mlir::Value> saved;
  };
  /// Lowers the scalar slice of `fact` (in `loop`'s body) ahead of the body;
  /// null when it depends on more than the induction variable and values
  /// from outside.
  mlir::Value hoistFact(mlir::Value fact, mlir::scf::ForOp loop);
  /// Deterministic mode: whether `visibleSlice` (the classified mask's
  /// facts in `loop`'s body) and the loop's bounds take the key block from
  /// the kernel's key-tile argument alone, so that mapping it to another
  /// block gives that block's facts (turnBeforeTile applies).
  bool factsFollowKeyTile(mlir::scf::ForOp loop,
                          llvm::ArrayRef<mlir::Operation *> visibleSlice);
  /// Deterministic mode: whether every CTA that passes a query tile's turn
  /// on has added into the tile, i.e. no query-tile loop passes the turns
  /// of tiles it skips (its facts or bounds depend on more than the key
  /// tile: lowerFor's skipsPassTurns). Then the add that awaits turn 0 is
  /// the tile's first. Decided from the IR alone, so that the preprocess
  /// and conversion kernels agree with the main one.
  bool everyTurnAdds();
  /// Deterministic mode: whether every query tile's dQ add awaits the
  /// CTA's own turn (no query-tile loop has a classified mask whose facts
  /// search for the turn before the tile), so `awaitedTurn` is `turn`
  /// throughout. Decided from the IR alone, before the body is lowered.
  bool awaitsOwnTurnOnly();
  /// The CTA's key column: blockIdx.x over the column slices. The main
  /// kernel's key tile counts down from it in deterministic mode, where it
  /// is also the CTA's turn (which the dQ writer recomputes with it).
  mlir::Value ctaKeyColumn();
  /// --bwd-merge-barriers: 0 none; 1 the barrier that publishes dSᵀ is
  /// the dQ writer's staging-free barrier where that is one of every body
  /// thread; 2 also the barrier at a pipelined tile's start (before the
  /// next tile's copies) acquires this tile's copies, instead of a second
  /// barrier at the first GEMM; 3 also three stages of Q and dO where they
  /// fit, the tile after next copied once dQ is staged, the next tile's
  /// copies acquired at the dSᵀ barrier, and the tile-start barrier moved
  /// to right before the dSᵀ store (it orders the store behind every
  /// warpgroup's previous dQ product).
  int64_t mergeBarriers = 0;
  /// This tile's prefetched copies were acquired at its start
  /// (mergeBarriers >= 2) or at the previous tile's dSᵀ barrier (three
  /// stages): the body's acquireCopies has none to wait for.
  bool prefetchAcquired = false;
  /// Three stages (mergeBarriers >= 3): the copies of the tile after next,
  /// issued once dQ is staged (after the barrier that publishes dSᵀ).
  struct DeferredCopies {
    llvm::SmallVector<mlir::Operation *> copies;
    /// Lowers the tile after next's (tile, stage, whether copied).
    std::function<std::array<mlir::Value, 3>()> next;
  };
  std::optional<DeferredCopies> copiesAfterScoreGrads;
  /// Issues copiesAfterScoreGrads (if any). `acquireNext` (a skipped
  /// tile, which has no dSᵀ barrier): first waits for every copy in flight
  /// and syncs the body, and leaves copiesAfterScoreGrads to the visible
  /// tile's body; otherwise they are taken (the dQ add).
  void issueCopiesAfterScoreGrads(bool acquireNext);
  /// Whether the loop's body adds dQ once, outside any nested region.
  static bool addsQueryGradsOnce(mlir::scf::ForOp loop);
  /// Deterministic mode, for the query tile the loop's induction variable
  /// is mapped to: one past the turn of the nearest later key block whose
  /// `anyVisible` holds for the tile (the last earlier turn that adds into
  /// it), 0 if none; the key blocks are tested 32 at a time, one per lane.
  /// Null when the slice does not lower.
  mlir::Value turnBeforeTile(llvm::ArrayRef<mlir::Operation *> visibleSlice,
                             mlir::Value anyVisible);
  void flatten(mlir::ValueRange originals,
               llvm::SmallVectorImpl<mlir::Value> &out);
  mlir::LogicalResult mapFlattened(mlir::Operation *user,
                                   mlir::ValueRange originals,
                                   mlir::ValueRange lowered);
  int64_t registerCount(mlir::Type type) const;
  mlir::FailureOr<BackwardValue> zeroTile(mlir::arith::ConstantOp op);

  mlir::LogicalResult lowerTileCopy(mlir::Operation *op, mlir::Value base,
                                    StrideSet set, mlir::Value batch,
                                    mlir::Value head, mlir::Value tile,
                                    bool keyRows, mlir::Value smem);
  mlir::LogicalResult lowerRowStat(flash::LoadRowStatOp op);
  /// Column `column` of a Columns value (register 2·nt + c: query
  /// 8·nt + 2t + c), loaded here when it has no registers.
  mlir::Value columnValue(const BackwardValue &columns, int64_t column);
  /// Waits for the pending copies (cp.async.wait_group + bar.sync): all
  /// but the `groupsInFlight` most recent groups.
  void acquireCopies();
  /// Waits for all but the `inFlight` most recent commit groups, fences
  /// them for the async proxy and syncs the body: they are visible to
  /// every thread's GEMMs.
  void acquireCopiesLeaving(int64_t inFlight);
  /// Issues the cp.async copy of query tile `tile` (lowered) of the Br-row
  /// tensor at `base` (Q or dO) into `smem`: one commit group.
  void issueRowCopy(mlir::Value base, StrideSet set, mlir::Value batch,
                    mlir::Value head, mlir::Value tile, mlir::Value smem);

  /// What a Br-row copy (flash.load_q: Q, flash.load_rows: dO) reads and
  /// where its stage-0 buffer is.
  struct RowTensor {
    mlir::Value base;
    StrideSet set;
    mlir::Value smem;
  };
  RowTensor rowTensorOf(mlir::Operation *copy) const;
  /// Stage `stage` (i32) of the Q or dO buffer at `buffer`.
  mlir::Value stageBuffer(mlir::Value buffer, mlir::Value stage);

  // Software pipelining of the query loop (lowerFor).
  /// The Br-row copies (Q, dO) of `loop`'s body the loop prefetches: every
  /// one of its body's, when each copies the tile the induction variable
  /// names from a (b, h) defined before the loop, the step is 1 and two
  /// stages fit (queryStages); else none.
  llvm::SmallVector<mlir::Operation *> prefetchableCopies(mlir::scf::ForOp loop);
  /// Where `predicate` holds, issues `copies` of query tile `tile` into
  /// stage `stage` (i32) of their buffers; else commits as many empty groups.
  void issueRowCopies(llvm::ArrayRef<mlir::Operation *> copies, mlir::Value tile,
                      mlir::Value stage, mlir::Value predicate);
  /// In the body being lowered: the stage buffer each prefetched copy's
  /// tile is in.
  llvm::DenseMap<mlir::Operation *, mlir::Value> prefetched;
  /// The row statistics (flash.load_row_stat: LSE, Δ) the loop prefetches
  /// with its copies, in slot order: Br f32 per slot and stage, copied by
  /// 4-byte cp.async into the first copy's commit group.
  llvm::SmallVector<flash::LoadRowStatOp> prefetchedStats;
  /// In the body being lowered: where each prefetched statistic's tile is.
  llvm::DenseMap<mlir::Operation *, mlir::Value> prefetchedStatBuffers;
  /// Shared memory of the prefetched row statistics (two stages), after
  /// the target's layout (mainSharedBytes) and before the staged aux adds.
  mlir::Value smemRowStats;
  int64_t rowStatBytes(int64_t stages) const;
  /// Slot `slot`, stage `stage` (i32) of the row statistics.
  mlir::Value rowStatBuffer(int64_t slot, mlir::Value stage);
  /// cp.async of prefetched statistic `slot` of query tile `tile` into
  /// `buffer` (rows past N: zero filled; columnValue masks them).
  void issueRowStatCopy(flash::LoadRowStatOp op, mlir::Value tile, mlir::Value buffer);
  /// Commit groups the body's acquireCopies leaves in flight (the prefetch).
  int64_t groupsInFlight = 0;
  /// Whether dPᵀ is issued right behind Sᵀ (set once, from the tile and
  /// the kernel's aux gradient adds).
  bool pairsTransposedProducts = false;
  /// Whether the kernel adds aux gradients (flash.aux_grad_add).
  bool addsAuxGrads = false;
  /// Transposed products issued ahead of their op (dPᵀ behind Sᵀ).
  llvm::DenseMap<mlir::Operation *, llvm::SmallVector<mlir::Value>> productsInFlight;
  /// Whether dKᵀ and dVᵀ products stay in flight past their op (set by
  /// the target): dVᵀ = Pᵀ·dO is issued before dPᵀ is waited for (unless
  /// dPᵀ was issued beside Sᵀ) and runs under softmax_grad, dKᵀ = dSᵀ·Q
  /// under the dSᵀ store, the barrier and the dQ product. Waited for at
  /// the next accumulating product's issue, at (or right before) the dQ
  /// product's wait, and before any other op (settleAccumulates).
  bool overlapsAccumulates = false;
  /// An accumulating product in flight: `regs` (accumulators first,
  /// `accRegs` of them) become op's result once waited for.
  struct AccumulateInFlight {
    mlir::Value result;
    llvm::SmallVector<mlir::Value> regs;
    size_t accRegs;
  };
  /// Oldest first.
  llvm::SmallVector<AccumulateInFlight> accumulatesInFlight;
  /// Issues `op` (its operands lowered) and leaves it in flight.
  void issueAccumulateAhead(flash::AccumulateTransposedOp op);
  /// The accumulating product after `dot` (dPᵀ) whose operands are all
  /// lowered already (dVᵀ = Pᵀ·dO), if overlapsAccumulates; null if none.
  flash::AccumulateTransposedOp accumulateReadyAfter(mlir::Operation *dot);
  /// Waits until at most `keepNewest` accumulating products (the newest)
  /// remain in flight, no other product being in flight, and gives the
  /// others' ops their results.
  void settleAccumulates(int64_t keepNewest = 0);
  /// The registers of the `count` oldest accumulating products in flight,
  /// to be tied to a wait that completes them; defineSettled gives their
  /// ops the results from the wait's outputs (`tied`, the same order).
  llvm::SmallVector<mlir::Value> inFlightAccumulatorRegs(size_t count = SIZE_MAX) const;
  void defineSettled(llvm::ArrayRef<mlir::Value> tied, size_t count = SIZE_MAX);
  mlir::FailureOr<const BackwardValue *>
  lookup(mlir::Operation *user, mlir::Value value, BackwardValue::Kind kind);

  // Elementwise ops on transposed tiles.
  /// Global query / key index of register `index` of a Scores tile.
  mlir::Value queryOf(mlir::Value firstQuery, int64_t index);
  mlir::Value keyOf(mlir::Value firstKey, int64_t index);
  mlir::LogicalResult lowerElementRegion(mlir::Operation *op);
  mlir::LogicalResult lowerMaskKeyBounds(flash::MaskKeyBoundsOp op);
  mlir::LogicalResult lowerRecomputeProbs(flash::RecomputeProbsOp op);
  mlir::LogicalResult lowerSoftmaxGrad(flash::SoftmaxGradOp op);
  mlir::LogicalResult lowerScoreModGrad(flash::ScoreModGradOp op);
  /// Inside lowerScoreModGrad: whether this element's gradient is nonzero
  /// (aux gradient adds are predicated on it).
  mlir::Value elementLive;
  /// Aux gradient adds of the region being lowered whose element is the same
  /// over the tile: the running sum, the address and whether it is inside.
  struct UniformAdd {
    mlir::Value total, address, flag, valid;
  };
  llvm::DenseMap<mlir::Operation *, UniformAdd> uniformAdds;
  /// Whether `add` (in the region `body` of a flash.score_mod_grad) hits
  /// one element over the whole tile: its indices read only b and h.
  static bool isUniformAdd(flash::AuxGradAddOp add, mlir::Block &body);
  /// The other adds (a relative-position bias: the tile's elements on one
  /// diagonal share an entry) are summed per tile in shared memory when the
  /// tile's index range fits the staging slots, then flushed with one global
  /// add per entry instead of one per element; a tile whose range does not
  /// fit adds directly.
  llvm::SmallVector<flash::AuxGradAddOp> stagedAddsOf(flash::ScoreModGradOp op) const;
  /// Whether any score_mod_grad of the kernel stages an add (set once).
  bool hasStagedAdds() const { return stagesAuxGrads; }
  bool stagesAuxGrads = false;
  /// Staging: kStagingSlots 8-byte slots (f32 sums, or fixed-point i64 ones
  /// when deterministic), then per warp and staged add its (lowest,
  /// highest) index, past the target's buffers.
  static constexpr int64_t kStagingSlots = 1024, kMaxStagedAdds = 4;
  int64_t stagingBytes() const;
  mlir::Value stagingBase;
  enum class AuxAddMode { Direct, Bounds, Staged };
  AuxAddMode auxAddMode = AuxAddMode::Direct;
  struct StagedAdd {
    int64_t slot = 0, capacity = 0; // first slot, slots
    mlir::Value lowest, highest;    // i64: per thread, then per CTA
    mlir::Value fits;               // i1, uniform over the CTA
  };
  /// In the region's order: the stats slots and the emitted code follow it.
  llvm::MapVector<mlir::Operation *, StagedAdd> stagedAdds;
  /// The CTA's index range of every staged add (from the threads' bounds).
  void reduceStagedBounds();
  /// After the staged adds: every staged slot in range added to global
  /// memory once and reset to 0.
  void flushStagedAdds();
  mlir::Value shuffleXor64(mlir::Value value, int64_t laneMask);

  // GEMMs (BackwardGemms.cpp).
  void computeLaneOffsets();
  /// Sᵀ or dPᵀ = X·Yᵀ with X a Bc-row tile (K, V) and Y a Br-row tile (Q, dO).
  mlir::LogicalResult lowerTransposedDot(mlir::Operation *op,
                                         mlir::Value keyTile,
                                         mlir::Value rowTile, float scale);
  mlir::LogicalResult
  lowerAccumulateTransposed(flash::AccumulateTransposedOp op);
  mlir::LogicalResult lowerQueryGradAdd(flash::QueryGradAddOp op);
  mlir::LogicalResult lowerStoreKeyGrads(flash::StoreKeyGradsOp op);
  /// Deterministic mode: the semaphore of query tile (b, h, qt) and column
  /// slice `slice` (null: this CTA's, or 0 when S = 1); thread 0
  /// waits until it reads `awaitedTurn`; thread 0 sets it to the next
  /// turn (release; the caller has fenced and synchronized).
  mlir::Value lockAddress(mlir::Value batch, mlir::Value head,
                          mlir::Value queryTile, mlir::Value slice);
  void waitForTurn(mlir::Value address);
  void passTurn(mlir::Value address);
  /// waitForTurn's loop, for a caller already on one thread alone: waits
  /// until the semaphore at `address` reads `awaited`.
  void spinForTurn(mlir::Value address, mlir::Value awaited);
  /// red.global.add.f32 [address], value where `predicate` (i1) holds.
  void atomicAdd(mlir::Value address, mlir::Value value, mlir::Value predicate);
  /// Adds `value` to an aux gradient where `predicate` holds: red.add.f32 at
  /// `address`, or (deterministic) an exact i64 add of value / unit at the
  /// fixed-point element `address`, setting `flag` when the value is not
  /// finite or the sum overflows.
  void addTensorGrad(mlir::Value address, mlir::Value flag, mlir::Value value,
                     mlir::Value predicate);
  /// The same into a staging slot (shared memory): red.shared.add.f32, or
  /// the fixed-point i64 add.
  void stageTensorGrad(mlir::Value slot, mlir::Value flag, mlir::Value value,
                       mlir::Value predicate);
  /// Deterministic: an exact i64 add into `address` in `space` ("global"
  /// or "shared") of `addend`, an f32 value (converted to units of
  /// kFixedPointUnit; out of ±2^30 or not finite sets `flag`) or an i64 sum
  /// already in units; a signed overflow sets `flag` too.
  void addFixedPoint(llvm::StringRef space, mlir::Value address, mlir::Value flag,
                     mlir::Value addend, mlir::Value predicate);
};

/// The checks every backward kernel shares (element type, head dim), with
/// Br, Bc and D from the kernel's tile; the target sets the rest.
mlir::FailureOr<lowering::KernelConfig>
backwardBaseConfig(flash::BackwardKernelOp kernel, llvm::StringRef pass);

/// Reports `message` on `kernel`, prefixed by `pass`, and fails.
mlir::FailureOr<lowering::KernelConfig>
rejectBackwardConfig(flash::BackwardKernelOp kernel, llvm::StringRef pass,
                     const llvm::Twine &message);

/// The kernel's shape on the target (null with an error when unsupported;
/// the shared-memory size is checked by lowerBackwardKernels).
using BackwardConfigFn =
    llvm::function_ref<mlir::FailureOr<lowering::KernelConfig>(
        flash::BackwardKernelOp)>;
/// A fresh emitter for one of the kernel's three stages.
using BackwardEmitterFn =
    llvm::function_ref<std::unique_ptr<BackwardEmitter>(
        flash::BackwardKernelOp, const lowering::KernelConfig &,
        mlir::gpu::GPUModuleOp)>;
/// Lowers every flash.backward_kernel of `module` to its three kernels
/// (erasing it) and records their #flash.launch facts.
mlir::LogicalResult lowerBackwardKernels(mlir::ModuleOp module,
                                         BackwardConfigFn chooseConfig,
                                         BackwardEmitterFn makeEmitter);

} // namespace flashc::sm80

#endif // FLASHC_CONVERSION_FLASHTOSM80_BACKWARDEMITTER_H
