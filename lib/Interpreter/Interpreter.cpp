//===- Interpreter.cpp - Run flash IR on the host -------------------------===//
//
// The executor walks the kernel body once per (b, h, query tile), keeping a
// value per SSA value: a scalar (double) or a tile (f32 array). Tile ops do
// exactly what their descriptions in FlashOps.td say, in f32; regions run as
// compiled scalar programs (ScalarProgram.h).
//
//===----------------------------------------------------------------------===//

#include "flashc/Interpreter/Interpreter.h"

#include "KernelExecutor.h"

#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

using namespace mlir;
using namespace flashc;
using namespace flashc::interp;
using namespace flashc::interp::detail;

//===----------------------------------------------------------------------===//
// Small pieces
//===----------------------------------------------------------------------===//

std::string ProblemShape::str() const {
  std::string result;
  llvm::raw_string_ostream os(result);
  os << "B=" << batch() << " H=" << heads() << " HKV=" << kvHeads()
     << " N=" << queryLen() << " M=" << keyLen() << " D=" << headDim();
  return result;
}

int64_t HostTensor::numElements() const {
  int64_t count = 1;
  for (int64_t extent : shape)
    count *= extent;
  return count;
}

double HostTensor::at(ArrayRef<int64_t> indices) const {
  if (indices.size() != shape.size())
    return 0;
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (indices[d] < 0 || indices[d] >= shape[d])
      return 0;
    offset = offset * shape[d] + indices[d];
  }
  return data[offset];
}

float interp::roundToElementType(float value, Type type) {
  if (type.isBF16()) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
      return value;
    bits += 0x7fffu + ((bits >> 16) & 1u); // round to nearest, ties to even
    bits &= 0xffff0000u;
    std::memcpy(&value, &bits, 4);
    return value;
  }
  if (type.isF16())
    return static_cast<float>(static_cast<_Float16>(value));
  return value;
}


//===----------------------------------------------------------------------===//
// Construction
//===----------------------------------------------------------------------===//

KernelExecutor::KernelExecutor(flash::KernelOp kernel, const AttentionInputs &inputs,
                               AttentionOutputs &outputs, const RunOptions &options)
    : kernelOp(kernel), signature(kernel), inputs(inputs), outputs(&outputs),
      tiles(&outputs.tiles), options(options) {
  initialize();
}

void KernelExecutor::initialize() {
  config = signature.getConfig();
  elementType = signature.getElementType();
  if (auto kernel = dyn_cast<flash::KernelOp>(kernelOp); kernel && kernel.getPackedHeads()) {
    packedHeads = true;
    groupSize = std::max<int64_t>(inputs.shape.heads() / std::max<int64_t>(inputs.shape.kvHeads(), 1), 1);
  }
  env.inputs = &inputs;
  if (flash::BlockSummaryAttr summary = signature.getBlockSummaryAttr()) {
    const ProblemShape &shape = inputs.shape;
    summaryShape = flash::BlockSummaryShape::of(summary, config.getBr(), config.getBc(),
                                                shape.batch(), shape.heads(),
                                                shape.queryLen(), shape.keyLen());
  }
  if (auto kernel = dyn_cast<flash::KernelOp>(kernelOp)) {
    env.sequenceKeyLengths = kernel.getPagedKvAttr() || inputs.varlen.packsKeys();
    env.sequenceQueryLengths = inputs.varlen.packsQueries();
  }
  env.sequenceKeyLength = static_cast<double>(inputs.shape.keyLen());
  env.sequenceQueryLength = static_cast<double>(inputs.shape.queryLen());
  // One entry per SSA value the walk can define, so `values` never rehashes
  // while the kernel runs.
  unsigned numValues = 0;
  kernelOp->walk([&](Block *block) { numValues += block->getNumArguments(); });
  kernelOp->walk([&](Operation *op) { numValues += op->getNumResults(); });
  values.reserve(numValues);
  for (Attribute attr : signature.getParams()) {
    auto param = cast<flash::ParamAttr>(attr);
    double value = 0;
    if (auto intAttr = dyn_cast<IntegerAttr>(param.getDefaultValue()))
      value = static_cast<double>(intAttr.getInt());
    else
      value = cast<FloatAttr>(param.getDefaultValue()).getValueAsDouble();
    auto it = inputs.params.find(param.getName().getValue());
    if (it != inputs.params.end())
      value = it->second;
    if (param.getType().isInteger(32))
      value = static_cast<double>(static_cast<int32_t>(value));
    else
      value = static_cast<double>(static_cast<float>(value));
    env.params[param.getName().getValue()] = value;
  }
}

LogicalResult KernelExecutor::fail(Operation *op, const Twine &message) {
  std::string location;
  llvm::raw_string_ostream os(location);
  op->getLoc().print(os);
  errorMessage = ("interpreter: " + message + " (at " + location + ")").str();
  return failure();
}

//===----------------------------------------------------------------------===//
// Control flow and scalars
//===----------------------------------------------------------------------===//

LogicalResult KernelExecutor::execBlock(Block &block,
                                        SmallVectorImpl<RuntimeValue> &yielded) {
  for (Operation &op : block.without_terminator())
    if (failed(execOp(op)))
      return failure();
  yielded.clear();
  for (Value operand : block.getTerminator()->getOperands())
    yielded.push_back(get(operand));
  return success();
}

LogicalResult KernelExecutor::execFor(scf::ForOp loop) {
  int64_t lower = index(loop.getLowerBound()), upper = index(loop.getUpperBound()),
          step = index(loop.getStep());
  if (step <= 0)
    return fail(loop, "scf.for step must be positive");
  SmallVector<RuntimeValue> carried;
  for (Value init : loop.getInitArgs())
    carried.push_back(get(init));
  Block &body = *loop.getBody();
  SmallVector<RuntimeValue> yielded;
  for (int64_t iv = lower; iv < upper; iv += step) {
    get(loop.getInductionVar()).scalar = static_cast<double>(iv);
    for (auto [arg, value] : llvm::zip(loop.getRegionIterArgs(), carried))
      get(arg) = value;
    if (failed(execBlock(body, yielded)))
      return failure();
    carried.assign(yielded.begin(), yielded.end());
  }
  for (auto [result, value] : llvm::zip(loop.getResults(), carried))
    get(result) = value;
  return success();
}

LogicalResult KernelExecutor::execConstant(arith::ConstantOp op) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return execScalar(*op);
  auto type = cast<RankedTensorType>(op.getType());
  if (type.getRank() > 2 || !type.getElementType().isF32())
    return fail(op, "only f32 tile and row-vector constants are supported");
  int64_t rows = type.getDimSize(0), cols = type.getRank() == 2 ? type.getDimSize(1) : 1;
  Tile result(rows, cols);
  if (dense.isSplat()) {
    std::fill(result.data.begin(), result.data.end(), dense.getSplatValue<float>());
  } else {
    int64_t i = 0;
    for (float value : dense.getValues<float>())
      result.data[i++] = value;
  }
  setTile(op.getResult(), std::move(result));
  return success();
}

LogicalResult KernelExecutor::execScalar(Operation &op) {
  auto it = scalarCache.find(&op);
  if (it == scalarCache.end()) {
    // Operand i of the op reads slot i of a per-call operand array.
    int next = 0;
    FailureOr<ScalarInstr> instr =
        compileScalarOp(&op, env, [&](Value) { return next++; }, errorMessage);
    if (failed(instr))
      return failure();
    it = scalarCache.try_emplace(&op, std::move(*instr)).first;
  }
  SmallVector<double, 4> operands;
  for (Value operand : op.getOperands())
    operands.push_back(scalar(operand));
  get(op.getResult(0)).scalar = it->second.execute(operands.data());
  return success();
}

//===----------------------------------------------------------------------===//
// Tile ops
//===----------------------------------------------------------------------===//

void KernelExecutor::loadRows(Value result, const std::vector<float> &source, int64_t b,
                              int64_t head, int64_t heads, int64_t length, int64_t bound,
                              int64_t tileIndex) {
  auto type = cast<RankedTensorType>(result.getType());
  int64_t rows = type.getDimSize(0), dim = type.getDimSize(1);
  Tile tile(rows, dim); // rows past `bound` stay zero
  for (int64_t r = 0; r < rows; ++r) {
    int64_t position = tileIndex * rows + r;
    if (position >= std::min(length, bound))
      break;
    const float *src = &source[((b * heads + head) * length + position) * dim];
    std::copy(src, src + dim, &tile(r, 0));
  }
  setTile(result, std::move(tile));
}

void KernelExecutor::loadPagedRows(Value result, const std::vector<float> &source, int64_t b,
                                   int64_t kvHead, int64_t tileIndex) {
  auto type = cast<RankedTensorType>(result.getType());
  int64_t rows = type.getDimSize(0), dim = type.getDimSize(1);
  Tile tile(rows, dim); // rows past the sequence stay zero
  for (int64_t r = 0; r < rows; ++r)
    if (const float *src = keyValueRow(inputs, source, b, kvHead, tileIndex * rows + r))
      std::copy(src, src + dim, &tile(r, 0));
  setTile(result, std::move(tile));
}

void KernelExecutor::loadQueryRows(Value result, int64_t b, int64_t head, int64_t tileIndex) {
  if (!packedHeads)
    return loadRows(result, inputs.q, b, head, inputs.shape.heads(), inputs.shape.queryLen(),
                    currentQueryLength(), tileIndex);
  auto type = cast<RankedTensorType>(result.getType());
  int64_t rows = type.getDimSize(0), dim = type.getDimSize(1);
  Tile tile(rows, dim); // padding rows stay zero
  for (int64_t r = 0; r < rows; ++r) {
    QueryRow row = queryRow(head, tileIndex, rows, r);
    if (!row.inside)
      break;
    const float *src =
        &inputs.q[((b * inputs.shape.heads() + row.head) * inputs.shape.queryLen() +
                   row.position) *
                  dim];
    std::copy(src, src + dim, &tile(r, 0));
  }
  setTile(result, std::move(tile));
}

FailureOr<const RegionProgram *> KernelExecutor::regionProgram(Operation *op) {
  auto it = regionCache.find(op);
  if (it == regionCache.end()) {
    FailureOr<RegionProgram> program =
        RegionProgram::compile(op->getRegion(0), env, errorMessage);
    if (failed(program))
      return failure();
    it = regionCache.try_emplace(op, std::move(*program)).first;
  }
  return &it->second;
}

FailureOr<KernelExecutor::BoundRegion> KernelExecutor::bindRegion(Operation *op) {
  FailureOr<const RegionProgram *> compiled = regionProgram(op);
  if (failed(compiled))
    return failure();
  BoundRegion bound{*compiled, std::vector<double>((*compiled)->numSlots, 0.0)};
  for (auto [slot, value] : bound.program->captures) {
    if (get(value).tile)
      return fail(op, "a region may capture scalars only, not tiles");
    bound.slots[slot] = scalar(value);
  }
  return bound;
}

LogicalResult KernelExecutor::visitTileElements(
    flash::MaskOp mask, function_ref<bool(int64_t, int64_t, bool)> visit) {
  FailureOr<BoundRegion> bound = bindRegion(mask);
  if (failed(bound))
    return failure();
  const RegionProgram &program = *bound->program;
  std::vector<double> &slots = bound->slots;
  auto type = cast<RankedTensorType>(mask.getType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t queryTile = index(mask.getQueryTile()), head = index(mask.getHead());
  int64_t firstKey = index(mask.getKeyTile()) * cols;
  slots[0] = scalar(mask.getBatch());
  for (int64_t r = 0; r < rows; ++r) {
    QueryRow row = queryRow(head, queryTile, rows, r);
    if (!row.inside)
      break;
    slots[1] = static_cast<double>(row.head);
    slots[2] = static_cast<double>(row.position);
    for (int64_t c = 0; c < cols && firstKey + c < currentKeyLength(); ++c) {
      slots[3] = static_cast<double>(firstKey + c);
      if (!visit(r, c, program.run(slots.data()) != 0))
        return success();
    }
  }
  return success();
}

LogicalResult KernelExecutor::checkClaims(flash::MaskOp mask) {
  auto type = cast<RankedTensorType>(mask.getType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t queryTile = index(mask.getQueryTile()), keyTile = index(mask.getKeyTile());
  ValueRange bands = mask.getRowsVisible();
  int64_t bandRows = bands.empty() ? rows : rows / static_cast<int64_t>(bands.size());
  bool claimsEmpty = scalar(mask.getAnyVisible()) == 0;
  bool claimsFull = scalar(mask.getAllVisible()) != 0;
  std::string wrong;
  LogicalResult visited = visitTileElements(mask, [&](int64_t r, int64_t c, bool visible) {
    bool bandClaimsEmpty = !bands.empty() && scalar(bands[r / bandRows]) == 0;
    const char *claim = visible && claimsEmpty       ? "empty"
                        : visible && bandClaimsEmpty ? "empty in its row band"
                        : !visible && claimsFull     ? "full"
                                                     : nullptr;
    QueryRow row = queryRow(index(mask.getHead()), queryTile, rows, r);
    if (claim)
      wrong = (Twine("flash-classify-tiles proved the tile (b = ") +
               Twine(index(mask.getBatch())) + ", h = " + Twine(index(mask.getHead())) +
               ", query tile " + Twine(queryTile) + ", key block " + Twine(keyTile) + ") " +
               claim + ", but (" + (packedHeads ? "h = " + std::to_string(row.head) + ", " : "") +
               "i = " + Twine(row.position) + ", j = " + Twine(keyTile * cols + c) + ") is " +
               (visible ? "visible" : "masked"))
                  .str();
    return !claim;
  });
  if (failed(visited))
    return failure();
  return wrong.empty() ? success() : fail(mask, wrong);
}

FailureOr<int> KernelExecutor::classifyElements(flash::MaskOp mask) {
  bool any = false, all = true;
  if (failed(visitTileElements(mask, [&](int64_t, int64_t, bool visible) {
        any |= visible;
        all &= visible;
        return true;
      })))
    return failure();
  return !any ? flash::kBlockEmpty : all ? flash::kBlockFull : flash::kBlockPartial;
}

LogicalResult KernelExecutor::execCaptures(flash::MaskOp mask) {
  // The captured values' definitions, in program order (the kernel's
  // body and the key loop's are single blocks).
  llvm::SetVector<Operation *> defs;
  llvm::SetVector<Value> captured;
  getUsedValuesDefinedAbove(mask.getBody(), captured);
  SmallVector<Value> work(captured.begin(), captured.end());
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !defs.insert(def))
      continue;
    if (def->getNumRegions() || def->getNumResults() != 1 ||
        isa<ShapedType>(def->getResult(0).getType()))
      return fail(mask, "the block summary needs a mask region that captures scalars only");
    llvm::append_range(work, def->getOperands());
  }
  SmallVector<Operation *> ordered(defs.begin(), defs.end());
  llvm::sort(ordered, [](Operation *x, Operation *y) {
    if (x->getBlock() != y->getBlock())
      return y->getBlock()->getParentOp()->isAncestor(x) ? false : true;
    return x->isBeforeInBlock(y);
  });
  for (Operation *op : ordered) {
    LogicalResult result = isa<arith::ConstantOp>(op)
                               ? execConstant(cast<arith::ConstantOp>(op))
                               : execScalar(*op);
    if (failed(result))
      return failure();
  }
  return success();
}

LogicalResult KernelExecutor::summarize(std::vector<uint8_t> &summary, std::string &error) {
  flash::MaskOp mask = flash::summarizedMask(signature);
  if (!mask) {
    error = "a block summary needs the kernel's mask at (b, h, qt, kt) of its query or key loop";
    return failure();
  }
  summary.assign(static_cast<size_t>(summaryShape.bytes()), flash::kBlockPartial);
  for (int64_t b = 0; b < summaryShape.batches; ++b)
    for (int64_t h = 0; h < summaryShape.heads; ++h)
      for (int64_t qt = 0; qt < summaryShape.queryTiles; ++qt)
        for (int64_t kt = 0; kt < summaryShape.keyBlocks; ++kt) {
          // The mask's own operands: a backward kernel computes its query
          // head from the KV head, which the summary does not walk.
          get(mask.getBatch()).scalar = static_cast<double>(b);
          get(mask.getHead()).scalar = static_cast<double>(h);
          get(mask.getQueryTile()).scalar = static_cast<double>(qt);
          get(mask.getKeyTile()).scalar = static_cast<double>(kt);
          FailureOr<int> blockClass =
              succeeded(execCaptures(mask)) ? classifyElements(mask) : FailureOr<int>();
          if (failed(blockClass)) {
            error = errorMessage;
            return failure();
          }
          summary[summaryShape.offset(b, h, qt, kt)] = static_cast<uint8_t>(*blockClass);
        }
  return success();
}

LogicalResult KernelExecutor::loadBlockSummary() {
  if (!signature.getBlockSummaryAttr())
    return success();
  const std::vector<uint8_t> &given =
      isa<flash::KernelOp>(kernelOp) ? inputs.blockSummary : inputs.backwardBlockSummary;
  if (given.empty()) {
    std::string error;
    if (failed(summarize(blockSummary, error)))
      return fail(kernelOp, error);
    return success();
  }
  if (static_cast<int64_t>(given.size()) != summaryShape.bytes())
    return fail(kernelOp, Twine("the block summary has ") + Twine(given.size()) +
                              " bytes, the kernel reads " + Twine(summaryShape.bytes()));
  blockSummary = given;
  return success();
}

LogicalResult KernelExecutor::execElementRegion(Operation *op, Value scores, Value batch,
                                                Value head, Value queryTile,
                                                Value keyTile, bool isMask) {
  FailureOr<BoundRegion> bound = bindRegion(op);
  if (failed(bound))
    return failure();
  const RegionProgram &program = *bound->program;
  std::vector<double> &slots = bound->slots;

  const Tile &input = tile(scores);
  Tile result = input;
  int64_t firstKey = index(keyTile) * input.cols;
  int argBase = isMask ? 0 : 1; // score mods take s first
  slots[argBase + 0] = scalar(batch);
  for (int64_t r = 0; r < input.rows; ++r) {
    QueryRow row = queryRow(index(head), index(queryTile), input.rows, r);
    slots[argBase + 1] = static_cast<double>(row.head);
    slots[argBase + 2] = static_cast<double>(row.position);
    for (int64_t c = 0; c < input.cols; ++c) {
      slots[argBase + 3] = static_cast<double>(firstKey + c);
      if (isMask) {
        if (program.run(slots.data()) == 0)
          result(r, c) = kNegInf;
      } else {
        slots[0] = input(r, c);
        result(r, c) = static_cast<float>(program.run(slots.data()));
      }
    }
  }
  setTile(op->getResult(0), std::move(result));
  return success();
}

void KernelExecutor::onlineSoftmax(flash::OnlineSoftmaxOp op) {
  const Tile &s = tile(op.getScores()), &m = tile(op.getMax()), &l = tile(op.getSum());
  std::optional<float> exp2Scale;
  if (FloatAttr attr = op.getExp2ScaleAttr())
    exp2Scale = static_cast<float>(attr.getValueAsDouble());
  auto exponential = [&](float x) {
    return exp2Scale ? std::exp2(*exp2Scale * x) : std::exp(x);
  };
  Tile newMax(s.rows, 1), newSum(s.rows, 1), probs(s.rows, s.cols), alpha(s.rows, 1);
  for (int64_t r = 0; r < s.rows; ++r) {
    float rowMax = m(r, 0);
    for (int64_t c = 0; c < s.cols; ++c)
      rowMax = std::max(rowMax, s(r, c));
    // The fully-masked-row guard: a row whose max is still -inf uses 0 as
    // its reference, so α = exp(-inf) = 0 and P = 0 instead of NaN.
    float reference = rowMax == kNegInf ? 0.0f : rowMax;
    float rowSum = 0;
    for (int64_t c = 0; c < s.cols; ++c) {
      probs(r, c) = exponential(s(r, c) - reference);
      rowSum += probs(r, c);
    }
    alpha(r, 0) = exponential(m(r, 0) - reference);
    newMax(r, 0) = rowMax;
    newSum(r, 0) = alpha(r, 0) * l(r, 0) + rowSum;
  }
  setTile(op.getNewMax(), std::move(newMax));
  setTile(op.getNewSum(), std::move(newSum));
  setTile(op.getProbs(), std::move(probs));
  setTile(op.getAlpha(), std::move(alpha));
}

Tile KernelExecutor::accumulate(const Tile *acc, const Tile *alpha, const Tile &probs,
                                const Tile &value) {
  Tile result(probs.rows, value.cols);
  for (int64_t r = 0; r < result.rows; ++r) {
    float scaleRow = alpha ? (*alpha)(r, 0) : 1.0f;
    for (int64_t d = 0; d < result.cols; ++d)
      result(r, d) = acc ? scaleRow * (*acc)(r, d) : 0.0f;
    for (int64_t c = 0; c < probs.cols; ++c) {
      float p = probs(r, c);
      if (p == 0.0f)
        continue;
      for (int64_t d = 0; d < result.cols; ++d)
        result(r, d) += p * value(c, d);
    }
  }
  return result;
}

void KernelExecutor::finalize(flash::FinalizeOp op) {
  const Tile &acc = tile(op.getAcc()), &m = tile(op.getMax()), &l = tile(op.getSum());
  float maxScale = op.getMaxScale().convertToFloat();
  Tile out(acc.rows, acc.cols), lse(acc.rows, 1);
  for (int64_t r = 0; r < acc.rows; ++r) {
    // A row that saw no key: O = 0 and LSE = -inf (never 0/0).
    if (l(r, 0) == 0.0f) {
      lse(r, 0) = kNegInf;
      continue;
    }
    float inverse = 1.0f / l(r, 0);
    for (int64_t d = 0; d < acc.cols; ++d)
      out(r, d) = acc(r, d) * inverse;
    lse(r, 0) = maxScale * m(r, 0) + std::log(l(r, 0));
  }
  setTile(op.getOutput(), std::move(out));
  setTile(op.getLse(), std::move(lse));
}

void KernelExecutor::store(flash::StoreOp op) {
  const Tile &out = tile(op.getOutput()), &lse = tile(op.getLse());
  const ProblemShape &shape = inputs.shape;
  int64_t b = index(op.getBatch()), h = index(op.getHead()), queryTile = index(op.getQueryTile());
  // A split's partial state stays f32 until the combine step.
  bool partial = op.getSplit() && inputs.keySplits > 1;
  std::vector<float> &outTarget = partial ? splitOut[index(op.getSplit())] : outputs->out;
  std::vector<float> &lseTarget = partial ? splitLse[index(op.getSplit())] : outputs->lse;
  for (int64_t r = 0; r < out.rows; ++r) {
    QueryRow query = queryRow(h, queryTile, out.rows, r);
    if (!query.inside)
      break;
    int64_t row = (b * shape.heads() + query.head) * shape.queryLen() + query.position;
    for (int64_t d = 0; d < out.cols; ++d)
      outTarget[row * out.cols + d] =
          partial ? out(r, d) : roundToElementType(out(r, d), elementType);
    lseTarget[row] = lse(r, 0);
  }
}

void KernelExecutor::combineSplits() {
  const ProblemShape &shape = inputs.shape;
  int64_t rows = shape.batch() * shape.heads() * shape.queryLen(), dim = shape.headDim();
  std::vector<float> sum(dim);
  for (int64_t row = 0; row < rows; ++row) {
    float largest = kNegInf;
    for (const std::vector<float> &lse : splitLse)
      largest = std::max(largest, lse[row]);
    // No split saw a visible key: the fully-masked row (O = 0, LSE = -inf).
    if (largest == kNegInf) {
      std::fill_n(outputs->out.begin() + row * dim, dim, 0.0f);
      outputs->lse[row] = kNegInf;
      continue;
    }
    float total = 0;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (size_t split = 0; split < splitLse.size(); ++split) {
      float weight = std::exp(splitLse[split][row] - largest);
      total += weight;
      for (int64_t d = 0; d < dim; ++d)
        sum[d] += weight * splitOut[split][row * dim + d];
    }
    for (int64_t d = 0; d < dim; ++d)
      outputs->out[row * dim + d] = roundToElementType(sum[d] / total, elementType);
    outputs->lse[row] = largest + std::log(total);
  }
}

Tile interp::detail::rowsTimesBlock(const Tile &rows, const Tile &block, float scale) {
  Tile result(rows.rows, block.rows);
  for (int64_t r = 0; r < rows.rows; ++r)
    for (int64_t c = 0; c < block.rows; ++c) {
      float sum = 0;
      for (int64_t d = 0; d < rows.cols; ++d)
        sum += rows(r, d) * block(c, d);
      result(r, c) = scale * sum;
    }
  return result;
}

LogicalResult KernelExecutor::execMask(flash::MaskOp mask) {
  // Tiles flash-classify-tiles proved full or empty take the same
  // shortcut as on the GPU, so a wrong proof fails the reference check
  // (and, with checkClassification, the brute-force check first).
  if (options.checkClassification && mask.isClassified() && failed(checkClaims(mask)))
    return failure();
  if (mask.isClassified() && scalar(mask.getAnyVisible()) == 0) {
    ++tiles->empty;
    Tile result = tile(mask.getScores());
    std::fill(result.data.begin(), result.data.end(), kNegInf);
    setTile(mask.getResult(), std::move(result));
    return success();
  }
  if (mask.isClassified() && scalar(mask.getAllVisible()) != 0) {
    ++tiles->full;
    // Copy the pointer out first: get(result) may insert into `values`
    // and rehash it, which would leave a reference into it dangling.
    TilePtr scores = get(mask.getScores()).tile;
    get(mask.getResult()).tile = std::move(scores);
  } else {
    ++tiles->partial;
    if (failed(execElementRegion(mask, mask.getScores(), mask.getBatch(), mask.getHead(),
                                 mask.getQueryTile(), mask.getKeyTile(), /*isMask=*/true)))
      return failure();
  }
  // Row bands proved empty: -inf without looking, as the warpgroup
  // that owns them on the GPU skips the block.
  ValueRange bands = mask.getRowsVisible();
  if (llvm::all_of(bands, [&](Value visible) { return scalar(visible) != 0; }))
    return success();
  Tile result = tile(mask.getResult());
  int64_t bandRows = result.rows / static_cast<int64_t>(bands.size());
  for (auto [band, visible] : llvm::enumerate(bands))
    if (scalar(visible) == 0)
      for (int64_t r = static_cast<int64_t>(band) * bandRows;
           r < static_cast<int64_t>(band + 1) * bandRows; ++r)
        for (int64_t c = 0; c < result.cols; ++c)
          result(r, c) = kNegInf;
  setTile(mask.getResult(), std::move(result));
  return success();
}

LogicalResult KernelExecutor::execOp(Operation &op) {
  const ProblemShape &shape = inputs.shape;
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](scf::ForOp loop) { return execFor(loop); })
      .Case([&](arith::ConstantOp constant) { return execConstant(constant); })
      .Case([&](flash::LoadQOp load) {
        loadQueryRows(load.getResult(), index(load.getBatch()), index(load.getHead()),
                      index(load.getQueryTile()));
        return success();
      })
      .Case([&](flash::LoadKVOp load) {
        const std::vector<float> &source =
            load.getOperand() == flash::KVOperand::Key ? inputs.k : inputs.v;
        if (inputs.paged.enabled())
          loadPagedRows(load.getResult(), source, index(load.getBatch()),
                        index(load.getKvHead()), index(load.getKeyTile()));
        else
          loadRows(load.getResult(), source, index(load.getBatch()), index(load.getKvHead()),
                   shape.kvHeads(), shape.keyLen(), currentKeyLength(), index(load.getKeyTile()));
        return success();
      })
      .Case([&](flash::QKDotOp dot) {
        setTile(dot.getResult(), rowsTimesBlock(tile(dot.getQuery()), tile(dot.getKey()),
                                                dot.getScale().convertToFloat()));
        return success();
      })
      .Case([&](flash::ScoreModOp mod) {
        return execElementRegion(mod, mod.getScores(), mod.getBatch(), mod.getHead(),
                                 mod.getQueryTile(), mod.getKeyTile(), /*isMask=*/false);
      })
      .Case([&](flash::MaskOp mask) { return execMask(mask); })
      .Case([&](flash::BlockClassOp op) {
        get(op.getResult()).scalar = blockSummary[summaryShape.offset(
            index(op.getBatch()), index(op.getHead()), index(op.getQueryTile()),
            index(op.getKeyTile()))];
        return success();
      })
      .Case([&](flash::MaskKeyBoundsOp bounds) {
        Tile s = tile(bounds.getScores());
        int64_t first = index(bounds.getKeyTile()) * s.cols, keyLen = index(bounds.getKeyLen());
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t c = std::max<int64_t>(0, keyLen - first); c < s.cols; ++c)
            s(r, c) = kNegInf;
        setTile(bounds.getResult(), std::move(s));
        return success();
      })
      .Case([&](flash::OnlineSoftmaxOp softmax) {
        onlineSoftmax(softmax);
        return success();
      })
      .Case([&](flash::RescaleOp rescale) {
        const Tile &acc = tile(rescale.getAcc()), &alpha = tile(rescale.getAlpha());
        Tile result = acc;
        for (int64_t r = 0; r < acc.rows; ++r)
          for (int64_t d = 0; d < acc.cols; ++d)
            result(r, d) *= alpha(r, 0);
        setTile(rescale.getResult(), std::move(result));
        return success();
      })
      .Case([&](flash::PVAccumulateOp op) {
        setTile(op.getResult(), accumulate(&tile(op.getAcc()), nullptr, tile(op.getProbs()),
                                           tile(op.getValue())));
        return success();
      })
      .Case([&](flash::RescaleAccumulateOp op) {
        setTile(op.getResult(), accumulate(&tile(op.getAcc()), &tile(op.getAlpha()),
                                           tile(op.getProbs()), tile(op.getValue())));
        return success();
      })
      .Case([&](flash::FinalizeOp op) {
        finalize(op);
        return success();
      })
      .Case([&](flash::StoreOp op) {
        store(op);
        return success();
      })
      .Case([&](flash::SplitKeyRangeOp op) {
        int64_t split = index(op.getSplit()), blocks = index(op.getBlocks());
        int64_t splits = inputs.keySplits;
        get(op.getLower()).scalar = static_cast<double>(blocks * split / splits);
        get(op.getUpper()).scalar = static_cast<double>(blocks * (split + 1) / splits);
        return success();
      })
      .Default([&](Operation *other) { return execBackwardOp(*other); });
}

LogicalResult KernelExecutor::run(std::string &error) {
  *tiles = {};
  if (failed(outputs ? runForward() : runBackward())) {
    error = errorMessage;
    return failure();
  }
  return success();
}

LogicalResult KernelExecutor::runForward() {
  const ProblemShape &shape = inputs.shape;
  auto kernel = cast<flash::KernelOp>(kernelOp);
  AttentionOutputs &outputs = *this->outputs;
  outputs.out.assign(shape.batch() * shape.heads() * shape.queryLen() * shape.headDim(),
                     std::numeric_limits<float>::quiet_NaN());
  outputs.lse.assign(shape.batch() * shape.heads() * shape.queryLen(),
                     std::numeric_limits<float>::quiet_NaN());
  int64_t br = config.getBr();
  // A packed kernel runs per KV head over the G·N packed rows of its group.
  int64_t gridHeads = packedHeads ? shape.kvHeads() : shape.heads();
  int64_t queryTiles = (shape.queryLen() * groupSize + br - 1) / br;
  if (failed(loadBlockSummary()))
    return failure();
  Block &body = kernel.getEntryBlock();
  int64_t splits = kernel.getSplitKeys() ? inputs.keySplits : 1;
  if (splits < 1)
    return fail(kernel, Twine("the key split count must be positive, got ") + Twine(splits));
  if (splits > 1) {
    splitOut.assign(splits, std::vector<float>(outputs.out.size(),
                                               std::numeric_limits<float>::quiet_NaN()));
    splitLse.assign(splits, std::vector<float>(outputs.lse.size(),
                                               std::numeric_limits<float>::quiet_NaN()));
  }
  SmallVector<RuntimeValue> yielded;
  for (int64_t b = 0; b < shape.batch(); ++b)
    for (int64_t h = 0; h < gridHeads; ++h)
      for (int64_t qt = 0; qt < queryTiles; ++qt)
        for (int64_t split = 0; split < splits; ++split) {
          env.sequenceKeyLength = static_cast<double>(sequenceKeyLength(inputs, b));
          env.sequenceQueryLength = static_cast<double>(sequenceQueryLength(inputs, b));
          // A varlen sequence's tiles past its queries exit at once, as the
          // GPU's CTAs do.
          if (qt * br >= sequenceQueryLength(inputs, b) * groupSize)
            continue;
          get(kernel.getBatch()).scalar = static_cast<double>(b);
          get(kernel.getHead()).scalar = static_cast<double>(h);
          get(kernel.getQueryTile()).scalar = static_cast<double>(qt);
          if (kernel.getSplitKeys())
            get(kernel.getSplit()).scalar = static_cast<double>(split);
          if (failed(execBlock(body, yielded)))
            return failure();
        }
  if (splits > 1)
    combineSplits();
  // A varlen batch's rows past a sequence hold O = 0, LSE = -inf, which is
  // what the GPU harness reads there (they are no rows of the packed o).
  if (inputs.varlen.packsQueries())
    for (int64_t b = 0; b < shape.batch(); ++b)
      for (int64_t h = 0; h < shape.heads(); ++h)
        for (int64_t i = sequenceQueryLength(inputs, b); i < shape.queryLen(); ++i) {
          int64_t row = (b * shape.heads() + h) * shape.queryLen() + i;
          std::fill_n(outputs.out.begin() + row * shape.headDim(), shape.headDim(), 0.0f);
          outputs.lse[row] = kNegInf;
        }
  return success();
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

/// Sequence b's length from varlen `offsets`, clamped to [0, launchLength].
static int64_t offsetsLength(const std::vector<int32_t> &offsets, int64_t b,
                             int64_t launchLength) {
  return std::clamp<int64_t>(int64_t(offsets[b + 1]) - offsets[b], 0, launchLength);
}

int64_t interp::sequenceKeyLength(const AttentionInputs &inputs, int64_t b) {
  if (inputs.varlen.packsKeys())
    return offsetsLength(inputs.varlen.keyOffsets, b, inputs.shape.keyLen());
  if (!inputs.paged.enabled())
    return inputs.shape.keyLen();
  return std::clamp<int64_t>(inputs.paged.lengths[b], 0, inputs.shape.keyLen());
}

int64_t interp::sequenceQueryLength(const AttentionInputs &inputs, int64_t b) {
  if (inputs.varlen.packsQueries())
    return offsetsLength(inputs.varlen.queryOffsets, b, inputs.shape.queryLen());
  return inputs.shape.queryLen();
}

/// Varlen offsets against the launch: B + 1 entries, non-negative, never
/// decreasing, no sequence longer than the launch's `length` (N or M).
static std::string checkVarlenOffsets(const std::vector<int32_t> &offsets, const char *what,
                                      int64_t batch, int64_t length, const char *lengthName) {
  if (static_cast<int64_t>(offsets.size()) != batch + 1)
    return std::string("the ") + what + " offsets hold " + std::to_string(offsets.size()) +
           " entries, expected B + 1 = " + std::to_string(batch + 1);
  if (offsets[0] < 0)
    return std::string("the ") + what + " offsets start at " + std::to_string(offsets[0]) +
           ", a negative row";
  for (int64_t b = 0; b < batch; ++b) {
    int64_t count = int64_t(offsets[b + 1]) - offsets[b];
    if (count < 0)
      return std::string("the ") + what + " offsets decrease at sequence " + std::to_string(b) +
             " (" + std::to_string(offsets[b]) + " then " + std::to_string(offsets[b + 1]) + ")";
    const char *rows = std::string(what) == "query" ? " queries" : " keys";
    if (count > length)
      return std::string("sequence ") + std::to_string(b) + " has " + std::to_string(count) +
             rows + ", more than the launch's " + lengthName + " = " + std::to_string(length);
  }
  return "";
}

const float *interp::keyValueRow(const AttentionInputs &inputs, const std::vector<float> &source,
                                 int64_t b, int64_t kvHead, int64_t j) {
  const ProblemShape &shape = inputs.shape;
  if (j < 0 || j >= sequenceKeyLength(inputs, b))
    return nullptr;
  if (!inputs.paged.enabled())
    return &source[((b * shape.kvHeads() + kvHead) * shape.keyLen() + j) * shape.headDim()];
  const PagedCache &paged = inputs.paged;
  int64_t page = paged.table[b * paged.tableStride + j / paged.pageSize];
  if (page < 0 || page >= paged.numPages)
    return nullptr;
  int64_t row = page * paged.pageSize + j % paged.pageSize;
  return &source[(row * shape.kvHeads() + kvHead) * shape.headDim()];
}

/// What the GPU kernel cannot check for itself: the table and the lengths
/// against the cache and the launch (the caller's contract on the device).
static std::string checkPagedCache(const AttentionInputs &inputs, int64_t kernelPage) {
  const PagedCache &paged = inputs.paged;
  const ProblemShape &shape = inputs.shape;
  if (paged.pageSize != kernelPage)
    return "the cache has pages of " + std::to_string(paged.pageSize) +
           " keys, the kernel was compiled for " + std::to_string(kernelPage);
  if (paged.numPages < 1)
    return "the paged cache needs at least one page";
  if (paged.tableStride * paged.pageSize < shape.keyLen())
    return "the block table's " + std::to_string(paged.tableStride) + " entries per sequence x " +
           std::to_string(paged.pageSize) + " keys do not cover M = " +
           std::to_string(shape.keyLen());
  if (static_cast<int64_t>(paged.table.size()) != shape.batch() * paged.tableStride)
    return "the block table holds " + std::to_string(paged.table.size()) + " entries, expected B x " +
           std::to_string(paged.tableStride);
  if (static_cast<int64_t>(paged.lengths.size()) != shape.batch())
    return "the key lengths hold " + std::to_string(paged.lengths.size()) +
           " entries, expected B = " + std::to_string(shape.batch());
  for (int64_t b = 0; b < shape.batch(); ++b) {
    int64_t length = paged.lengths[b];
    if (length < 0 || length > shape.keyLen())
      return "sequence " + std::to_string(b) + " has " + std::to_string(length) +
             " keys, outside [0, M = " + std::to_string(shape.keyLen()) + "]";
    for (int64_t block = 0; block * paged.pageSize < length; ++block) {
      int64_t page = paged.table[b * paged.tableStride + block];
      if (page < 0 || page >= paged.numPages)
        return "block table entry [" + std::to_string(b) + ", " + std::to_string(block) +
               "] = " + std::to_string(page) + " is outside the cache's " +
               std::to_string(paged.numPages) + " pages";
    }
  }
  return "";
}

std::string interp::checkInputs(flash::KernelSignature kernel, const AttentionInputs &inputs,
                                bool withQKV) {
  const ProblemShape &shape = inputs.shape;
  auto roleName = [](int role) {
    static const char *names[] = {"B", "H", "HKV", "N", "M", "D"};
    return names[role];
  };
  for (int role = 0; role < flash::kNumDimRoles; ++role)
    if (shape.sizes[role] < 1)
      return std::string(roleName(role)) + " must be positive, got " +
             std::to_string(shape.sizes[role]);
  ArrayRef<int64_t> fixed = kernel.getStaticSizes();
  ArrayRef<int64_t> classes = kernel.getDimClasses();
  for (int role = 0; role < flash::kNumDimRoles; ++role) {
    if (fixed[role] != -1 && shape.sizes[role] != fixed[role])
      return std::string("the variant fixes ") + roleName(role) + " = " + std::to_string(fixed[role]) + ", got " +
             std::to_string(shape.sizes[role]);
    int other = static_cast<int>(classes[role]);
    if (shape.sizes[role] != shape.sizes[other])
      return std::string("the variant uses one symbol for ") + roleName(other) + " and " + roleName(role) + ", but " + roleName(other) +
             " = " + std::to_string(shape.sizes[other]) + " and " + roleName(role) + " = " +
             std::to_string(shape.sizes[role]);
  }
  if (shape.heads() % shape.kvHeads() != 0)
    return "H = " + std::to_string(shape.heads()) + " is not a multiple of HKV = " +
           std::to_string(shape.kvHeads());
  auto expectSize = [&](const char *name, size_t actual, int64_t expected) -> std::string {
    if (static_cast<int64_t>(actual) == expected)
      return "";
    return std::string(name) + " holds " + std::to_string(actual) + " elements, expected " +
           std::to_string(expected);
  };
  int64_t qElems = shape.batch() * shape.heads() * shape.queryLen() * shape.headDim();
  int64_t kvElems = shape.batch() * shape.kvHeads() * shape.keyLen() * shape.headDim();
  auto kernelOp = dyn_cast<flash::KernelOp>(kernel.getOperation());
  flash::PagedKVAttr pagedKV = kernelOp ? kernelOp.getPagedKvAttr() : flash::PagedKVAttr();
  if (bool(pagedKV) != inputs.paged.enabled())
    return pagedKV ? "the kernel reads a paged K/V cache, but the inputs hold dense K and V"
                   : "the inputs hold a paged K/V cache, but the kernel reads dense K and V";
  if (pagedKV) {
    std::string message = checkPagedCache(inputs, pagedKV.getPage());
    if (!message.empty())
      return message;
    kvElems = inputs.paged.numPages * inputs.paged.pageSize * shape.kvHeads() * shape.headDim();
  }
  flash::VarlenAttr varlen = kernelOp ? kernelOp.getVarlenAttr() : flash::VarlenAttr();
  bool kernelPacksQueries = varlen && !varlen.getQueries().getValue().empty();
  bool kernelPacksKeys = varlen && !varlen.getKeys().getValue().empty();
  if (kernelPacksQueries != inputs.varlen.packsQueries())
    return kernelPacksQueries ? "the kernel packs ragged queries, but the inputs have no query "
                                "offsets"
                              : "the inputs have query offsets, but the kernel reads dense queries";
  if (kernelPacksKeys != inputs.varlen.packsKeys())
    return kernelPacksKeys ? "the kernel packs ragged keys, but the inputs have no key offsets"
                           : "the inputs have key offsets, but the kernel reads no packed keys";
  if (kernelPacksQueries)
    if (std::string message = checkVarlenOffsets(inputs.varlen.queryOffsets, "query",
                                                 shape.batch(), shape.queryLen(), "N");
        !message.empty())
      return message;
  if (kernelPacksKeys)
    if (std::string message = checkVarlenOffsets(inputs.varlen.keyOffsets, "key", shape.batch(),
                                                 shape.keyLen(), "M");
        !message.empty())
      return message;
  if (withQKV)
    for (auto message : {expectSize("q", inputs.q.size(), qElems),
                         expectSize("k", inputs.k.size(), kvElems),
                         expectSize("v", inputs.v.size(), kvElems)})
      if (!message.empty())
        return message;
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    StringRef name = decl.getName().getValue();
    auto it = inputs.tensors.find(name);
    if (it == inputs.tensors.end())
      return ("missing aux tensor '" + name + "'").str();
    std::vector<int64_t> expected;
    for (int64_t extent : decl.getExtents())
      expected.push_back(flash::AuxTensorAttr::isRole(extent)
                             ? shape[flash::AuxTensorAttr::decodeRole(extent)]
                             : extent);
    if (it->second.shape != expected ||
        static_cast<int64_t>(it->second.data.size()) != it->second.numElements())
      return ("aux tensor '" + name + "' has the wrong shape").str();
  }
  for (const auto &entry : inputs.params)
    if (!kernel.lookupParam(entry.getKey()))
      return ("the variant has no parameter '" + entry.getKey() + "'").str();
  return "";
}

LogicalResult interp::runKernel(flash::KernelOp kernel, const AttentionInputs &inputs,
                                AttentionOutputs &outputs, std::string &error,
                                const RunOptions &options) {
  error = checkInputs(kernel, inputs);
  if (!error.empty())
    return failure();
  if (inputs.shape.headDim() != kernel.getConfig().getHeadDim()) {
    error = "D = " + std::to_string(inputs.shape.headDim()) +
            " does not match the kernel's head dim " +
            std::to_string(kernel.getConfig().getHeadDim());
    return failure();
  }
  KernelExecutor executor(kernel, inputs, outputs, options);
  return executor.run(error);
}

LogicalResult interp::computeBlockSummary(flash::KernelSignature kernel,
                                          const AttentionInputs &inputs,
                                          std::vector<uint8_t> &summary, std::string &error) {
  error = checkInputs(kernel, inputs);
  if (!error.empty())
    return failure();
  if (!kernel.getBlockSummaryAttr()) {
    error = "kernel '" + SymbolTable::getSymbolName(kernel).str() + "' reads no block summary";
    return failure();
  }
  if (auto forward = dyn_cast<flash::KernelOp>(kernel.getOperation())) {
    AttentionOutputs unused;
    KernelExecutor executor(forward, inputs, unused, RunOptions());
    return executor.summarize(summary, error);
  }
  BackwardInputs none;
  AttentionGradients unused;
  KernelExecutor executor(cast<flash::BackwardKernelOp>(kernel.getOperation()), inputs, none,
                          unused, RunOptions());
  return executor.summarize(summary, error);
}
