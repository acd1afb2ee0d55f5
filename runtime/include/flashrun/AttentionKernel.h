//===- AttentionKernel.h - Launch a flashc kernel package -------*- C++ -*-===//
//
// The C++ launch API: load a kernel package, bind device tensors, launch on
// a stream. Needs only libflashrt (no flashc, MLIR, LLVM or Python), so an
// inference engine can link it as it is.
//
//   flashrt::Context context;
//   flashrun::AttentionKernel kernel(context, flashrt::KernelPackage::load("causal.flashpkg"));
//   kernel.launch(stream, q, k, v, o, lse.devicePtr(), {B, H, HKV, N, M});
//
//===----------------------------------------------------------------------===//
#ifndef FLASHRUN_ATTENTIONKERNEL_H
#define FLASHRUN_ATTENTIONKERNEL_H

#include "flashrt/Runtime.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace flashrun {

/// Run-time sizes of one launch.
struct Sizes {
  int64_t batch = 1, heads = 1, kvHeads = 1, queryLen = 1, keyLen = 1;
};

/// A [B, heads, length, D] tensor in device memory with explicit strides in
/// elements (the head-dim stride is 1). BHSD: {H*N*D, N*D, D}; BSHD:
/// {N*H*D, D, H*D}.
struct TensorRef {
  uint64_t devicePtr = 0;
  int64_t batchStride = 0, headStride = 0, rowStride = 0;

  static TensorRef bhsd(uint64_t ptr, int64_t heads, int64_t length, int64_t headDim) {
    return {ptr, heads * length * headDim, length * headDim, headDim};
  }
  static TensorRef bshd(uint64_t ptr, int64_t heads, int64_t length, int64_t headDim) {
    return {ptr, length * heads * headDim, headDim, heads * headDim};
  }
  /// A paged K or V cache, [pages, page, HKV, D] (vLLM's layout): the
  /// strides are between pages, heads and the rows of a page.
  static TensorRef pagedCache(uint64_t ptr, int64_t page, int64_t kvHeads, int64_t headDim) {
    return {ptr, page * kvHeads * headDim, headDim, kvHeads * headDim};
  }
  /// A packed varlen tensor, token-major [rows, heads, D] (FlashAttention-2's
  /// layout): sequence b's rows start at its offset, so the batch stride is
  /// unused.
  static TensorRef packed(uint64_t ptr, int64_t heads, int64_t headDim) {
    return {ptr, 0, headDim, heads * headDim};
  }
};

/// What a launch of a varlen package (`varlen`) takes beside the packed
/// tensors (TensorRef::packed): FlashAttention-2's cu_seqlens. Sequence b's
/// queries are rows queryOffsets[b] .. queryOffsets[b + 1] - 1 of q and o,
/// its keys rows keyOffsets[b] .. of k and v; LSE is then f32 [H,
/// queryRows]. Sizes::queryLen (keyLen) is the longest sequence's, which
/// sizes the grid. The pointers of a side the package does not pack are
/// ignored.
///
/// The caller's contract on the device: offsets never decreasing, inside
/// [0, rows], no sequence longer than Sizes::queryLen (keyLen). The kernel
/// clamps every offset into [0, rows] and every length to the launch's, so
/// broken offsets give wrong rows, not a fault; checkVarlenOffsets checks
/// them on the host where they are there. A package with kv-tensor-maps
/// copies a sequence's last key block by TMA box, which brings in the rows
/// after it (masked out, but P·V multiplies them by 0): every k and v row
/// in [0, keyRows) must be finite, so give keyRows = keyOffsets[B] where
/// the rows past the last sequence may hold garbage.
struct VarlenBatch {
  uint64_t queryOffsets = 0; // device i32 [B + 1]
  uint64_t keyOffsets = 0;   // device i32 [B + 1]
  int64_t queryRows = 0;     // rows of the packed q and o
  int64_t keyRows = 0;       // rows of the packed k and v
};

/// What a launch of a package with a paged K/V cache (`paged-kv`) takes
/// beside the caches: key j of sequence b is row j % page of page
/// blockTable[b·tableStride + j / page], and sequence b has keyLengths[b]
/// keys. Sizes::keyLen is then the longest a sequence may be (at most
/// tableStride·page): the split rule and the bounds use it.
///
/// The caller's contract on the device, which the kernel cannot report: every
/// length in [0, Sizes::keyLen] and every table entry a sequence's keys
/// reach in [0, numPages). The kernel clamps a length to [0, keyLen] and
/// reads zeros for an entry outside the cache (never outside k or v), so a
/// broken table gives wrong rows, not a fault; checkPagedTable checks both
/// on the host where the table is there.
struct PagedKV {
  uint64_t blockTable = 0; // device i32 [B, tableStride]
  uint64_t keyLengths = 0; // device i32 [B]
  int64_t tableStride = 0; // table entries per sequence
  int64_t numPages = 0;    // pages in each of the k and v caches
};

/// The tensors of one backward launch. Every TensorRef is in the variant's
/// element type with the rules of the forward's q (16-byte aligned, strides
/// multiples of 8 elements).
struct BackwardTensors {
  TensorRef q, k, v;   // the forward's inputs
  TensorRef out;       // its O
  uint64_t lse = 0;    // its LSE, dense f32 [B, H, N]
  TensorRef outputGrad; // dO, shaped like O
  TensorRef queryGrad, keyGrad, valueGrad; // dQ (like q), dK and dV (like k, v): written
  /// Scratch of BackwardKernel::workspaceBytes(sizes) bytes, 16-byte aligned
  /// (Δ, the f32 dQ accumulator, the dQ semaphores, for deterministic
  /// packages the aux gradients' fixed-point accumulators and, for packages
  /// with a block summary, the summary of the backward's tiling); its
  /// contents need no initialization.
  uint64_t workspace = 0;
  /// One f32 gradient per aux tensor, dense in the tensor's shape (0 for a
  /// tensor that gets none: integer tensors, or where it is not wanted).
  /// The backward overwrites them (they start from 0).
  std::vector<uint64_t> tensorGrads;
  /// A package with a block summary: one BackwardKernel::computeBlockSummary
  /// wrote for the same sizes, parameters and aux tensors (cache it across
  /// the layers and heads that share the mask), or 0, and the launch
  /// computes it into the workspace first. Must be 0 for other packages.
  uint64_t blockSummary = 0;
};

/// The backward pass of a variant from its backward package (`flashc --bwd
/// --emit=package`): three launches on one stream (Δ and the zeroing of
/// the accumulators; dK, dV and the dQ/aux-gradient adds per key block; dQ
/// to the element type), after a fourth for a package with a block summary
/// that the caller did not pass (BackwardTensors::blockSummary): the
/// summary of the backward's tiling, into the workspace (launches on two
/// streams at once need their own workspaces anyway).
class BackwardKernel {
public:
  BackwardKernel(flashrt::Context &context, flashrt::KernelPackage package);

  const flashrt::KernelPackage &package() const { return kernelPackage; }
  /// Bytes of BackwardTensors::workspace for `sizes`.
  size_t workspaceBytes(const Sizes &sizes) const { return workspaceBytes(kernelPackage, sizes); }
  /// The same from the package alone (no GPU needed).
  static size_t workspaceBytes(const flashrt::KernelPackage &package, const Sizes &sizes);
  /// Where in the workspace a launch at `sizes` leaves the block summary of
  /// the backward's tiling (a package with one; flash::BlockSummaryShape's
  /// bytes, no tile order), for checks.
  static size_t blockSummaryOffset(const flashrt::KernelPackage &package, const Sizes &sizes);

  /// Whether the package reads a block summary of its own tiling.
  bool hasBlockSummary() const { return kernelPackage.blockSummary; }
  /// Bytes of that summary at `sizes` (AttentionKernel::blockSummaryBytes
  /// of the backward package: classes only, no tile order); 0 without one.
  size_t blockSummaryBytes(const Sizes &sizes) const;
  /// Classifies every (query tile, key block) of the backward's tiling into
  /// `summary` (device memory of blockSummaryBytes(sizes) bytes) on
  /// `stream`, for launches whose BackwardTensors::blockSummary it is: the
  /// summary reads only the sizes, parameters and aux tensors, so one
  /// serves every layer and head that shares the mask. Throws
  /// InvalidArgument without a summary entry or for arguments launch()
  /// would refuse.
  void computeBlockSummary(flashrt::Stream &stream, const Sizes &sizes,
                           const std::map<std::string, double> &params,
                           const std::vector<uint64_t> &auxTensors, uint64_t summary) const;

  /// Throws InvalidArgument saying what is wrong with the launch.
  void validate(const Sizes &sizes, const BackwardTensors &tensors,
                const std::map<std::string, double> &params,
                const std::vector<uint64_t> &auxTensors) const;
  void launch(flashrt::Stream &stream, const BackwardTensors &tensors, const Sizes &sizes,
              const std::map<std::string, double> &params = {},
              const std::vector<uint64_t> &auxTensors = {}) const;

private:
  flashrt::KernelPackage kernelPackage;
  flashrt::Module module;
  flashrt::Function preprocess, main, convert;
  /// A package with a block summary: its summary kernel and how many of
  /// its CTAs the GPU holds at once (its grid is one wave of them).
  std::optional<flashrt::Function> summaryFunction;
  int64_t summaryResidentCtas = 0;
  /// Launches the summary kernel into `summary` with the launch's tensors
  /// (none where the summary is computed for later launches).
  void launchSummary(flashrt::Stream &stream, const BackwardTensors &tensors, const Sizes &sizes,
                     const std::map<std::string, double> &params,
                     const std::vector<uint64_t> &auxTensors, uint64_t summary) const;
};

class AttentionKernel {
public:
  /// JIT-loads the package's PTX and raises the kernel's dynamic shared
  /// memory limit when it needs more than 48 KiB; for a persistent grid,
  /// asks the occupancy calculator how many CTAs the GPU holds at once.
  AttentionKernel(flashrt::Context &context, flashrt::KernelPackage package);
  /// With the variant's backward package too (see backward()).
  AttentionKernel(flashrt::Context &context, flashrt::KernelPackage package,
                  flashrt::KernelPackage backwardPackage);

  const flashrt::KernelPackage &package() const { return kernelPackage; }
  const flashrt::Function &function() const { return kernelFunction; }

  /// Checks the launch against the package (sizes the variant fixes or
  /// ties, H divisible by HKV, alignment and stride rules, parameter names,
  /// one pointer per aux tensor) and throws InvalidArgument saying what is
  /// wrong. `params` overrides defaults by name.
  void validate(const Sizes &sizes, const TensorRef &q, const TensorRef &k, const TensorRef &v,
                const TensorRef &o, const std::map<std::string, double> &params,
                const std::vector<uint64_t> &tensors) const;

  /// Validates, then launches over grid (ceil(N / Br), H, B) (split keys:
  /// ceil(N / Br)·S CTAs in x, then the combine kernel; packed heads:
  /// ceil(G·N / Br) (·S) in x and HKV in y), or, for a persistent package, as many CTAs as fit at once (each draws tiles from
  /// the stream's tile counter). O is written in the package's element
  /// type, LSE as dense f32 [B, H, N].
  ///
  /// A package whose mask reads aux tensors (hasBlockSummary()) reads a
  /// block summary of them: `blockSummary` is one computeBlockSummary wrote
  /// for the same sizes, parameters and aux tensors (cache it across the
  /// layers and heads that share the mask), or 0, and the launch computes
  /// it first, on the same stream, into a buffer the kernel object keeps
  /// (so launches on two streams at once need their own summaries).
  void launch(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
              const TensorRef &v, const TensorRef &o, uint64_t lse, const Sizes &sizes,
              const std::map<std::string, double> &params = {},
              const std::vector<uint64_t> &tensors = {}, uint64_t blockSummary = 0) const;
  /// The launch of a package with a paged K/V cache (pageSize() > 0): k and
  /// v are the caches (TensorRef::pagedCache), `paged` the table and
  /// lengths. Throws InvalidArgument for a package without one, and
  /// launch() above does for a package with one.
  void launchPaged(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                   const TensorRef &v, const TensorRef &o, uint64_t lse, const Sizes &sizes,
                   const PagedKV &paged, const std::map<std::string, double> &params = {},
                   const std::vector<uint64_t> &tensors = {}) const;
  /// The launch of a varlen package (packsQueries() or packsKeys()): the
  /// packed tensors are TensorRef::packed, `varlen` their offsets; with a
  /// paged cache too (chunked prefill: packed queries over paged keys),
  /// `paged` its table and lengths. Throws InvalidArgument for a package
  /// that packs nothing, and the launches above do for one that does.
  void launchVarlen(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                    const TensorRef &v, const TensorRef &o, uint64_t lse, const Sizes &sizes,
                    const VarlenBatch &varlen, const PagedKV *paged = nullptr,
                    const std::map<std::string, double> &params = {},
                    const std::vector<uint64_t> &tensors = {}) const;
  bool packsQueries() const { return kernelPackage.packsQueries(); }
  bool packsKeys() const { return kernelPackage.packsKeys(); }
  /// Checks varlen offsets held on the host (B + 1 entries per packed side;
  /// null for a side the package does not pack) against `sizes` and the
  /// packed row counts: what the kernel cannot check on the device. Throws
  /// InvalidArgument naming the first bad entry.
  static void checkVarlenOffsets(const flashrt::KernelPackage &package, const Sizes &sizes,
                                 const int32_t *queryOffsets, int64_t queryRows,
                                 const int32_t *keyOffsets, int64_t keyRows);
  /// The page of the package's paged K/V cache in keys (0: dense K and V).
  int64_t pageSize() const { return kernelPackage.pageSize; }
  /// Checks a block table and key lengths held on the host (B x tableStride
  /// and B entries) against `sizes` and the cache's page count: what the
  /// kernel cannot check on the device. Throws InvalidArgument naming the
  /// first bad entry.
  static void checkPagedTable(const flashrt::KernelPackage &package, const Sizes &sizes,
                              const int32_t *blockTable, int64_t tableStride,
                              const int32_t *keyLengths, int64_t numPages);

  /// Split-keys packages (flash-decoding, `flashc --split-keys`): how many
  /// CTAs share each query tile's key blocks in a launch at `sizes`. The
  /// count set by setKeySplits, else keySplitsFor: 1 where the query tiles
  /// alone fill the GPU; otherwise the fewest splits whose waves reach 95%
  /// of the best fill (FlashAttention-2's rule, which stops at 85%), at
  /// most 128 and at most one per key block. Always 1 for other packages.
  int64_t keySplits(const Sizes &sizes) const;
  /// The automatic rule for `slots` CTAs resident at once.
  static int64_t keySplitsFor(const flashrt::KernelPackage &package, const Sizes &sizes,
                              int64_t slots);
  /// 0 (the default): keySplitsFor; otherwise launches use `splits` (1 to
  /// kMaxKeySplits; empty splits are allowed). Throws InvalidArgument for a
  /// package without split keys or a count out of range.
  void setKeySplits(int64_t splits);
  static constexpr int64_t kMaxKeySplits = 256;
  /// Bytes of the partial states of `splits` splits at `sizes` (f32 O and
  /// LSE per split and row), which launch() keeps per stream.
  size_t splitStateBytes(const Sizes &sizes, int64_t splits) const {
    return splitStateBytes(kernelPackage, sizes, splits);
  }
  /// The same from the package alone (no GPU needed).
  static size_t splitStateBytes(const flashrt::KernelPackage &package, const Sizes &sizes,
                                int64_t splits);

  /// Whether the package reads a block summary (its `summary` entry).
  bool hasBlockSummary() const { return kernelPackage.blockSummary; }
  /// Bytes of the block summary at `sizes`: one per (b, h, query tile, key
  /// block), b and h only where the mask reads them, then (4-aligned) the
  /// tile order the attention kernel runs its tiles in, one u32 per
  /// (b, h, query tile) of the summary (a backward package's summary has
  /// no order); 0 without one.
  size_t blockSummaryBytes(const Sizes &sizes) const {
    return blockSummaryBytes(kernelPackage, sizes);
  }
  /// The same from the package alone (no GPU needed).
  static size_t blockSummaryBytes(const flashrt::KernelPackage &package, const Sizes &sizes);
  /// Classifies every (query tile, key block) of the mask as empty, partial
  /// or full into `summary` (device memory of blockSummaryBytes(sizes)
  /// bytes), on `stream`, and orders the query tiles costliest first (the
  /// kernel object keeps the sort's counters, one set per stream). Throws InvalidArgument without a summary entry or
  /// for arguments launch() would refuse.
  void computeBlockSummary(flashrt::Stream &stream, const Sizes &sizes,
                           const std::map<std::string, double> &params,
                           const std::vector<uint64_t> &tensors, uint64_t summary) const;

  /// The backward pass (from the forward's O and LSE); throws
  /// InvalidArgument when the kernel was built without a backward package.
  void backward(flashrt::Stream &stream, const BackwardTensors &tensors, const Sizes &sizes,
                const std::map<std::string, double> &params = {},
                const std::vector<uint64_t> &auxTensors = {}) const;
  const BackwardKernel *backwardKernel() const { return backwardPass.get(); }

private:
  flashrt::KernelPackage kernelPackage;
  flashrt::Module module;
  flashrt::Function kernelFunction;
  std::optional<flashrt::Function> summaryFunction, combineFunction;
  /// Split-keys packages: CTAs of the main kernel resident at once, and
  /// the count setKeySplits fixed (0: automatic).
  int64_t splitSlots = 0, fixedKeySplits = 0;
  flashrt::Context *context;
  /// launch()'s summary when the caller passes none (grown as needed).
  mutable flashrt::DeviceBuffer ownSummary;
  std::shared_ptr<BackwardKernel> backwardPass;
  /// Persistent packages: the CTAs the GPU holds at once (the grid's cap).
  int64_t residentCtas = 0;
  /// Block-summary packages: the summary kernel's CTAs the GPU holds at
  /// once (its grid is one wave of them).
  int64_t summaryResidentCtas = 0;
  /// Counters a kernel leaves zero when it finishes, one set per stream
  /// launched on, so launches on two streams at once never share one.
  /// Launches on one stream are ordered.
  struct StreamCounters {
    std::mutex lock;
    std::map<CUstream_st *, flashrt::DeviceBuffer> byStream;
  };
  /// Persistent packages: the tile counter (two u32: tiles drawn, CTAs done).
  std::shared_ptr<StreamCounters> tileCounters = std::make_shared<StreamCounters>();
  /// Packages with a block summary: the tile order's counters (per summary
  /// row and query tile a u64 of CTAs done and cost, then a u32 cost; then
  /// the tiles done).
  std::shared_ptr<StreamCounters> orderCounters = std::make_shared<StreamCounters>();
  /// Split-keys packages: the partial states of a launch with S > 1.
  std::shared_ptr<StreamCounters> splitStates = std::make_shared<StreamCounters>();
  void launchWith(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                  const TensorRef &v, const TensorRef &o, uint64_t lse, const Sizes &sizes,
                  const PagedKV *paged, const VarlenBatch *varlen,
                  const std::map<std::string, double> &params,
                  const std::vector<uint64_t> &tensors, uint64_t blockSummary) const;
  /// The device address of `stream`'s counters in `counters`, at least
  /// `bytes` long (zeroed when new or grown).
  uint64_t streamCounters(StreamCounters &counters, const flashrt::Stream &stream,
                          size_t bytes) const;
};

} // namespace flashrun

#endif // FLASHRUN_ATTENTIONKERNEL_H
