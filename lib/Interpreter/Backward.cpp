//===- Backward.cpp - Run flash.backward_kernel on the host ---------------===//
//
// The backward ops of FlashBackwardOps.td, in f32 like the forward ones.
// Operands a tensor-core GEMM consumes in the element type (P and dS) are
// rounded to it first; accumulators stay f32. dQ is accumulated in f32 over
// every key block and converted once at the end, as on the GPU.
//
//===----------------------------------------------------------------------===//

#include "KernelExecutor.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace flashc;
using namespace flashc::interp;
using namespace flashc::interp::detail;

KernelExecutor::KernelExecutor(flash::BackwardKernelOp kernel, const AttentionInputs &inputs,
                               const BackwardInputs &backwardInputs,
                               AttentionGradients &gradients, const RunOptions &options)
    : kernelOp(kernel), signature(kernel), inputs(inputs), backwardInputs(&backwardInputs),
      gradients(&gradients), tiles(&gradients.tiles), options(options) {
  initialize();
  env.tensorGrads = &gradients.tensorGrads;
}

void KernelExecutor::loadRowStat(flash::LoadRowStatOp op) {
  const ProblemShape &shape = inputs.shape;
  bool isLse = op.getStat() == flash::RowStat::Lse;
  const std::vector<float> &source = isLse ? backwardInputs->lse : gradients->delta;
  int64_t rows = cast<RankedTensorType>(op.getType()).getDimSize(0);
  // Rows past N: LSE = -inf (the guard zeroes P there), Δ = 0.
  Tile result(rows, 1, isLse ? kNegInf : 0.0f);
  int64_t b = index(op.getBatch()), h = index(op.getHead());
  int64_t first = index(op.getQueryTile()) * rows;
  for (int64_t r = 0; r < rows && first + r < shape.queryLen(); ++r)
    result(r, 0) = source[(b * shape.heads() + h) * shape.queryLen() + first + r];
  setTile(op.getResult(), std::move(result));
}

void KernelExecutor::storeDelta(flash::StoreDeltaOp op) {
  const ProblemShape &shape = inputs.shape;
  const Tile &delta = tile(op.getDelta());
  int64_t b = index(op.getBatch()), h = index(op.getHead());
  int64_t first = index(op.getQueryTile()) * delta.rows;
  for (int64_t r = 0; r < delta.rows && first + r < shape.queryLen(); ++r)
    gradients->delta[(b * shape.heads() + h) * shape.queryLen() + first + r] = delta(r, 0);
}

void KernelExecutor::storeKeyGrads(flash::StoreKeyGradsOp op) {
  const ProblemShape &shape = inputs.shape;
  const Tile &dk = tile(op.getKeyGrad()), &dv = tile(op.getValueGrad());
  float keyScale = op.getKeyScale().convertToFloat();
  int64_t b = index(op.getBatch()), kvHead = index(op.getKvHead());
  int64_t first = index(op.getKeyTile()) * dk.rows;
  for (int64_t r = 0; r < dk.rows && first + r < shape.keyLen(); ++r) {
    int64_t row = (b * shape.kvHeads() + kvHead) * shape.keyLen() + first + r;
    for (int64_t d = 0; d < dk.cols; ++d) {
      gradients->dk[row * dk.cols + d] = roundToElementType(keyScale * dk(r, d), elementType);
      gradients->dv[row * dk.cols + d] = roundToElementType(dv(r, d), elementType);
    }
  }
}

void KernelExecutor::addQueryGrad(flash::QueryGradAddOp op) {
  const ProblemShape &shape = inputs.shape;
  const Tile &ds = tile(op.getScoreGrad()), &k = tile(op.getKey());
  float scale = op.getScale().convertToFloat();
  int64_t b = index(op.getBatch()), h = index(op.getHead());
  int64_t first = index(op.getQueryTile()) * ds.rows;
  std::vector<float> row(k.cols);
  for (int64_t r = 0; r < ds.rows && first + r < shape.queryLen(); ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t c = 0; c < ds.cols; ++c) {
      float g = roundToElementType(ds(r, c), elementType);
      if (g == 0.0f)
        continue;
      for (int64_t d = 0; d < k.cols; ++d)
        row[d] += g * k(c, d);
    }
    float *acc = &queryGradAccum[((b * shape.heads() + h) * shape.queryLen() + first + r) *
                                 k.cols];
    for (int64_t d = 0; d < k.cols; ++d)
      acc[d] += scale * row[d];
  }
}

LogicalResult KernelExecutor::execScoreModGrad(flash::ScoreModGradOp op) {
  FailureOr<BoundRegion> bound = bindRegion(op);
  if (failed(bound))
    return failure();
  const RegionProgram &program = *bound->program;
  std::vector<double> &slots = bound->slots;
  const Tile &grads = tile(op.getGrads()), &scores = tile(op.getScores());
  Tile result(grads.rows, grads.cols);
  int64_t firstQuery = index(op.getQueryTile()) * grads.rows;
  int64_t firstKey = index(op.getKeyTile()) * grads.cols;
  slots[2] = scalar(op.getBatch());
  slots[3] = scalar(op.getHead());
  for (int64_t r = 0; r < grads.rows; ++r) {
    slots[4] = static_cast<double>(firstQuery + r);
    for (int64_t c = 0; c < grads.cols; ++c) {
      float g = grads(r, c);
      if (g == 0.0f)
        continue; // masked or unseen: no derivative, no aux gradient
      slots[0] = g;
      slots[1] = scores(r, c);
      slots[5] = static_cast<double>(firstKey + c);
      result(r, c) = static_cast<float>(program.run(slots.data()));
    }
  }
  setTile(op.getResult(), std::move(result));
  return success();
}

LogicalResult KernelExecutor::execBackwardOp(Operation &op) {
  const ProblemShape &shape = inputs.shape;
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](flash::LoadRowsOp load) {
        const std::vector<float> &source = load.getOperand() == flash::RowOperand::Output
                                               ? backwardInputs->out
                                               : backwardInputs->outputGrad;
        loadRows(load.getResult(), source, index(load.getBatch()), index(load.getHead()),
                 shape.heads(), shape.queryLen(), shape.queryLen(), index(load.getQueryTile()));
        return success();
      })
      .Case([&](flash::LoadRowStatOp load) {
        loadRowStat(load);
        return success();
      })
      .Case([&](flash::RowDotOp dot) {
        const Tile &a = tile(dot.getLhs()), &b = tile(dot.getRhs());
        Tile result(a.rows, 1);
        for (int64_t r = 0; r < a.rows; ++r) {
          float sum = 0;
          for (int64_t d = 0; d < a.cols; ++d)
            sum += a(r, d) * b(r, d);
          result(r, 0) = sum;
        }
        setTile(dot.getResult(), std::move(result));
        return success();
      })
      .Case([&](flash::StoreDeltaOp store) {
        storeDelta(store);
        return success();
      })
      .Case([&](flash::RecomputeProbsOp op) {
        const Tile &s = tile(op.getScores()), &lse = tile(op.getLse());
        Tile probs(s.rows, s.cols);
        FloatAttr scoreScale = op.getScoreScaleAttr();
        float scale = scoreScale ? static_cast<float>(scoreScale.getValueAsDouble()) : 1.0f;
        for (int64_t r = 0; r < s.rows; ++r) {
          if (lse(r, 0) == kNegInf)
            continue; // the fully-masked-row guard: P = 0, never NaN
          for (int64_t c = 0; c < s.cols; ++c)
            if (s(r, c) != kNegInf)
              probs(r, c) = std::exp(scale * s(r, c) - lse(r, 0));
        }
        setTile(op.getResult(), std::move(probs));
        return success();
      })
      .Case([&](flash::OutputGradDotOp dot) {
        setTile(dot.getResult(), rowsTimesBlock(tile(dot.getOutputGrad()), tile(dot.getValue())));
        return success();
      })
      .Case([&](flash::SoftmaxGradOp op) {
        const Tile &p = tile(op.getProbs()), &dp = tile(op.getProbGrad()),
                   &delta = tile(op.getDelta());
        Tile result(p.rows, p.cols);
        for (int64_t r = 0; r < p.rows; ++r)
          for (int64_t c = 0; c < p.cols; ++c)
            if (p(r, c) != 0.0f)
              result(r, c) = p(r, c) * (dp(r, c) - delta(r, 0));
        setTile(op.getResult(), std::move(result));
        return success();
      })
      .Case([&](flash::ScoreModGradOp op) { return execScoreModGrad(op); })
      .Case([&](flash::AccumulateTransposedOp op) {
        const Tile &acc = tile(op.getAcc()), &x = tile(op.getLhs()), &rows = tile(op.getRows());
        Tile result = acc;
        for (int64_t r = 0; r < x.rows; ++r)
          for (int64_t c = 0; c < x.cols; ++c) {
            float weight = roundToElementType(x(r, c), elementType);
            if (weight == 0.0f)
              continue;
            for (int64_t d = 0; d < rows.cols; ++d)
              result(c, d) += weight * rows(r, d);
          }
        setTile(op.getResult(), std::move(result));
        return success();
      })
      .Case([&](flash::QueryGradAddOp op) {
        addQueryGrad(op);
        return success();
      })
      .Case([&](flash::StoreKeyGradsOp op) {
        storeKeyGrads(op);
        return success();
      })
      .Default([&](Operation *other) { return execScalar(*other); });
}

LogicalResult KernelExecutor::runBackward() {
  const ProblemShape &shape = inputs.shape;
  auto kernel = cast<flash::BackwardKernelOp>(kernelOp);
  int64_t B = shape.batch(), H = shape.heads(), HKV = shape.kvHeads(), N = shape.queryLen(),
          M = shape.keyLen(), D = shape.headDim();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  gradients->dq.assign(B * H * N * D, nan);
  gradients->dk.assign(B * HKV * M * D, nan);
  gradients->dv.assign(B * HKV * M * D, nan);
  gradients->delta.assign(B * H * N, nan);
  queryGradAccum.assign(B * H * N * D, 0.0f);
  // Gradients start at 0 (they are sums); sized before any region compiles,
  // since compiled programs keep pointers into them.
  gradients->tensorGrads.clear();
  kernel.walk([&](flash::AuxGradAddOp add) {
    auto tensor = inputs.tensors.find(add.getTensor());
    if (tensor != inputs.tensors.end())
      gradients->tensorGrads[add.getTensor()].assign(tensor->second.numElements(), 0.0f);
  });

  if (failed(loadBlockSummary()))
    return failure();

  SmallVector<RuntimeValue> yielded;
  int64_t br = config.getBr(), bc = config.getBc();
  Block &pre = kernel.getPreprocessBlock();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t qt = 0; qt < (N + br - 1) / br; ++qt) {
        get(pre.getArgument(0)).scalar = static_cast<double>(b);
        get(pre.getArgument(1)).scalar = static_cast<double>(h);
        get(pre.getArgument(2)).scalar = static_cast<double>(qt);
        if (failed(execBlock(pre, yielded)))
          return failure();
      }
  Block &main = kernel.getMainBlock();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kvHead = 0; kvHead < HKV; ++kvHead)
      for (int64_t kt = 0; kt < (M + bc - 1) / bc; ++kt) {
        get(kernel.getBatch()).scalar = static_cast<double>(b);
        get(kernel.getKvHead()).scalar = static_cast<double>(kvHead);
        get(kernel.getKeyTile()).scalar = static_cast<double>(kt);
        if (failed(execBlock(main, yielded)))
          return failure();
      }
  for (size_t n = 0; n < queryGradAccum.size(); ++n)
    gradients->dq[n] = roundToElementType(queryGradAccum[n], elementType);
  return success();
}

LogicalResult interp::runBackwardKernel(flash::BackwardKernelOp kernel,
                                        const AttentionInputs &inputs,
                                        const BackwardInputs &backwardInputs,
                                        AttentionGradients &gradients, std::string &error,
                                        const RunOptions &options) {
  error = checkInputs(kernel, inputs);
  if (!error.empty())
    return failure();
  const ProblemShape &shape = inputs.shape;
  if (shape.headDim() != kernel.getConfig().getHeadDim()) {
    error = "D = " + std::to_string(shape.headDim()) +
            " does not match the kernel's head dim " +
            std::to_string(kernel.getConfig().getHeadDim());
    return failure();
  }
  size_t rows = shape.batch() * shape.heads() * shape.queryLen();
  auto expect = [&](const char *name, size_t actual, size_t expected) {
    if (actual != expected && error.empty())
      error = std::string(name) + " holds " + std::to_string(actual) +
              " elements, expected " + std::to_string(expected);
  };
  expect("O", backwardInputs.out.size(), rows * shape.headDim());
  expect("dO", backwardInputs.outputGrad.size(), rows * shape.headDim());
  expect("LSE", backwardInputs.lse.size(), rows);
  if (!error.empty())
    return failure();
  KernelExecutor executor(kernel, inputs, backwardInputs, gradients, options);
  return executor.run(error);
}
