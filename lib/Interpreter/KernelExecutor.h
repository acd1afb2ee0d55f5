//===- KernelExecutor.h - The interpreter's executor ------------*- C++ -*-===//
//
// Private to lib/Interpreter. One executor runs one kernel op over its grid:
// the forward `flash.kernel` (Interpreter.cpp) or the two regions of a
// `flash.backward_kernel` (Backward.cpp). It keeps a value per SSA value: a
// scalar (double) or a tile (f32 array). Tile ops do exactly what their
// descriptions in FlashOps.td / FlashBackwardOps.td say, in f32; regions run
// as compiled scalar programs (ScalarProgram.h).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_INTERPRETER_KERNELEXECUTOR_H
#define FLASHC_LIB_INTERPRETER_KERNELEXECUTOR_H

#include "flashc/Interpreter/Interpreter.h"

#include "ScalarProgram.h"

#include <limits>
#include <memory>

namespace flashc::interp::detail {

/// A row-major f32 tile; 1-D tiles (row vectors) have cols == 1.
struct Tile {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;

  Tile(int64_t rows, int64_t cols, float fill = 0.0f)
      : rows(rows), cols(cols), data(rows * cols, fill) {}
  float &operator()(int64_t r, int64_t c) { return data[r * cols + c]; }
  float operator()(int64_t r, int64_t c) const { return data[r * cols + c]; }
};
using TilePtr = std::shared_ptr<const Tile>;

/// What an SSA value holds during execution.
struct RuntimeValue {
  double scalar = 0;
  TilePtr tile;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// scale · A·Bᵀ for a rows x D tile A and a block x D tile B, in f32: the
/// qk_dot and output_grad_dot GEMMs.
Tile rowsTimesBlock(const Tile &rows, const Tile &block, float scale = 1.0f);

class KernelExecutor {
public:
  /// Runs a forward kernel into `outputs`.
  KernelExecutor(flash::KernelOp kernel, const AttentionInputs &inputs,
                 AttentionOutputs &outputs, const RunOptions &options);
  /// Runs a backward kernel into `gradients`.
  KernelExecutor(flash::BackwardKernelOp kernel, const AttentionInputs &inputs,
                 const BackwardInputs &backwardInputs, AttentionGradients &gradients,
                 const RunOptions &options);

  mlir::LogicalResult run(std::string &error);
  /// computeBlockSummary: classifies every tile of the kernel's mask.
  mlir::LogicalResult summarize(std::vector<uint8_t> &summary, std::string &error);

private:
  void initialize();
  mlir::LogicalResult fail(mlir::Operation *op, const llvm::Twine &message);

  /// The returned reference is valid only until the next get/setTile of a
  /// value not seen before (DenseMap insertion may rehash): never hold it
  /// across one. initialize() reserves a slot per SSA value of the kernel.
  RuntimeValue &get(mlir::Value value) { return values[value]; }
  const Tile &tile(mlir::Value value) { return *values[value].tile; }
  double scalar(mlir::Value value) { return values[value].scalar; }
  int64_t index(mlir::Value value) { return static_cast<int64_t>(values[value].scalar); }
  void setTile(mlir::Value value, Tile &&tile) {
    values[value].tile = std::make_shared<const Tile>(std::move(tile));
  }

  /// Executes the ops of `block` up to its terminator and returns the
  /// terminator's operand values.
  mlir::LogicalResult execBlock(mlir::Block &block,
                                llvm::SmallVectorImpl<RuntimeValue> &yielded);
  mlir::LogicalResult execOp(mlir::Operation &op);
  mlir::LogicalResult execScalar(mlir::Operation &op);
  mlir::LogicalResult execFor(mlir::scf::ForOp loop);
  mlir::LogicalResult execConstant(mlir::arith::ConstantOp op);
  mlir::LogicalResult execElementRegion(mlir::Operation *op, mlir::Value scores,
                                        mlir::Value batch, mlir::Value head,
                                        mlir::Value queryTile, mlir::Value keyTile,
                                        bool isMask);
  mlir::LogicalResult execMask(flash::MaskOp mask);
  /// The compiled program of a score_mod, mask or score_mod_grad region.
  mlir::FailureOr<const RegionProgram *> regionProgram(mlir::Operation *op);
  /// A region's program with its slots, the captured scalars filled in (the
  /// arguments' slots are the caller's to set); fails on a captured tile.
  struct BoundRegion {
    const RegionProgram *program;
    std::vector<double> slots;
  };
  mlir::FailureOr<BoundRegion> bindRegion(mlir::Operation *op);
  /// RunOptions::checkClassification: evaluates `mask` on every element of
  /// its tile inside the problem (i < N, j < M) and fails when a claim of
  /// flash-classify-tiles (tile empty, tile full, row band empty) is false.
  mlir::LogicalResult checkClaims(flash::MaskOp mask);
  /// Evaluates `mask` on every element of its tile inside the problem
  /// (i < N, j < M), row by row, calling visit(row, col, visible) until it
  /// returns false.
  mlir::LogicalResult visitTileElements(flash::MaskOp mask,
                                        llvm::function_ref<bool(int64_t, int64_t, bool)> visit);
  /// The class (flash::kBlockEmpty/Partial/Full) of the tile the operands
  /// of `mask` name, from every element inside the problem.
  mlir::FailureOr<int> classifyElements(flash::MaskOp mask);
  /// Executes the scalar ops the values `mask`'s region captures depend on
  /// (kernel-level and loop-body ones), for the current b, h, qt and kt.
  mlir::LogicalResult execCaptures(flash::MaskOp mask);
  /// A kernel with a block_summary: the caller's summary for this kind of
  /// kernel (its size checked) or, when it gives none, the one summarize
  /// computes.
  mlir::LogicalResult loadBlockSummary();

  /// Where row `r` of query tile `queryTile` of a tile `rows` tall lives:
  /// its query head and position, and whether it is inside the problem. A
  /// packed_heads kernel's `head` is the KV head and its tile's rows are
  /// the group's packed rows (flash.kernel).
  struct QueryRow {
    int64_t head, position;
    bool inside;
  };
  QueryRow queryRow(int64_t head, int64_t queryTile, int64_t rows, int64_t r) const {
    int64_t row = queryTile * rows + r;
    if (!packedHeads)
      return {head, row, row < currentQueryLength()};
    return {head * groupSize + row % groupSize, row / groupSize,
            row < groupSize * inputs.shape.queryLen()};
  }

  // Forward tile ops (Interpreter.cpp).
  /// The Q tile of (b, head, tile), row by row through queryRow.
  void loadQueryRows(mlir::Value result, int64_t b, int64_t head, int64_t tileIndex);
  /// Rows of (b, head) of a [B, heads, length, D] tensor; rows at or past
  /// `bound` (the sequence's length) stay zero.
  void loadRows(mlir::Value result, const std::vector<float> &source, int64_t b,
                int64_t head, int64_t heads, int64_t length, int64_t bound, int64_t tileIndex);
  /// A K or V block of a paged cache, row by row through the block table.
  void loadPagedRows(mlir::Value result, const std::vector<float> &source, int64_t b,
                     int64_t kvHead, int64_t tileIndex);
  /// The key length of the kernel instance running (M, or its sequence's).
  int64_t currentKeyLength() const { return static_cast<int64_t>(env.sequenceKeyLength); }
  /// The query length of the kernel instance running (N, or its sequence's).
  int64_t currentQueryLength() const { return static_cast<int64_t>(env.sequenceQueryLength); }
  void onlineSoftmax(flash::OnlineSoftmaxOp op);
  Tile accumulate(const Tile *acc, const Tile *alpha, const Tile &probs, const Tile &value);
  void finalize(flash::FinalizeOp op);
  void store(flash::StoreOp op);
  /// With keySplits > 1: merges the splits' partial O and LSE of every row
  /// by LSE (the GPU's combine kernel, in f32) into the outputs.
  void combineSplits();
  mlir::LogicalResult runForward();

  // Backward ops (Backward.cpp); Default falls through to execScalar.
  mlir::LogicalResult execBackwardOp(mlir::Operation &op);
  mlir::LogicalResult execScoreModGrad(flash::ScoreModGradOp op);
  void loadRowStat(flash::LoadRowStatOp op);
  void storeDelta(flash::StoreDeltaOp op);
  void storeKeyGrads(flash::StoreKeyGradsOp op);
  void addQueryGrad(flash::QueryGradAddOp op);
  mlir::LogicalResult runBackward();

  mlir::Operation *kernelOp;
  flash::KernelSignature signature;
  const AttentionInputs &inputs;
  AttentionOutputs *outputs = nullptr;              // forward
  const BackwardInputs *backwardInputs = nullptr;   // backward
  AttentionGradients *gradients = nullptr;          // backward
  std::vector<float> queryGradAccum;                // backward: dQ in f32
  std::vector<uint8_t> blockSummary;                // a kernel with a block_summary
  /// Forward with keySplits > 1: per split, O (f32, [B, H, N, D]) and LSE.
  std::vector<std::vector<float>> splitOut, splitLse;
  flash::BlockSummaryShape summaryShape;
  AttentionOutputs::TileCounts *tiles = nullptr;
  RunOptions options;
  flash::TileConfigAttr config;
  mlir::Type elementType;
  /// A packed_heads kernel and its G = H / HKV.
  bool packedHeads = false;
  int64_t groupSize = 1;
  LaunchEnv env;
  llvm::DenseMap<mlir::Value, RuntimeValue> values;
  llvm::DenseMap<mlir::Operation *, ScalarInstr> scalarCache;
  llvm::DenseMap<mlir::Operation *, RegionProgram> regionCache;
  std::string errorMessage;
};

} // namespace flashc::interp::detail

#endif // FLASHC_LIB_INTERPRETER_KERNELEXECUTOR_H
