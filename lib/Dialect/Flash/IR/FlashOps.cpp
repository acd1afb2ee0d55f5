//===- FlashOps.cpp - Operations of the flash dialect ---------------------===//
//
// Verifiers. Each op checks the shape rules it can see locally (the inner
// dimensions of a dot agree, a row vector has one entry per tile row); ops
// nested in a `flash.kernel` also check their tiles against its `#flash.tile`.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

using namespace mlir;
using namespace flashc::flash;

#include "flashc/Dialect/Flash/IR/FlashInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "flashc/Dialect/Flash/IR/FlashOps.cpp.inc"

namespace {

/// Tile config of the kernel around `op`, or null outside a kernel.
TileConfigAttr enclosingTileConfig(Operation *op) {
  auto kernel = op->getParentOfType<KernelSignature>();
  return kernel ? kernel.getConfig() : TileConfigAttr();
}

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<ShapedType>(value.getType()).getShape();
}

/// Emits "<what> must be AxB (<why>), got CxD" unless `actual` == `expected`.
LogicalResult expectShape(Operation *op, StringRef what, ArrayRef<int64_t> actual,
                          ArrayRef<int64_t> expected, StringRef why) {
  if (actual == expected)
    return success();
  auto printShape = [](InFlightDiagnostic &diag, ArrayRef<int64_t> shape) {
    llvm::interleave(shape, [&](int64_t d) { diag << d; }, [&] { diag << "x"; });
  };
  InFlightDiagnostic diag = op->emitOpError() << what << " must be ";
  printShape(diag, expected);
  diag << " (" << why << "), got ";
  printShape(diag, actual);
  return diag;
}

/// A row vector must have one entry per row of the tile it goes with.
LogicalResult expectRowVector(Operation *op, StringRef what, Value vector,
                              int64_t rows) {
  return expectShape(op, what, shapeOf(vector), {rows}, "one entry per query row");
}

/// Checks a tile against the kernel's tile config when there is one.
LogicalResult expectConfigTile(Operation *op, StringRef what, Value tile,
                               bool keyRows) {
  TileConfigAttr config = enclosingTileConfig(op);
  if (!config)
    return success();
  int64_t rows = keyRows ? config.getBc() : config.getBr();
  return expectShape(op, what, shapeOf(tile), {rows, config.getHeadDim()},
                     keyRows ? "Bc x D of the kernel's #flash.tile"
                             : "Br x D of the kernel's #flash.tile");
}

LogicalResult expectKernelElementType(Operation *op, Value tile) {
  auto kernel = op->getParentOfType<KernelSignature>();
  if (!kernel)
    return success();
  Type element = cast<ShapedType>(tile.getType()).getElementType();
  if (element != kernel.getElementType())
    return op->emitOpError() << "tile element type " << element
                             << " differs from the kernel's element type "
                             << kernel.getElementType();
  return success();
}

/// Checks that P (Br x Bc) times V (Bc x D) adds into A (Br x D).
LogicalResult verifyPVShapes(Operation *op, Value acc, Value probs, Value value) {
  ArrayRef<int64_t> a = shapeOf(acc), p = shapeOf(probs), v = shapeOf(value);
  if (failed(expectShape(op, "probabilities", p, {a[0], v[0]},
                         "accumulator rows x value rows")) ||
      failed(expectShape(op, "value block", v, {p[1], a[1]},
                         "probability columns x accumulator columns")))
    return failure();
  return expectConfigTile(op, "accumulator", acc, /*keyRows=*/false);
}

} // namespace

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

// Print the program coordinates as %b, %h, %qt instead of %arg0...
void KernelOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setNameFn) {
  static const char *names[] = {"b", "h", "qt", "s"};
  for (auto [arg, name] : llvm::zip(region.getArguments(), names))
    setNameFn(arg, name);
}

/// The signature checks shared by flash.kernel and flash.backward_kernel.
static LogicalResult verifySignature(KernelSignature kernel) {
  Type element = kernel.getElementType();
  if (!element.isBF16() && !element.isF16() && !element.isF32())
    return kernel->emitOpError() << "element type must be bf16, f16 or f32, got " << element;

  ArrayRef<int64_t> sizes = kernel.getStaticSizes();
  ArrayRef<int64_t> classes = kernel.getDimClasses();
  if (sizes.size() != kNumDimRoles || classes.size() != kNumDimRoles)
    return kernel->emitOpError() << "static_sizes and dim_classes need one entry per "
                            "dimension role ("
                         << kNumDimRoles << ")";
  for (int role = 0; role < kNumDimRoles; ++role) {
    if (sizes[role] != -1 && sizes[role] < 1)
      return kernel->emitOpError() << "static size of "
                           << stringifyDimRole(static_cast<DimRole>(role))
                           << " must be -1 or positive, got " << sizes[role];
    if (classes[role] < 0 || classes[role] > role ||
        classes[classes[role]] != classes[role])
      return kernel->emitOpError() << "dim_classes entry " << role
                           << " must name the smallest role of its class";
  }
  int64_t headDim = sizes[static_cast<int>(DimRole::HeadDim)];
  if (headDim != -1 && headDim != kernel.getConfig().getHeadDim())
    return kernel->emitOpError() << "head dim fixed to " << headDim
                         << " but the tile config says " << kernel.getConfig().getHeadDim();

  llvm::StringSet<> names;
  for (Attribute attr : kernel.getParams())
    if (!names.insert(cast<ParamAttr>(attr).getName().getValue()).second)
      return kernel->emitOpError() << "duplicate declaration '"
                           << cast<ParamAttr>(attr).getName().getValue() << "'";
  for (Attribute attr : kernel.getTensors())
    if (!names.insert(cast<AuxTensorAttr>(attr).getName().getValue()).second)
      return kernel->emitOpError() << "duplicate declaration '"
                           << cast<AuxTensorAttr>(attr).getName().getValue() << "'";
  return success();
}

LogicalResult KernelOp::verify() { return verifySignature(*this); }

LogicalResult KernelOp::verifyRegions() {
  Block &entry = getEntryBlock();
  bool allIndices = llvm::all_of(entry.getArgumentTypes(),
                                 [](Type type) { return type.isIndex(); });
  if (getSplitKeys()) {
    if (entry.getNumArguments() != 4 || !allIndices)
      return emitOpError("body of a split_keys kernel must take four index arguments (batch, "
                         "head, query tile, split)");
  } else if (entry.getNumArguments() != 3 || !allIndices) {
    return emitOpError("body must take three index arguments (batch, head, "
                       "query tile)");
  }
  if (getPagedKvAttr() && getBlockSummaryAttr())
    return emitOpError("a paged_kv kernel cannot read a block summary (its tiles assume one key "
                       "length for every sequence)");
  if (VarlenAttr varlen = getVarlenAttr()) {
    if (getBlockSummaryAttr())
      return emitOpError("a varlen kernel cannot read a block summary (its tiles assume one "
                         "length for every sequence)");
    if (!varlen.getQueries().getValue().empty() && (getSplitKeys() || getPackedHeads()))
      return emitOpError("a varlen kernel with packed queries cannot be split_keys or "
                         "packed_heads (their rows are laid out by the launch's N)");
    if (!varlen.getKeys().getValue().empty() && getPagedKvAttr())
      return emitOpError("a varlen kernel cannot pack keys that a paged_kv cache holds");
  }
  if (getPackedHeads()) {
    if (getBlockSummaryAttr())
      return emitOpError("a packed_heads kernel cannot read a block summary (its tiles "
                         "are per query head)");
    WalkResult found = walk([](KVHeadOp op) {
      op.emitOpError("is not needed in a packed_heads kernel: its head argument is the "
                     "KV head");
      return WalkResult::interrupt();
    });
    if (found.wasInterrupted())
      return failure();
    // What a row is depends on the kernel's tile: the ops that address rows
    // must name the kernel's own head and query tile (the GPU maps the rows
    // once, from them).
    Value head = getHead(), queryTile = getQueryTile();
    auto check = [&](Operation *op, Value opHead, Value opTile) {
      if (opHead == head && opTile == queryTile)
        return WalkResult::advance();
      op->emitOpError("in a packed_heads kernel must address the kernel's own head and "
                      "query tile (its block arguments)");
      return WalkResult::interrupt();
    };
    found = walk([&](Operation *op) {
      if (auto load = dyn_cast<LoadQOp>(op))
        return check(op, load.getHead(), load.getQueryTile());
      if (auto store = dyn_cast<StoreOp>(op))
        return check(op, store.getHead(), store.getQueryTile());
      if (auto mod = dyn_cast<ScoreModOp>(op))
        return check(op, mod.getHead(), mod.getQueryTile());
      if (auto mask = dyn_cast<MaskOp>(op))
        return check(op, mask.getHead(), mask.getQueryTile());
      return WalkResult::advance();
    });
    if (found.wasInterrupted())
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Scalars
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelSignature>();
  if (!kernel)
    return emitOpError("must be nested in a flash.kernel or flash.backward_kernel");
  ParamAttr param = kernel.lookupParam(getName());
  if (!param)
    return emitOpError() << "reads undeclared parameter '" << getName() << "'";
  if (param.getType() != getType())
    return emitOpError() << "parameter '" << getName() << "' is "
                         << param.getType() << ", not " << getType();
  return success();
}

LogicalResult AuxLoadOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelSignature>();
  if (!kernel)
    return emitOpError("must be nested in a flash.kernel or flash.backward_kernel");
  AuxTensorAttr tensor = kernel.lookupTensor(getTensor());
  if (!tensor)
    return emitOpError() << "reads undeclared tensor '" << getTensor() << "'";
  if (static_cast<int64_t>(getIndices().size()) != tensor.getRank())
    return emitOpError() << "tensor '" << getTensor() << "' has rank "
                         << tensor.getRank() << " but is indexed with "
                         << getIndices().size() << " indices";
  Type expected = tensor.getElementType().isSignlessInteger(32)
                      ? Type(IntegerType::get(getContext(), 32))
                      : Type(Float32Type::get(getContext()));
  if (getType() != expected)
    return emitOpError() << "elements of '" << getTensor() << "' read as "
                         << expected << ", not " << getType();
  return success();
}

LogicalResult BlockClassOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelSignature>();
  if (!kernel)
    return emitOpError("must be nested in a flash.kernel or flash.backward_kernel");
  if (!kernel.getBlockSummaryAttr())
    return emitOpError("needs a kernel with a block_summary");
  return success();
}

//===----------------------------------------------------------------------===//
// Tile movement
//===----------------------------------------------------------------------===//

LogicalResult LoadQOp::verify() {
  if (failed(expectConfigTile(*this, "query tile", getResult(), false)))
    return failure();
  return expectKernelElementType(*this, getResult());
}

LogicalResult LoadKVOp::verify() {
  if (failed(expectConfigTile(*this, "key/value block", getResult(), true)))
    return failure();
  return expectKernelElementType(*this, getResult());
}

LogicalResult StoreOp::verify() {
  if (failed(expectRowVector(*this, "lse", getLse(), shapeOf(getOutput())[0])))
    return failure();
  auto kernel = (*this)->getParentOfType<KernelOp>();
  bool splitKernel = kernel && kernel.getSplitKeys();
  if (splitKernel && !getSplit())
    return emitOpError("in a split_keys kernel must name its split");
  if (!splitKernel && getSplit())
    return emitOpError("names a split outside a split_keys kernel");
  return expectConfigTile(*this, "output tile", getOutput(), false);
}

LogicalResult SplitKeyRangeOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelOp>();
  if (!kernel || !kernel.getSplitKeys())
    return emitOpError("must be nested in a flash.kernel with split_keys");
  return success();
}

//===----------------------------------------------------------------------===//
// Scores
//===----------------------------------------------------------------------===//

/// Shared by qk_dot (Q·Kᵀ) and output_grad_dot (dO·Vᵀ): a Br x D tile times
/// a transposed Bc x D block of the same element type gives Br x Bc.
static LogicalResult verifyRowsTimesBlock(Operation *op, Value rows, Value block, Value result,
                                          StringRef rowsName, StringRef blockName) {
  ArrayRef<int64_t> r = shapeOf(rows), k = shapeOf(block);
  if (r[1] != k[1])
    return op->emitOpError() << rowsName << " head dim " << r[1] << " differs from "
                             << blockName << " head dim " << k[1];
  if (cast<ShapedType>(rows.getType()).getElementType() !=
      cast<ShapedType>(block.getType()).getElementType())
    return op->emitOpError() << rowsName << " and " << blockName << " element types differ";
  if (failed(expectShape(op, "result", shapeOf(result), {r[0], k[0]},
                         (rowsName + " rows x " + blockName + " rows").str())) ||
      failed(expectConfigTile(op, (rowsName + " tile").str(), rows, false)))
    return failure();
  return expectConfigTile(op, (blockName + " block").str(), block, true);
}

LogicalResult QKDotOp::verify() {
  return verifyRowsTimesBlock(*this, getQuery(), getKey(), getResult(), "query", "key");
}

/// Shared by score_mod and mask: the region's arguments and yielded type.
static LogicalResult verifyElementRegion(Operation *op, Region &body,
                                         bool takesScore, Type yieldType) {
  MLIRContext *ctx = op->getContext();
  Type i32 = IntegerType::get(ctx, 32), f32 = Float32Type::get(ctx);
  SmallVector<Type> expected;
  if (takesScore)
    expected.push_back(f32);
  expected.append(4, i32);
  Block &block = body.front();
  if (TypeRange(block.getArgumentTypes()) != TypeRange(expected)) {
    InFlightDiagnostic diag = op->emitOpError("region must take (");
    diag << (takesScore ? "s: f32, " : "") << "b, h, i, j: i32)";
    return diag;
  }
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return op->emitOpError("region must end with flash.yield");
  if (yield.getValue().getType() != yieldType)
    return op->emitOpError() << "region must yield " << yieldType << ", got "
                             << yield.getValue().getType();
  return success();
}

/// Region arguments print as %s, %b, %h, %i, %j (masks have no %s).
static void nameElementRegionArgs(Region &region, bool takesScore,
                                  OpAsmSetValueNameFn setNameFn) {
  static const char *names[] = {"s", "b", "h", "i", "j"};
  ArrayRef<const char *> used = ArrayRef(names).drop_front(takesScore ? 0 : 1);
  for (auto [arg, name] : llvm::zip(region.getArguments(), used))
    setNameFn(arg, name);
}

void ScoreModOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setNameFn) {
  nameElementRegionArgs(region, /*takesScore=*/true, setNameFn);
}

void MaskOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setNameFn) {
  nameElementRegionArgs(region, /*takesScore=*/false, setNameFn);
}

LogicalResult ScoreModOp::verifyRegions() {
  return verifyElementRegion(*this, getBody(), /*takesScore=*/true,
                             Float32Type::get(getContext()));
}

LogicalResult MaskOp::verify() {
  if (static_cast<bool>(getAllVisible()) != static_cast<bool>(getAnyVisible()))
    return emitOpError("all_visible and any_visible come together");
  size_t groups = getRowsVisible().size();
  if (groups == 0)
    return success();
  if (!isClassified())
    return emitOpError("row_groups need classified(all_visible, any_visible)");
  int64_t rows = shapeOf(getScores())[0];
  if (groups < 2 || rows % static_cast<int64_t>(groups))
    return emitOpError("row_groups must split the ")
           << rows << " rows into two or more equal bands, got " << groups;
  return success();
}

LogicalResult MaskOp::verifyRegions() {
  return verifyElementRegion(*this, getBody(), /*takesScore=*/false,
                             IntegerType::get(getContext(), 1));
}

//===----------------------------------------------------------------------===//
// Online softmax and accumulation
//===----------------------------------------------------------------------===//

LogicalResult OnlineSoftmaxOp::verify() {
  if (FloatAttr scale = getExp2ScaleAttr(); scale && !(scale.getValueAsDouble() > 0))
    return emitOpError("exp2_scale must be positive");
  return expectRowVector(*this, "running max", getMax(), shapeOf(getScores())[0]);
}

LogicalResult RescaleOp::verify() {
  if (failed(expectRowVector(*this, "alpha", getAlpha(), shapeOf(getAcc())[0])))
    return failure();
  return expectConfigTile(*this, "accumulator", getAcc(), false);
}

LogicalResult PVAccumulateOp::verify() {
  return verifyPVShapes(*this, getAcc(), getProbs(), getValue());
}

LogicalResult RescaleAccumulateOp::verify() {
  if (failed(expectRowVector(*this, "alpha", getAlpha(), shapeOf(getAcc())[0])))
    return failure();
  return verifyPVShapes(*this, getAcc(), getProbs(), getValue());
}

LogicalResult FinalizeOp::verify() {
  if (!(getMaxScale().convertToFloat() > 0))
    return emitOpError("max_scale must be positive");
  if (failed(expectRowVector(*this, "running max", getMax(), shapeOf(getAcc())[0])))
    return failure();
  return expectConfigTile(*this, "accumulator", getAcc(), false);
}

//===----------------------------------------------------------------------===//
// Backward pass
//===----------------------------------------------------------------------===//

LogicalResult BackwardKernelOp::verify() {
  // Ordered adds take the deterministic mode's paths, whose aux gradients
  // are fixed point in scratch that only a deterministic package has.
  if (getOrderedQueryGrads() && !getTensors().empty())
    return emitOpError("ordered_query_grads applies to kernels without aux tensors (their "
                       "gradients would need the deterministic mode's fixed-point scratch)");
  if (getOrderedQueryGrads() && getQueryGradWriter())
    return emitOpError("query_grad_writer and ordered_query_grads exclude each other (the "
                       "order takes the writer already)");
  return verifySignature(*this);
}

LogicalResult BackwardKernelOp::verifyRegions() {
  auto takesThreeIndices = [](Block &block) {
    return block.getNumArguments() == 3 &&
           llvm::all_of(block.getArgumentTypes(), [](Type type) { return type.isIndex(); });
  };
  if (!takesThreeIndices(getPreprocessBlock()))
    return emitOpError("preprocess must take three index arguments (batch, head, "
                       "query tile)");
  if (!takesThreeIndices(getMainBlock()))
    return emitOpError("main must take three index arguments (batch, kv head, "
                       "key tile)");
  return success();
}

// Print %b, %h, %qt in preprocess and %b, %kv_head, %kt in main.
void BackwardKernelOp::getAsmBlockArgumentNames(Region &region,
                                                OpAsmSetValueNameFn setNameFn) {
  static const char *preprocessNames[] = {"b", "h", "qt"};
  static const char *mainNames[] = {"b", "kv_head", "kt"};
  ArrayRef<const char *> names = &region == &getPreprocess() ? ArrayRef(preprocessNames)
                                                             : ArrayRef(mainNames);
  for (auto [arg, name] : llvm::zip(region.getArguments(), names))
    setNameFn(arg, name);
}

/// Ops that belong to one region of a backward kernel say so.
static LogicalResult expectBackwardRegion(Operation *op, bool preprocess) {
  auto kernel = op->getParentOfType<BackwardKernelOp>();
  Region *region = &(preprocess ? kernel.getPreprocess() : kernel.getBody());
  if (region->isAncestor(op->getParentRegion()))
    return success();
  return op->emitOpError() << "belongs in the " << (preprocess ? "preprocess" : "main")
                           << " region of flash.backward_kernel";
}

LogicalResult LoadRowsOp::verify() {
  if (failed(expectConfigTile(*this, "row tile", getResult(), false)))
    return failure();
  return expectKernelElementType(*this, getResult());
}

LogicalResult LoadRowStatOp::verify() {
  if (TileConfigAttr config = enclosingTileConfig(*this))
    return expectRowVector(*this, "row statistic", getResult(), config.getBr());
  return success();
}

LogicalResult StoreDeltaOp::verify() {
  if (failed(expectBackwardRegion(*this, /*preprocess=*/true)))
    return failure();
  return expectRowVector(*this, "delta", getDelta(), enclosingTileConfig(*this).getBr());
}

LogicalResult StoreKeyGradsOp::verify() {
  if (failed(expectBackwardRegion(*this, /*preprocess=*/false)) ||
      failed(expectConfigTile(*this, "key gradient", getKeyGrad(), true)) ||
      failed(expectConfigTile(*this, "value gradient", getValueGrad(), true)))
    return failure();
  if (!(getKeyScale().convertToFloat() > 0))
    return emitOpError("key_scale must be positive");
  return success();
}

LogicalResult QueryGradAddOp::verify() {
  ArrayRef<int64_t> ds = shapeOf(getScoreGrad()), k = shapeOf(getKey());
  if (failed(expectShape(*this, "key block", k, {ds[1], k[1]},
                         "score-gradient columns x head dim")) ||
      failed(expectConfigTile(*this, "key block", getKey(), true)))
    return failure();
  if (TileConfigAttr config = enclosingTileConfig(*this))
    if (failed(expectShape(*this, "score gradient", ds, {config.getBr(), config.getBc()},
                           "Br x Bc of the kernel's #flash.tile")))
      return failure();
  return expectKernelElementType(*this, getKey());
}

LogicalResult RowDotOp::verify() {
  if (failed(expectRowVector(*this, "result", getResult(), shapeOf(getLhs())[0])))
    return failure();
  return expectConfigTile(*this, "row tile", getLhs(), false);
}

LogicalResult RecomputeProbsOp::verify() {
  if (FloatAttr attr = getScoreScaleAttr();
      attr && !(std::isfinite(attr.getValueAsDouble()) && attr.getValueAsDouble() > 0))
    return emitOpError("score_scale must be positive and finite, got ") << attr.getValueAsDouble();
  return expectRowVector(*this, "lse", getLse(), shapeOf(getScores())[0]);
}

LogicalResult OutputGradDotOp::verify() {
  return verifyRowsTimesBlock(*this, getOutputGrad(), getValue(), getResult(),
                              "output-gradient", "value");
}

LogicalResult SoftmaxGradOp::verify() {
  return expectRowVector(*this, "delta", getDelta(), shapeOf(getProbs())[0]);
}

void ScoreModGradOp::getAsmBlockArgumentNames(Region &region,
                                              OpAsmSetValueNameFn setNameFn) {
  static const char *names[] = {"g", "s", "b", "h", "i", "j"};
  for (auto [arg, name] : llvm::zip(region.getArguments(), names))
    setNameFn(arg, name);
}

LogicalResult ScoreModGradOp::verifyRegions() {
  MLIRContext *ctx = getContext();
  Type i32 = IntegerType::get(ctx, 32), f32 = Float32Type::get(ctx);
  Block &block = getBody().front();
  if (TypeRange(block.getArgumentTypes()) != TypeRange({f32, f32, i32, i32, i32, i32}))
    return emitOpError("region must take (g, s: f32, b, h, i, j: i32)");
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValue().getType() != f32)
    return emitOpError("region must end with flash.yield of an f32");
  return success();
}

LogicalResult AuxGradAddOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelSignature>();
  if (!kernel)
    return emitOpError("must be nested in a flash.backward_kernel");
  AuxTensorAttr tensor = kernel.lookupTensor(getTensor());
  if (!tensor)
    return emitOpError() << "adds into undeclared tensor '" << getTensor() << "'";
  if (tensor.getElementType().isSignlessInteger(32))
    return emitOpError() << "tensor '" << getTensor()
                         << "' is an integer tensor and has no gradient";
  if (static_cast<int64_t>(getIndices().size()) != tensor.getRank())
    return emitOpError() << "tensor '" << getTensor() << "' has rank " << tensor.getRank()
                         << " but is indexed with " << getIndices().size() << " indices";
  return success();
}

LogicalResult AccumulateTransposedOp::verify() {
  ArrayRef<int64_t> acc = shapeOf(getAcc()), x = shapeOf(getLhs()), r = shapeOf(getRows());
  if (failed(expectShape(*this, "transposed operand", x, {r[0], acc[0]},
                         "row-tile rows x accumulator rows")) ||
      failed(expectShape(*this, "row tile", r, {x[0], acc[1]},
                         "transposed-operand rows x accumulator columns")) ||
      failed(expectConfigTile(*this, "accumulator", getAcc(), true)))
    return failure();
  return expectKernelElementType(*this, getRows());
}

MaskOp flashc::flash::summarizedMask(KernelSignature kernel) {
  MaskOp mask;
  kernel->walk([&](MaskOp op) {
    if (!mask)
      mask = op;
  });
  auto loop = mask ? dyn_cast<scf::ForOp>(mask->getParentOp()) : scf::ForOp();
  if (!loop)
    return {};
  if (auto forward = dyn_cast<KernelOp>(kernel.getOperation()))
    return mask.getKeyTile() == loop.getInductionVar() &&
                   mask.getBatch() == forward.getBatch() &&
                   mask.getHead() == forward.getHead() &&
                   mask.getQueryTile() == forward.getQueryTile()
               ? mask
               : MaskOp();
  auto backward = cast<BackwardKernelOp>(kernel.getOperation());
  return mask.getQueryTile() == loop.getInductionVar() &&
                 mask.getBatch() == backward.getBatch() &&
                 mask.getKeyTile() == backward.getKeyTile()
             ? mask
             : MaskOp();
}
