//===- KernelEmitter.h - Per-thread code for one flash.kernel ---*- C++ -*-===//
//
// The shared core of the GPU lowerings (flash-to-sm80, flash-to-sm90). They
// do not rewrite flash ops one by one into equivalent tensor-level ops: a
// flash tile lives in the registers of the CTA's threads, laid out as
// m16n8 accumulator fragments (mma.sync's, which is also what each warp
// holds of a wgmma m64nN accumulator), so a lowering is a walk over the
// (small, structured) kernel body that maps every SSA value to what one
// thread holds of it:
//
//   - a scalar (i32 for `index`, i32/f32/i1 otherwise)  -> one Value
//   - an f32 Br x C tile (scores, probabilities, A)      -> R/16 · C/8 · 4 f32,
//       register (mb·C/8 + nt)·4 + e: element e of n-tile nt of row block
//       mb, at row 16·mb + g + 8·(e >= 2), column 8·nt + 2t + e%2 of the
//       warp's R rows (R = rows per warp, g = lane/4, t = lane%4)
//   - an f32 row vector (m, l, α, LSE)                   -> R/16 · 2 f32
//       (register 2·mb + h: row 16·mb + g + 8·h)
//   - the Q tile, a K or V block                          -> shared memory,
//       filled by cp.async here (a backend may copy them otherwise) and read
//       where a GEMM consumes it.
//
// KernelEmitter owns the kernel skeleton and ABI, the walk, scalar ops,
// score-mod and mask regions, the online softmax, the key loop with its
// K/V copy schedule and block skipping, cp.async copies and the stores
// (KernelEmitter.cpp, KeyLoop.cpp, LoadStore.cpp, Elementwise.cpp,
// Softmax.cpp, GemmOperands.cpp); LaunchInfo.cpp checks what every backend
// supports, writes each kernel's #flash.launch and drives a lowering. A
// backend (FlashToSM80: mma.sync; FlashToSM90: wgmma, TMA, warp
// specialization) subclasses it for its shared-memory layout, its GEMMs and
// whatever it adds to the key loop.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONVERSION_FLASHTONVVM_KERNELEMITTER_H
#define FLASHC_CONVERSION_FLASHTONVVM_KERNELEMITTER_H

#include "flashc/Conversion/FlashToNVVM/EmitterCore.h"

#include "llvm/ADT/DenseSet.h"

#include <array>
#include <memory>
#include <optional>

namespace flashc::lowering {

/// What one thread holds of a flash tile value.
struct TileValue {
  enum class Kind { Accum, Row, Query, KeyValue };
  Kind kind = Kind::Accum;
  /// Accum: rowBlocks · (cols / 8) · 4 f32 values; Row: rowBlocks · 2.
  llvm::SmallVector<mlir::Value> regs;
  int64_t cols = 0;
  /// KeyValue: which operand; the load op it came from.
  flash::KVOperand operand = flash::KVOperand::Key;
  mlir::Operation *source = nullptr;
};

/// The software pipeline of one scf.for that streams K and V blocks.
struct KVPipeline {
  flash::LoadKVOp keyLoad, valueLoad; // valueLoad may be null
  mlir::Value inductionVar, lowerBound, upperBound, step; // lowered (i32)
  /// The key block of this iteration (i32): the induction variable, unless
  /// the loop walks its visible blocks (KernelEmitter::walk), whose
  /// induction variable is a position; then also the next visible block.
  mlir::Value block, nextVisibleBlock;
  /// The block at `nextPosition`, the position after this iteration's.
  mlir::Value nextBlock(mlir::Value nextPosition) const {
    return nextVisibleBlock ? nextVisibleBlock : nextPosition;
  }
  bool keyAcquired = false, valueAcquired = false;
};

class KernelEmitter : public EmitterCore {
public:
  KernelEmitter(flash::KernelOp kernel, const KernelConfig &config,
                mlir::gpu::GPUModuleOp gpuModule);

  /// Emits the kernel (an llvm.func with nvvm.kernel inside `gpuModule`);
  /// reports errors on the kernel op.
  mlir::LogicalResult emit();
  /// This kernel's launch facts (its #flash.launch): the shape, the
  /// threads, and what the backend decides below.
  /// Null, with an error on the kernel, if the facts are inconsistent.
  flash::LaunchAttr launchAttr(flash::GemmKind gemm);
  /// After the prologue (arguments, thread coordinates, shared memory):
  /// maps (b, h, qt) to this CTA's tile, lowers the kernel body and returns.
  virtual mlir::LogicalResult emitKernelBody();
  /// Whether query tiles are visited last first: under a mask (causal,
  /// windows) the last tiles see the most keys.
  bool visitsLongestFirst();
  /// Under a block summary (readsTileOrder), maps launch position
  /// `position` (0 .. ceil(N/Br)·H·B - 1) to (b, h, qt) through the
  /// summary's tile order: the costliest query tiles first, the heads and
  /// batch entries that share a summary row side by side.
  void mapTileInSummaryOrder(mlir::Value position);
  /// Whether this kernel reads a block summary and so runs its tiles in
  /// the summary's order.
  bool readsTileOrder();

  mlir::LLVM::LLVMFuncOp getFunc() { return func; }

  //===--------------------------------------------------------------------===//
  // Shared state and helpers (used by every op family)
  //===--------------------------------------------------------------------===//

  flash::KernelOp kernel;

  // Kernel arguments of the forward ABI (beyond EmitterCore's).
  mlir::Value qPtr, kPtr, vPtr, oPtr, lsePtr;
  mlir::Value qStrides[3], kStrides[3], vStrides[3], oStrides[3]; // i64

  /// split_keys kernels: the splits' partial O (f32 [S, B, H, N, D]) and
  /// LSE (f32 [S, B, H, N]), and the launch's split count S (i32).
  mlir::Value splitOutPtr, splitLsePtr, splitCount;

  // Shared memory bases (!llvm.ptr<3>).
  mlir::Value smemQ, smemK, smemV;

  /// Tiles: flash IR value -> what this thread holds.
  llvm::DenseMap<mlir::Value, TileValue> tiles;

  /// Q: the pending copy; whether it has been waited for.
  mlir::Operation *queryLoad = nullptr;
  bool queryAcquired = false;
  /// Scalar ops of a loop body already lowered ahead of the body (the slice
  /// of a classified mask's any_visible, hoisted to the skip branch).
  llvm::DenseSet<mlir::Operation *> loweredAhead;
  /// The pipeline of the scf.for being lowered, if it streams K/V.
  KVPipeline *pipeline = nullptr;

  /// O leaves in 16-byte stores after a quad transpose (lowerStore); the
  /// sm80 kernel keeps 4-byte stores (with 32 rows per warp the transpose
  /// costs it spills).
  virtual bool storesWide() const { return false; }
  /// The four i32 words of each quad thread as a 4 x 4 matrix (row = the
  /// thread), transposed: thread t gets column t (lane shuffles). `bit0`
  /// and `bit1` (i1) are bits 0 and 1 of the thread's lane in its quad.
  llvm::SmallVector<mlir::Value> transposeQuad(llvm::ArrayRef<mlir::Value> words,
                                               mlir::Value bit0, mlir::Value bit1);

  /// Row in the tile this thread holds for element `e` of an n-tile of row
  /// block `mb` (or row-vector entry 2·mb + e/2): the warp's first row +
  /// 16·mb + g + 8·(e >= 2).
  mlir::Value fragmentRow(int64_t mb, int64_t e);
  /// Column in the tile of element e of n-tile nt: 8·nt + 2t + e%2.
  mlir::Value fragmentCol(int64_t nt, int64_t e);

  /// Where one row of the query tile lives (i32 head and position, i1
  /// inside): query head `head` and position qt·Br + row, inside when the
  /// position is below N; in a packed_heads kernel (`head` the KV head)
  /// packed row p = qt·Br + row holds position p / G of query head
  /// head·G + p mod G, inside when p < G·N.
  struct QueryRow {
    mlir::Value head, position, inside;
  };
  /// The query row this thread holds for element `e` of row block `mb`
  /// (fragmentRow) of the tile (head, queryTile).
  QueryRow queryRow(mlir::Value head, mlir::Value queryTile, int64_t mb, int64_t e);
  /// packed_heads: G = H / HKV and the thread's rows, 2·mb + (e >= 2),
  /// mapped once before the kernel body (a division per row, not per
  /// element and key block).
  mlir::Value groupSize;
  llvm::SmallVector<QueryRow> packedRows;
  void mapPackedRows();
  /// The thread's packed rows of (kvHead, queryTile) in groups of `group`
  /// query heads, in the order of packedRows.
  llvm::SmallVector<QueryRow> packRows(mlir::Value group, mlir::Value kvHead,
                                       mlir::Value queryTile);
  /// The thread's rows, 2·mb + half, for the stores after the key loop
  /// (packed: mapped afresh, see KernelEmitter.cpp).
  llvm::SmallVector<QueryRow> storedRows(mlir::Value head, mlir::Value queryTile);
  /// packed_heads: the Q copy, each row from its own query head.
  void issuePackedQueryCopy(mlir::Value batch, mlir::Value kvHead, mlir::Value queryTile);

  //===--------------------------------------------------------------------===//
  // Walk
  //===--------------------------------------------------------------------===//

  mlir::LogicalResult lowerBlock(mlir::Block &block);
  mlir::LogicalResult lowerOp(mlir::Operation *op);
  mlir::LogicalResult lowerFor(mlir::scf::ForOp loop);
  mlir::FailureOr<TileValue> constantTile(mlir::arith::ConstantOp op);
  /// Flattens a tile for scf.for iteration values, and back.
  void flatten(const TileValue &tile, llvm::SmallVectorImpl<mlir::Value> &out);
  mlir::FailureOr<TileValue> unflatten(mlir::Operation *user, mlir::Type type,
                                       mlir::ValueRange &values);
  /// Maps each of `originals` (tiles and scalars, in order) to its part of
  /// the flattened `lowered` values.
  mlir::LogicalResult mapFlattened(mlir::Operation *user, mlir::ValueRange originals,
                                   mlir::ValueRange lowered);

  //===--------------------------------------------------------------------===//
  // Op families
  //===--------------------------------------------------------------------===//

  // What a backend decides about the kernel's launch and its ABI beyond
  // the common arguments (KernelEmitter.cpp, LaunchInfo.cpp).
  /// Dynamic shared memory of the launch, in bytes.
  virtual int64_t dynamicSharedBytes() const = 0;
  /// Whether the grid is persistent (one CTA per SM slot, looping over
  /// query tiles) rather than one CTA per query tile.
  virtual bool persistentGrid() const { return false; }
  /// Arguments the backend appends after the aux tensor pointers (the
  /// Hopper kernel's tensor maps): their types, their attributes once the
  /// function exists (`first` is the index of the first), and binding the
  /// entry block's arguments to them.
  virtual void appendTargetArguments(llvm::SmallVectorImpl<mlir::Type> &types) {}
  virtual void annotateTargetArguments(unsigned first) {}
  virtual void bindTargetArguments(mlir::ValueRange arguments) {}
  /// How many of those arguments are CUtensorMaps (the launch facts).
  virtual int64_t tensorMapArguments() const { return 0; }

  // LoadStore.cpp: cp.async copies, the K/V pipeline, O/LSE stores.
  // The virtual members are where the backends differ: shared-memory
  // layout, copy addressing, copy-to-GEMM visibility, GEMMs.
  virtual void emitSharedMemoryLayout() = 0;
  /// Waits until at most `pendingGroups` cp.async groups of this thread are
  /// in flight and the copies of every thread are visible to the GEMMs.
  virtual void waitForCopies(int64_t pendingGroups);
  mlir::LogicalResult lowerLoadQ(flash::LoadQOp op);
  mlir::LogicalResult lowerLoadKV(flash::LoadKVOp op);
  mlir::LogicalResult lowerStore(flash::StoreOp op);
  /// The plain store: O in the element type, LSE dense [B, H, N].
  void storeOutput(const TileValue &out, const TileValue &lse, mlir::Value batch,
                   mlir::Value head, mlir::Value queryTile);
  /// A split's partial state for the combine step: O in f32, LSE.
  void storePartialState(const TileValue &out, const TileValue &lse, mlir::Value batch,
                         mlir::Value head, mlir::Value queryTile, mlir::Value split);
  /// [⌊blocks·s/S⌋, ⌊blocks·(s+1)/S⌋) of split s.
  mlir::LogicalResult lowerSplitKeyRange(flash::SplitKeyRangeOp op);
  /// Starts the copy of K or V block `block`, the one at `position` of the
  /// loop's sequence [keyLoopBegin, keyLoopEnd) (which picks the buffer
  /// and its phase). Position and block are the same value unless the loop
  /// walks its visible blocks.
  virtual void issueKVCopy(flash::LoadKVOp op, mlir::Value position, mlir::Value block);
  /// Waits until the K or V block of the current iteration has landed and
  /// every thread is done with the buffer the next copy overwrites.
  virtual void waitForKVBlock(flash::KVOperand operand);
  /// The K/V pipeline's part of a skipped iteration: K(kt) may land, then
  /// K(next) is started when next < upper.
  virtual void skipKVBlock(mlir::Value next, mlir::Value upper);
  /// Whether the Q copy is waited for before the key loop (else at the
  /// first K wait, which covers it when both are cp.async).
  virtual bool acquireQueryBeforeLoop() { return config.qInRegisters; }
  /// The positions [keyLoopBegin, keyLoopEnd) of the loop being lowered,
  /// after narrowing (i32), and the key block at keyLoopBegin: the blocks
  /// themselves, unless the loop walks its visible blocks.
  mlir::Value keyLoopBegin, keyLoopEnd, keyLoopFirstBlock;
  /// A loop under a classified mask whose keys may come in pieces (a sink
  /// beside a window) walks its visible blocks only: positions [0, count)
  /// are the blocks any_visible admits in [keyLoopFirstBlock, end), in
  /// order, and the loop carries the block of each (nextVisibleBlock finds
  /// the next). Producer and consumers walk the same sequence, so block
  /// ordinals (the K/V rings' buffers and phases) count visible blocks only
  /// and an empty block between two pieces costs neither a copy nor a GEMM
  /// nor a wait.
  struct VisibleBlockWalk {
    flash::MaskOp mask;
    mlir::scf::ForOp loop;
    mlir::Value end;
  };
  std::optional<VisibleBlockWalk> walk;
  /// Narrows `loop`'s block range [lower, upper) by its classified
  /// `skipMask` (if any) and sets keyLoopBegin, keyLoopEnd,
  /// keyLoopFirstBlock and walk (when the mask's keys may come in pieces
  /// and the scan could count the visible blocks). `wholeWarp`: every lane
  /// of the warp runs this (a walk's scan then tests 32 blocks per step).
  void enterKeyRange(mlir::scf::ForOp loop, flash::MaskOp skipMask, mlir::Value lower,
                     mlir::Value upper, bool wholeWarp);
  /// With a walk: the first block in [from, walk->end) that any_visible
  /// admits, or walk->end (`from` <= walk->end, and the range is not
  /// empty). `wholeWarp`: every lane of the warp runs this, and the lanes
  /// test 32 blocks per step (one ballot); otherwise one block per step.
  /// Leaves the walked loop's induction variable mapped to `from`.
  mlir::Value nextVisibleBlock(mlir::Value from, bool wholeWarp);
  /// Waits for the Q copy and, with q-in-registers, loads its fragments.
  /// `pendingGroups` cp.async groups committed after Q may stay in flight.
  virtual void acquireQuery(int64_t pendingGroups);
  /// With q-in-registers: moves the landed Q tile into registers.
  virtual void loadQueryRegisters() {}
  /// Starts the copy of the Q tile of `op` into shared memory.
  virtual void issueQueryCopy(flash::LoadQOp op);
  /// Makes a K or V block usable by the GEMMs (see KVPipeline).
  virtual mlir::LogicalResult acquireKV(mlir::Operation *user, const TileValue &tile);
  /// Checks that `user` may use the K/V block `tile` (loaded by this loop,
  /// in the same block).
  mlir::LogicalResult checkKVUse(mlir::Operation *user, const TileValue &tile);

  /// Software pipelining of P·V across iterations (a backend that defers
  /// P·V by one block: FlashToSM90).
  /// Whether the K/V loop `loop` defers its accumulate; asked once the
  /// range is final. A deferring loop has no skip branch inside its range:
  /// a block whose scores the mask removes entirely leaves (m, l, A)
  /// unchanged anyway.
  virtual bool defersAccumulate(mlir::scf::ForOp loop, flash::MaskOp skipMask) {
    return false;
  }
  /// The copies a deferring loop starts before its first iteration beyond
  /// K(first).
  virtual void startDeferredCopies() {}
  /// Right before a deferring loop is created (after the prologue, Q
  /// acquired by every thread): the warp-specialized split into producer
  /// and consumers.
  virtual mlir::LogicalResult enterKeyLoop(mlir::scf::ForOp loop, const KVPipeline &state) {
    return mlir::success();
  }
  /// The values the deferral carries across iterations (appended to the
  /// loop's iter_args): their initial values before the loop, their next
  /// values at the yield.
  virtual llvm::SmallVector<mlir::Value> deferredState() { return {}; }
  /// Binds the deferral's carried values inside the body.
  virtual void setDeferredState(mlir::ValueRange values) {}
  /// After the loop: the last block's pending P·V, added to the loop's
  /// accumulator result (`results` are the carried values at the exit).
  virtual mlir::LogicalResult finishDeferredAccumulate(mlir::scf::ForOp loop,
                                                       mlir::ValueRange results) {
    return mlir::success();
  }
  void beginPipeline(mlir::scf::ForOp loop, KVPipeline &state);

  // The two GEMMs are the backend's (mma.sync, wgmma); GemmOperands.cpp
  // checks their operands and records their results.
  virtual mlir::LogicalResult lowerQKDot(flash::QKDotOp op) = 0;
  virtual mlir::LogicalResult lowerAccumulate(mlir::Operation *op, mlir::Value acc,
                                              mlir::Value alpha, mlir::Value probs,
                                              mlir::Value value) = 0;
  /// The operands of a dot: Q and a K block; a Br x D accumulator, α (may
  /// be null), Br x Bc probabilities and a V block. Errors on anything else.
  mlir::LogicalResult checkQKDot(flash::QKDotOp op);
  mlir::FailureOr<llvm::SmallVector<mlir::Value>>
  checkAccumulate(mlir::Operation *op, mlir::Value acc, mlir::Value alpha, mlir::Value probs,
                  mlir::Value value);
  /// Records the Br x C f32 tile `regs` (scaled by `scale` unless 1) as
  /// `result`.
  void defineAccumTile(mlir::Value result, llvm::ArrayRef<mlir::Value> regs, int64_t cols,
                       float scale = 1.0f);

  // Softmax.cpp: online softmax, rescale, finalize.
  mlir::Value rowReduceMax(mlir::Value value);
  mlir::Value rowReduceSum(mlir::Value value);
  mlir::LogicalResult lowerOnlineSoftmax(flash::OnlineSoftmaxOp op);
  mlir::LogicalResult lowerRescale(flash::RescaleOp op);
  mlir::LogicalResult lowerFinalize(flash::FinalizeOp op);

  // Elementwise.cpp: score_mod / mask regions, mask_key_bounds, aux loads,
  // math approximations. KeyLoop.cpp: the scf.for over key blocks, its
  // K/V pipeline and the skipping of blocks a classified mask empties.
  mlir::LogicalResult lowerElementRegion(mlir::Operation *op, bool isMask);
  /// Whether a tile the block summary (rather than the intervals) proves
  /// full skips the mask's predicate too: the second copy of the score
  /// loop costs registers (the mma.sync kernel spills, ptxas -v).
  virtual bool unmasksSummaryFullTiles() const { return true; }
  /// The i1 that selects the unmasked copy of the mask (all_visible, or its
  /// intervals' part where unmasksSummaryFullTiles() is false).
  mlir::Value fullTileFact(flash::MaskOp mask);
  /// Whether a mask's aux loads at the tile's keys are predicated loads at
  /// [column base + constant] (KernelEmitter::lowerElementRegion): fewer
  /// instructions and registers in the wgmma kernels; the mma.sync kernel,
  /// at its 255 registers, spills with them (document at D = 64, ptxas -v).
  virtual bool predicatesMaskKeyLoads() const { return true; }
  /// A register cap for the kernel (nvvm.maxnreg) where the backend sets
  /// one to fit more CTAs on an SM; none by default.
  virtual std::optional<int64_t> registerCap() { return std::nullopt; }
  /// True in every thread when some element of the block's Br x Bc tile
  /// survives `mask` (a CTA-wide bar.red.or).
  mlir::FailureOr<mlir::Value> emitMaskVote(flash::MaskOp mask);
  /// The key blocks this thread's copy of the overlapped `loop` computes,
  /// within the CTA's [lower, upper) (already narrowed by `skipMask`): the
  /// CTA's own by default.
  virtual std::pair<mlir::Value, mlir::Value>
  threadKeyRange(flash::MaskOp skipMask, mlir::scf::ForOp loop, mlir::Value lower,
                 mlir::Value upper) {
    return {lower, upper};
  }
  /// For a classified mask: lowers the loop-body scalar ops any_visible
  /// depends on at the current insertion point and returns it (null when
  /// it does not depend on the induction variable and outer values only).
  mlir::Value hoistAnyVisible(flash::MaskOp mask, mlir::scf::ForOp loop);
  /// For a classified mask: replaces the key-block range [lower, upper) by
  /// [first, last + 1) of the blocks any_visible admits (a scan of every
  /// block before the loop), so blocks before the first and after the last visible one cost
  /// nothing, not even a copy. Leaves the range alone when any_visible
  /// cannot be hoisted.
  /// With `count`, also sets *count to the number of visible blocks in
  /// the range (null when the range was left alone). `wholeWarp`: every
  /// lane of the warp runs this, so a scan may test 32 blocks per step.
  void narrowToVisibleBlocks(flash::MaskOp mask, mlir::scf::ForOp loop, mlir::Value &lower,
                             mlir::Value &upper, mlir::Value *count = nullptr,
                             bool wholeWarp = false);
  /// The block summary read (a global load per key block) in the slice of
  /// `mask`'s any_visible, or null when it reads none.
  flash::BlockClassOp blockSummaryRead(flash::MaskOp mask, mlir::scf::ForOp loop);
  /// narrowToVisibleBlocks in one thread for a mask whose any_visible reads
  /// the block summary (`blockClass`) at the loop's key block: the exact
  /// classes of the query tile's row give the span of non-empty blocks,
  /// scanned 8 bytes per step. Returns false (range untouched) when the
  /// read is at another block.
  bool narrowBySummary(flash::BlockClassOp blockClass, mlir::scf::ForOp loop,
                       mlir::Value &lower, mlir::Value &upper, mlir::Value *count);
  /// The scan of narrowToVisibleBlocks for any test: per block, the slice
  /// of `facts` is lowered with the loop's induction variable mapped to the
  /// block, and `visible` returns the block's i1 from the lowered facts.
  /// `wholeWarp`: every lane runs the scan, lane l testing block base + l
  /// (32 blocks per step, one ballot). Returns false (range untouched) when
  /// the facts cannot be hoisted.
  bool narrowToBlocksWhere(mlir::scf::ForOp loop, llvm::ArrayRef<mlir::Value> facts,
                           llvm::function_ref<mlir::Value()> visible, mlir::Value &lower,
                           mlir::Value &upper, mlir::Value *count = nullptr,
                           bool wholeWarp = false);
  mlir::LogicalResult lowerMaskKeyBounds(flash::MaskKeyBoundsOp op);
};

/// The mask that lets a whole key block of `loop` be skipped (or the loop
/// narrowed) when no element of the block survives it; null when the loop is
/// not the plain recurrence that makes skipping exact.
flash::MaskOp findSkippableMask(mlir::scf::ForOp loop);

/// For a kernel op with a #flash.block_summary: emits the kernel that
/// computes the summary (BlockSummary.cpp) into `gpuModule` and returns its
/// launch facts; null after an error on the kernel. A flash.kernel's is
/// `<name>_summary`, which also writes the tile order; a
/// flash.backward_kernel's is `<name>_bwd_summary`, with the backward's ABI.
/// `config` is the main kernel's (its Br x Bc tiling).
flash::LaunchAttr emitBlockSummaryKernel(flash::KernelSignature kernel,
                                         const KernelConfig &config,
                                         mlir::gpu::GPUModuleOp gpuModule,
                                         llvm::StringRef passName, flash::GemmKind gemm);

/// For a split_keys flash.kernel: emits its combine kernel,
/// `<name>_combine` (SplitCombine.cpp), which merges the splits' partial O
/// and LSE of every row by LSE into O and LSE, into `gpuModule` and returns
/// its launch facts; null after an error on the kernel.
flash::LaunchAttr emitSplitCombineKernel(flash::KernelOp kernel, const KernelConfig &config,
                                         mlir::gpu::GPUModuleOp gpuModule,
                                         llvm::StringRef passName, flash::GemmKind gemm);

/// The largest dynamic shared memory a block may opt into (sm_90: 227 KiB;
/// sm_80 allows 163 KiB, sm_86/89 99 KiB: the driver checks at launch).
constexpr int64_t kMaxSharedBytes = 227 * 1024;

/// The tile, head dim and element type of a forward or backward `kernel`,
/// checked against what every GPU kernel supports (bf16/f16; D = 64, 96,
/// 128, 256); errors name `passName` and `kernelKind` ("wgmma kernel",
/// "backward kernel").
mlir::FailureOr<KernelConfig> checkedTileConfig(flash::KernelSignature kernel,
                                                llvm::StringRef passName,
                                                const llvm::Twine &kernelKind);

/// checkedTileConfig of a forward `kernel` for the `gemm` kernel.
mlir::FailureOr<KernelConfig> baseConfig(flash::KernelOp kernel, llvm::StringRef passName,
                                         flash::GemmKind gemm);

/// The body of every flash-to-<target> pass: each flash.kernel of `module`
/// becomes a kernel of gpu.module @flashc_kernels through the emitter
/// `makeEmitter` returns (null after reporting an error), its #flash.launch
/// goes into the module's `flashc.launch` dictionary, then the flash.kernels
/// are erased.
mlir::LogicalResult lowerFlashKernels(
    mlir::ModuleOp module, flash::GemmKind gemm,
    llvm::function_ref<std::unique_ptr<KernelEmitter>(flash::KernelOp, mlir::gpu::GPUModuleOp)>
        makeEmitter);

} // namespace flashc::lowering

#endif // FLASHC_CONVERSION_FLASHTONVVM_KERNELEMITTER_H
