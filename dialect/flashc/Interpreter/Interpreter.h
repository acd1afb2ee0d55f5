//===- Interpreter.h - Run flash IR on the host -----------------*- C++ -*-===//
//
// Executes a `flash.kernel` tile by tile on host buffers, with the same Br/Bc
// tiling, the same ops and the same fully-masked-row guard the GPU lowering
// receives. A GPU result that disagrees with it points at the lowering; an
// interpreter result that disagrees with the naive fp64 reference points at
// the front end or the dialect.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_INTERPRETER_INTERPRETER_H
#define FLASHC_INTERPRETER_INTERPRETER_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashc::interp {

/// Sizes of one launch, by flash::DimRole.
struct ProblemShape {
  int64_t sizes[flash::kNumDimRoles] = {1, 1, 1, 1, 1, 1};

  int64_t &operator[](flash::DimRole role) { return sizes[static_cast<int>(role)]; }
  int64_t operator[](flash::DimRole role) const { return sizes[static_cast<int>(role)]; }
  int64_t batch() const { return (*this)[flash::DimRole::Batch]; }
  int64_t heads() const { return (*this)[flash::DimRole::Heads]; }
  int64_t kvHeads() const { return (*this)[flash::DimRole::KVHeads]; }
  int64_t queryLen() const { return (*this)[flash::DimRole::QueryLen]; }
  int64_t keyLen() const { return (*this)[flash::DimRole::KeyLen]; }
  int64_t headDim() const { return (*this)[flash::DimRole::HeadDim]; }
  std::string str() const; // "B=2 H=4 HKV=4 N=1000 M=1000 D=64"
};

/// A dense row-major host tensor. Floating-point data is stored as f32
/// already rounded to its element type (bf16 inputs hold bf16 values);
/// integer aux tensors are stored exactly as doubles.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  int64_t numElements() const;
  /// Element at `indices`, or 0 outside the tensor (the aux-load rule).
  double at(llvm::ArrayRef<int64_t> indices) const;
};

/// A paged K/V cache (`#flash.paged_kv`): k and v hold [pages, page, HKV,
/// D] each, key j of sequence b is row j % page of page
/// table[b·tableStride + j / page], and sequence b has lengths[b] keys (at
/// most M, the launch's key length, which the table must cover).
struct PagedCache {
  int64_t pageSize = 0; // 0: K and V are dense [B, HKV, M, D]
  int64_t numPages = 0;
  int64_t tableStride = 0;      // table entries per sequence
  std::vector<int32_t> table;   // [B, tableStride]
  std::vector<int32_t> lengths; // [B]

  bool enabled() const { return pageSize > 0; }
};

/// A varlen batch (`#flash.varlen`): sequence b has offsets[b + 1] -
/// offsets[b] queries (keys), at most the launch's N (M). On the host its
/// tensors stay padded to the launch's sizes ([B, H, N, D] and so on, rows
/// past a sequence unused); the GPU harness packs them token-major.
/// Outputs' rows past a sequence are O = 0, LSE = -inf.
struct VarlenBatch {
  std::vector<int32_t> queryOffsets, keyOffsets; // [B + 1] each; empty: dense

  bool packsQueries() const { return !queryOffsets.empty(); }
  bool packsKeys() const { return !keyOffsets.empty(); }
};

/// Inputs of one launch. q: [B, H, N, D]; k, v: [B, HKV, M, D], or the
/// pages of `paged`.
struct AttentionInputs {
  ProblemShape shape;
  std::vector<float> q, k, v;
  llvm::StringMap<HostTensor> tensors; // aux tensors by name
  llvm::StringMap<double> params;      // overrides of parameter defaults
  /// A kernel with a `block_summary`: the summary to obey (a caller's own,
  /// or a test's planted one), flash::BlockSummaryShape bytes; empty: the
  /// interpreter computes it (computeBlockSummary). A forward kernel reads
  /// `blockSummary`, a backward kernel `backwardBlockSummary` (of its own
  /// tiling), so one set of inputs serves both passes.
  std::vector<uint8_t> blockSummary, backwardBlockSummary;
  /// A `split_keys` kernel: how many splits share each query tile's key
  /// blocks (the GPU launch's S; 1 runs the plain store).
  int64_t keySplits = 1;
  PagedCache paged;
  VarlenBatch varlen;
};

/// The keys sequence b has: M, or with a paged cache min(max(lengths[b],
/// 0), M) (what the GPU kernel clamps to as well), or with packed keys its
/// offsets' difference clamped so.
int64_t sequenceKeyLength(const AttentionInputs &inputs, int64_t b);
/// The queries sequence b has: N, or with packed queries its offsets'
/// difference clamped to [0, N].
int64_t sequenceQueryLength(const AttentionInputs &inputs, int64_t b);

/// Row j of KV head `kvHead` of sequence b in `source` (inputs.k or
/// inputs.v), through the block table where the cache is paged; null where
/// j is past the sequence or its page is outside the cache.
const float *keyValueRow(const AttentionInputs &inputs, const std::vector<float> &source,
                         int64_t b, int64_t kvHead, int64_t j);

/// Outputs: O [B, H, N, D] in the kernel's element type (stored as f32),
/// LSE [B, H, N] in f32.
struct AttentionOutputs {
  std::vector<float> out, lse;
  /// How the masks' (query tile, key block) pairs were classified: proved
  /// empty (skipped), proved full (no mask math) or partial (evaluated).
  struct TileCounts {
    int64_t empty = 0, full = 0, partial = 0;
  } tiles;
};

/// Checks `inputs` against the kernel's signature (fixed sizes, tied
/// dimensions, H divisible by HKV, aux tensors present with their shapes,
/// parameters declared). Returns an empty string when they fit, else why not.
/// `withQKV` false: q, k and v are not checked (inputs of
/// makeRandomAuxInputs, which leaves them on the GPU).
std::string checkInputs(flash::KernelSignature kernel, const AttentionInputs &inputs,
                        bool withQKV = true);

/// Runs `kernel` over the whole grid. Outputs are resized and poisoned with
/// NaN first, so a row the kernel never stores stays NaN. On failure returns
/// a message naming the op that could not run.
struct RunOptions {
  /// Also evaluate every classified mask on its whole tile (inside the
  /// problem) and fail, naming the tile and element, when a claim of
  /// flash-classify-tiles is false: a tile proved empty with a visible
  /// element, a tile proved full with a masked one, a row band proved empty
  /// with a visible element. Costs a full mask evaluation per tile.
  bool checkClassification = false;
};

mlir::LogicalResult runKernel(flash::KernelOp kernel, const AttentionInputs &inputs,
                              AttentionOutputs &outputs, std::string &error,
                              const RunOptions &options = {});

/// The block summary of `kernel` (a flash.kernel or flash.backward_kernel
/// with a `block_summary`) for `inputs`: each (b, h, qt, kt) of its tiling
/// classified by evaluating the mask on every element inside the problem
/// (i < N, j < M): kBlockEmpty, kBlockPartial or kBlockFull. What the GPU's
/// summary kernel must produce.
mlir::LogicalResult computeBlockSummary(flash::KernelSignature kernel,
                                        const AttentionInputs &inputs,
                                        std::vector<uint8_t> &summary, std::string &error);

/// What the backward pass reads besides the forward's inputs, all
/// [B, H, N, ...] like q.
struct BackwardInputs {
  std::vector<float> out;        // O of the forward, in its element type
  std::vector<float> lse;        // LSE of the forward (f32)
  std::vector<float> outputGrad; // dO, in the element type
};

/// Gradients: dQ [B, H, N, D], dK and dV [B, HKV, M, D] in the kernel's
/// element type (stored as f32), Δ [B, H, N] from the preprocess, and one
/// f32 gradient per float aux tensor the score reads (by name, the tensor's
/// shape); tensors the score does not read have none.
struct AttentionGradients {
  std::vector<float> dq, dk, dv, delta;
  llvm::StringMap<std::vector<float>> tensorGrads;
  AttentionOutputs::TileCounts tiles;
};

/// Runs the backward kernel: preprocess over every (b, h, qt), then main
/// over every (b, kv_head, kt), then dQ's conversion. Outputs are poisoned
/// with NaN first, like runKernel's.
mlir::LogicalResult runBackwardKernel(flash::BackwardKernelOp kernel,
                                      const AttentionInputs &inputs,
                                      const BackwardInputs &backwardInputs,
                                      AttentionGradients &gradients, std::string &error,
                                      const RunOptions &options = {});

/// Rounds to the nearest representable value of `type` (bf16, f16 or f32),
/// ties to even, as the GPU's conversions do.
float roundToElementType(float value, mlir::Type type);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_INTERPRETER_H
