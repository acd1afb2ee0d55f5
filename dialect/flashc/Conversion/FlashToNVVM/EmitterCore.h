//===- EmitterCore.h - What every kernel emitter shares ---------*- C++ -*-===//
//
// The per-thread code of a GPU kernel, independent of which flash kernel op
// (forward flash.kernel, flash.backward_kernel) it lowers: constants and
// small arithmetic, PTX approximations, shared memory, cp.async tile
// copies, the run-time sizes and parameters of the ABI, and the scalar ops
// of the kernel body and of its element regions (score mods, masks, their
// derivatives). KernelEmitter (the forward) and the backward emitters build
// on it.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONVERSION_FLASHTONVVM_EMITTERCORE_H
#define FLASHC_CONVERSION_FLASHTONVVM_EMITTERCORE_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <utility>

namespace flashc::lowering {

/// Shape and resources of one lowered kernel: what every backend has.
/// Backends extend it with their own (FlashToSM90's HopperConfig).
struct KernelConfig {
  int64_t br = 64, bc = 64, headDim = 64;
  /// Query rows per warp: 16 or 32 (sm80: two m16 row blocks sharing every
  /// K/V fragment a warp loads with ldmatrix).
  int64_t rowsPerWarp = 16;
  int64_t numWarps = 4, numThreads = 128;
  mlir::Type elementType;   // bf16 or f16
  bool qInRegisters = true; // Q fragments held for the whole kernel (sm80)

  int64_t scoreTiles() const { return bc / 8; } // n-tiles of S per row block
  int64_t accTiles() const { return headDim / 8; }
  int64_t rowBlocks() const { return rowsPerWarp / 16; } // m16 blocks per warp
};

class EmitterCore {
public:
  EmitterCore(mlir::Operation *kernelOp, const KernelConfig &config,
              mlir::gpu::GPUModuleOp gpuModule);
  virtual ~EmitterCore() = default;

  /// The threads that share a tile copy: `index` (i32) of `count`.
  struct CopyThreads {
    mlir::Value index;
    int64_t count;
  };

  /// The kernel op being lowered and its signature (params, aux tensors).
  mlir::Operation *kernelOp;
  flash::KernelSignature signature;
  KernelConfig config;
  mlir::gpu::GPUModuleOp gpuModule;
  mlir::LLVM::LLVMFuncOp func;
  mlir::OpBuilder b;
  mlir::Location loc;

  // Kernel arguments every kernel has.
  mlir::Value batchSize, headCount, kvHeadCount, queryLen, keyLen; // i32
  llvm::StringMap<mlir::Value> params, auxPointers;
  /// The block summary (a kernel with a #flash.block_summary; else null).
  mlir::Value blockSummaryPtr;
  /// A #flash.paged_kv kernel: the block table (i32 [B, tableStride]), the
  /// key lengths (i32 [B]), the table's row length and the cache's page
  /// count (i32); else null. k and v's strides are then between pages,
  /// heads and rows of a page.
  mlir::Value pagedTable, pagedLengths, pagedTableStride, pagedPages;
  /// A #flash.varlen kernel, per packed side: the offsets (i32 [B + 1]) and
  /// the rows of the packed tensors (i32: q and o, or k and v); else null.
  mlir::Value queryOffsets, queryRows, keyOffsets, keyRows;
  /// After bindSequenceLengths, a packed side's first row of the CTA's
  /// sequence (i64); else null.
  mlir::Value queryRowStart, keyRowStart;
  /// A paged or varlen kernel: the launch's M and N (keyLen and queryLen are
  /// the sequence's); else null.
  mlir::Value launchKeyLen, launchQueryLen;
  /// A paged or varlen kernel: sets keyLen (queryLen) to sequence `batch`'s
  /// key (query) count: its lengths entry clamped to [0, M], or its offsets
  /// clamped into the packed rows. A bad length or offset is the caller's
  /// error, which must not read outside the table or the tensors.
  void bindSequenceLengths(mlir::Value batch);
  /// The element offset (i64) of row 0 of (batch, head) in a tensor with
  /// (batch, head, row) strides `strides`, or in a packed one (`rowStart`
  /// non-null) of its sequence's first row.
  mlir::Value sequenceOffset(const mlir::Value *strides, mlir::Value batch, mlir::Value head,
                             mlir::Value rowStart) {
    return rowStart ? add(mul(rowStart, strides[2]), mul(toI64(head), strides[1]))
                    : headOffset(strides, batch, head);
  }
  /// A paged kernel: `threads` copy key block `keyTile` (Bc rows) of KV head
  /// `kvHead` of sequence `batch` from `base` (k or v, `strides` its page,
  /// head and row strides) into shared memory at `dst`, each row from its
  /// page: one table entry per block where a page holds whole key blocks,
  /// one per thread where a block holds whole pages and each page's threads
  /// keep one chunk column, else one per row.
  /// Rows past the sequence, and rows whose table entry is outside the
  /// cache, are zero-filled. One cp.async group is committed.
  void issuePagedTileCopy(const CopyThreads &threads, mlir::Value base,
                          const mlir::Value *strides, mlir::Value batch, mlir::Value kvHead,
                          mlir::Value keyTile, mlir::Value dst);
  /// The byte offset (i64) of (batch, head, queryTile, keyTile) in the
  /// block summary of the Br x Bc tiling (flash::BlockSummaryShape).
  mlir::Value blockSummaryOffset(flash::BlockSummaryAttr summary, mlir::Value batch,
                                 mlir::Value head, mlir::Value queryTile, mlir::Value keyTile);
  /// Rows (kept batch entries x kept heads) of the block summary (i32).
  mlir::Value blockSummaryRows(flash::BlockSummaryAttr summary);
  /// The summary's tile order: after its bytes, 4-aligned, one i32 per
  /// (summary row, query tile), all of them by cost bin, costliest first,
  /// any order within a bin (the summary kernel's last CTA writes it;
  /// flash::BlockSummaryShape).
  mlir::Value blockSummaryOrder(flash::BlockSummaryAttr summary);
  /// ceil(size / block) of an i32 size.
  mlir::Value ceilDiv(mlir::Value size, int64_t block);

  // Thread coordinates (i32).
  mlir::Value tid, lane, warp, groupId, threadInGroup;
  /// Defines tid, lane, warp, groupId (lane / 4) and threadInGroup (lane % 4).
  void bindThreadCoordinates();
  /// Every thread of the CTA shares the copy.
  CopyThreads allThreads() const { return {tid, config.numThreads}; }

  /// Scalars: flash IR value -> lowered value.
  mlir::IRMapping scalars;

  /// Prefix of every diagnostic ("flash-to-sm80").
  virtual llvm::StringRef passName() const = 0;
  mlir::InFlightDiagnostic error(mlir::Operation *op,
                                 const llvm::Twine &message);

  // Constants and small arithmetic.
  mlir::Value i32(int64_t value);
  mlir::Value i64(int64_t value);
  mlir::Value f32(double value);
  mlir::Value toI64(mlir::Value value);
  /// The element offset (i64) of head (batch, head) in a tensor whose
  /// (batch, head, row) strides are `strides[0..2]`.
  mlir::Value headOffset(const mlir::Value *strides, mlir::Value batch, mlir::Value head);
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value select(mlir::Value cond, mlir::Value t, mlir::Value f);
  mlir::Value cmpI(mlir::arith::CmpIPredicate predicate, mlir::Value a,
                   mlir::Value c);
  mlir::Value fadd(mlir::Value a, mlir::Value c);
  mlir::Value fmul(mlir::Value a, mlir::Value c);
  mlir::Value fmax(mlir::Value a, mlir::Value c);
  mlir::Value fma(mlir::Value a, mlir::Value c, mlir::Value d);
  /// ex2.approx.ftz.f32 / lg2.approx.ftz.f32.
  mlir::Value exp2Approx(mlir::Value x);
  mlir::Value log2Approx(mlir::Value x);
  /// shfl.sync.bfly over the full warp.
  mlir::Value shuffleXor(mlir::Value value, int64_t laneMask);
  /// `pointer` through an opaque `mov.b64` (volatile inline asm): LLVM
  /// cannot hoist what it computes from the result out of the key loop, so
  /// the ldmatrix addresses of a GEMM stay one base register plus immediate
  /// offsets instead of one 64-bit register per fragment held across the
  /// loop.
  mlir::Value opaquePointer(mlir::Value pointer);
  /// `value` (i32, i64, f32 or a pointer) through an opaque move, for the
  /// same reason.
  mlir::Value opaqueValue(mlir::Value value);
  /// Inline PTX without results that LLVM must keep where it is (atomics,
  /// fences, spins): `operands` bound to $0... by `constraints`.
  void emitAsm(llvm::StringRef text, llvm::StringRef constraints = "",
               mlir::ValueRange operands = {});
  /// The same with one result of type `result` (null: none, returns null).
  mlir::Value emitAsmValue(mlir::Type result, llvm::StringRef text, llvm::StringRef constraints,
                           mlir::ValueRange operands);
  /// One CTA-wide bar.red vote on the i1 `predicate` (OR: some thread's
  /// holds, AND: every thread's); the i1 result is uniform in every thread.
  mlir::Value ctaVote(mlir::Value predicate, mlir::NVVM::BarrierReduction reduction);
  /// bar.sync / bar.arrive on named barrier `id` of `threads` threads,
  /// through LLVM's convergent intrinsics (inline asm is not convergent:
  /// LLVM may duplicate it into diverged paths).
  void syncNamedBarrier(int64_t id, int64_t threads);
  void arriveAtNamedBarrier(int64_t id, int64_t threads);
  /// Emits `body` inside `if (tid == thread)`.
  void onThread(int64_t thread, llvm::function_ref<void()> body);
  /// Emits `body` inside `if (tid == 0)`.
  void onFirstThread(llvm::function_ref<void()> body) { onThread(0, body); }
  /// Byte offset `offset` past a pointer of any address space.
  mlir::Value gepBytes(mlir::Value base, mlir::Value offset);
  /// `offset` elements of `elementType` past a global pointer.
  mlir::Value gepElements(mlir::Value base, mlir::Value offset,
                          mlir::Type elementType);
  mlir::Value extract(mlir::Value aggregate, int64_t position);
  /// Two f32 -> one i32 of two 16-bit floats (low half = `lo`).
  mlir::Value packHalves(mlir::Value lo, mlir::Value hi);

  // Shared memory and cp.async.
  /// The dynamic shared memory of the kernel (declared once per module with
  /// the largest `alignment` asked for), as an !llvm.ptr<3>.
  mlir::Value sharedMemoryBase(int64_t alignment);
  /// Byte offset in a rows x D shared tile of 16-byte chunk `chunk` of row
  /// `row` (i32 values).
  virtual mlir::Value sharedChunkOffset(mlir::Value row, mlir::Value chunk,
                                        int64_t rows) = 0;
  /// The offset added by moving `rowStep` rows down in the same chunk
  /// column, when it is a constant (else every copy uses sharedChunkOffset).
  virtual std::optional<int64_t> sharedRowStepBytes(int64_t rowStep) = 0;
  /// Copies a rows x D tile into shared memory at `dst`, its 16-byte chunks
  /// spread over `threads`, when every chunk computes its own source:
  /// `rowSource(row)` gives the element offset (i64) of tile row `row`
  /// (i32) in `base` and whether the row exists (one that does not is
  /// zero-filled; its offset must still point into `base`). One cp.async
  /// group is committed.
  void issueRowwiseTileCopy(
      const CopyThreads &threads, mlir::Value base, int64_t rows, mlir::Value dst,
      llvm::function_ref<std::pair<mlir::Value, mlir::Value>(mlir::Value row)> rowSource);
  /// Copies a rows x D tile of `base` (one (batch, head) at `headOffset`
  /// elements) starting at row tileIndex·rows into shared memory at `dst`,
  /// spread over `threads`; rows >= length are zero-filled. One cp.async
  /// group is committed.
  void issueTileCopy(const CopyThreads &threads, mlir::Value base, mlir::Value headOffset,
                     mlir::Value rowStride, mlir::Value tileIndex, int64_t rows,
                     mlir::Value length, mlir::Value dst);

  // Scalars and element regions.
  /// Scalar ops at kernel level and inside regions: arith, math (through
  /// PTX approximations), flash.param/dim/aux_load/kv_head/block_class.
  mlir::LogicalResult lowerScalarOp(mlir::Operation *op);
  mlir::Value lookupScalar(mlir::Value value) {
    return scalars.lookupOrNull(value);
  }
  /// Emits the region of `op` (score_mod, mask, score_mod_grad) for one
  /// element at global position (query, key), its leading arguments bound
  /// to `leading` (the score; the score's gradient and the score); returns
  /// the yielded value.
  mlir::FailureOr<mlir::Value>
  emitRegionElement(mlir::Operation *op, mlir::ValueRange leading,
                    mlir::Value batch, mlir::Value head, mlir::Value query,
                    mlir::Value key);
  /// A region op without results (flash.aux_grad_add): an error unless the
  /// emitter knows it.
  virtual mlir::LogicalResult lowerRegionEffect(mlir::Operation *op);
  /// The element of aux tensor `decl` at the lowered `indices`: its dense
  /// row-major `linear` index (i64) and whether every index is inside
  /// (indices whose `knownInside` entry is set are not checked).
  mlir::LogicalResult auxElementIndex(mlir::Operation *op,
                                      flash::AuxTensorAttr decl,
                                      llvm::ArrayRef<mlir::Value> indices,
                                      mlir::Value &valid, mlir::Value &linear,
                                      llvm::ArrayRef<bool> knownInside = {});
  /// Dense row-major aux tensor read; indices outside the tensor read 0.
  mlir::FailureOr<mlir::Value> lowerAuxLoad(flash::AuxLoadOp op);
  /// The element of `op`'s tensor at lowered i32 `indices` (0 outside it).
  mlir::FailureOr<mlir::Value> lowerAuxLoadAt(flash::AuxLoadOp op,
                                              llvm::ArrayRef<mlir::Value> indices,
                                              llvm::ArrayRef<bool> knownInside = {});
  /// Predicated aux loads at a score tile's columns (the keys of the
  /// forward's S, the queries of the backward's transposed tiles): while
  /// set, a load indexed by a column index from columnIndex() is a masked
  /// load at its unclamped address, which keeps the column's constant
  /// offset (a compare and a load per column, where the clamped 64-bit
  /// index took ~10 instructions), and a dimension of extent B indexed by
  /// the region's batch argument (the kernel's own batch) is not checked.
  /// Other loads: an index clamped into the tensor and a select.
  /// `firstColumn` is the tile's first column index (i32); the thread's
  /// columns start 2 x threadInGroup after it (the accumulator layout).
  void beginColumnLoads(mlir::Value batchArgument, mlir::Value firstColumn);
  void endColumnLoads();
  /// The thread's column index `column` of the tile: inside
  /// beginColumnLoads() its first column plus the constant, recorded with
  /// its i64 form (the constant last; no wrap: indices stay below 2^31).
  mlir::Value columnIndex(int64_t column);
  /// Whether an aux load in the region of `op` indexes a dimension by the
  /// region's `argument` directly.
  static bool regionLoadsAt(mlir::Operation *op, mlir::Value argument);
  /// Set between beginColumnLoads() and endColumnLoads().
  mlir::Value batchArgumentInside, columnBase, wideColumnBase;
  llvm::DenseMap<mlir::Value, mlir::Value> wideColumns;
  mlir::FailureOr<mlir::Value> lowerMathOp(mlir::Operation *op);
  /// The loop-body scalar ops the i1 `facts` (a mask's any_visible, its
  /// row bands) depend on, in order, or failure when they depend on more
  /// than the induction variable and values defined before the loop.
  mlir::FailureOr<llvm::SmallVector<mlir::Operation *>>
  factSlice(llvm::ArrayRef<mlir::Value> facts, mlir::scf::ForOp loop);
  /// Lowers `slice` at the insertion point.
  mlir::LogicalResult lowerSlice(llvm::ArrayRef<mlir::Operation *> slice);
  /// One step of the scans over the indices [.., end) of a loop's induction
  /// variable or a kernel argument (key blocks, query tiles): with the
  /// slice of the facts lowered for the index tested (`index` mapped to
  /// it), bit l of
  /// the i32 result says `visible` admits index base + l. `wholeWarp`: lane
  /// l tests index base + l (one ballot); otherwise index base alone (bit
  /// 0). Indices at or past `end` read no facts of their own and are never
  /// visible. Null when the slice does not lower.
  mlir::Value visibleIndexBits(mlir::Value index, llvm::ArrayRef<mlir::Operation *> slice,
                               llvm::function_ref<mlir::Value()> visible, mlir::Value base,
                               mlir::Value end, bool wholeWarp);
  /// The first index in [from, end) that `visible` admits, or `end` (`from`
  /// <= end): visibleIndexBits steps of 32 indices (`wholeWarp`, every lane
  /// of the warp running it) or of one. Uniform where the facts are. Null
  /// when the slice does not lower. Leaves `index` mapped to the last index
  /// tested.
  mlir::Value nextIndexWhere(mlir::Value index, llvm::ArrayRef<mlir::Operation *> slice,
                             llvm::function_ref<mlir::Value()> visible, mlir::Value from,
                             mlir::Value end, bool wholeWarp);
  /// The names and types of the signature's parameters and the names of its
  /// aux tensors, in ABI order (the #flash.launch arrays).
  void signatureNames(llvm::SmallVectorImpl<mlir::Attribute> &paramNames,
                      llvm::SmallVectorImpl<mlir::Attribute> &paramTypes,
                      llvm::SmallVectorImpl<mlir::Attribute> &tensorNames);
  /// The forward kernel ABI (flashc/Target/NVPTX/EmitPTX.h) before any
  /// target arguments: q, k, v, o, lse, their 12 strides, the 5 sizes, the
  /// parameters, the aux tensors and, with a #flash.block_summary, the
  /// summary; with a #flash.paged_kv, the block table, the key lengths, the
  /// table's row length and the page count; with a #flash.varlen, per packed
  /// side (queries, then keys) the offsets and the packed row count. The
  /// kernel op must be a flash.kernel.
  mlir::LogicalResult appendForwardArguments(llvm::SmallVectorImpl<mlir::Type> &argTypes);
  /// The backward kernel ABI (EmitPTX.h): kBackwardPointers pointers (q, k,
  /// v, o, dO, lse, Δ, dq_accum, dq_lock, dq, dk, dv), kBackwardStrides i64
  /// strides, the 5 sizes, the parameters, per aux tensor its pointer, its
  /// gradient and its fixed-point accumulator and, with a
  /// #flash.block_summary, the summary. The kernel op must be a
  /// flash.backward_kernel whose parameters are i32 or f32.
  void appendBackwardArguments(llvm::SmallVectorImpl<mlir::Type> &argTypes);
  static constexpr unsigned kBackwardPointers = 12, kBackwardStrides = 24;
  /// What a split_keys kernel and its combine step take after those: the
  /// partial O and LSE pointers (f32) and the split count S (i32).
  void appendSplitArguments(llvm::SmallVectorImpl<mlir::Type> &argTypes);
  /// Binds B, H, HKV, N, M, the parameters, the aux tensor pointers and
  /// (forward kernels with one) the block summary from `arguments[first...]`;
  /// returns the index after them.
  unsigned bindSizesAndInputs(mlir::ValueRange arguments, unsigned first);
  /// The run-time size of `role` (i32): what flash.dim reads (a paged
  /// kernel's M is its sequence's, a varlen kernel's N and M too).
  mlir::Value sizeOf(flash::DimRole role);
  /// The launch's size of `role` (i32): the aux tensors' extents (a paged
  /// or varlen kernel's M and N stay the launch's there).
  mlir::Value launchSizeOf(flash::DimRole role) {
    if (role == flash::DimRole::KeyLen && launchKeyLen)
      return launchKeyLen;
    if (role == flash::DimRole::QueryLen && launchQueryLen)
      return launchQueryLen;
    return sizeOf(role);
  }
};

/// A kernel a kernel op brings beside its main one (a flash.kernel's block
/// summary and split combine, a flash.backward_kernel's block summary): it
/// shares the main kernel's tile and ABI prefix and has no shared-memory
/// tiles of its own.
class CompanionEmitter : public EmitterCore {
public:
  CompanionEmitter(flash::KernelSignature kernel, const KernelConfig &config,
                   mlir::gpu::GPUModuleOp gpuModule, llvm::StringRef pass)
      : EmitterCore(kernel, config, gpuModule), kernel(kernel), pass(pass.str()) {}

  llvm::StringRef passName() const override { return pass; }
  // No shared-memory tiles: the copies of EmitterCore are never used.
  mlir::Value sharedChunkOffset(mlir::Value, mlir::Value, int64_t) override { return i32(0); }
  std::optional<int64_t> sharedRowStepBytes(int64_t) override { return std::nullopt; }

  /// After emit(): this kernel's launch facts; erases the function and
  /// returns null when `emitted` failed.
  flash::LaunchAttr launchFacts(mlir::LogicalResult emitted, flash::GemmKind gemm,
                                flash::GridKind grid, int64_t threads,
                                int64_t dynamicSharedBytes);

protected:
  flash::KernelSignature kernel;
  std::string pass;
  /// The kernel op's symbol (the variant's name).
  llvm::StringRef kernelName() { return mlir::SymbolTable::getSymbolName(kernel); }
};

} // namespace flashc::lowering

#endif // FLASHC_CONVERSION_FLASHTONVVM_EMITTERCORE_H
