//===- Softmax.cpp - Online softmax, rescale and finalize in registers -----===//
//
// A thread holds two rows of every score tile per m16 row block of its warp
// (g and g+8 of the block's 16), Bc/4 elements of each; the other Bc·3/4 live in the three other lanes of
// its quad, so row reductions are two `shfl.sync.bfly` steps (lane masks 1
// and 2). The running max and sum are kept identical in the four lanes.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

static constexpr double kLog2E = 1.4426950408889634;
static constexpr double kLn2 = 0.6931471805599453;

Value KernelEmitter::rowReduceMax(Value value) {
  value = fmax(value, shuffleXor(value, 1));
  return fmax(value, shuffleXor(value, 2));
}

Value KernelEmitter::rowReduceSum(Value value) {
  value = fadd(value, shuffleXor(value, 1));
  return fadd(value, shuffleXor(value, 2));
}

LogicalResult KernelEmitter::lowerOnlineSoftmax(flash::OnlineSoftmaxOp op) {
  auto scoresIt = tiles.find(op.getScores()), maxIt = tiles.find(op.getMax()),
       sumIt = tiles.find(op.getSum());
  if (scoresIt == tiles.end() || scoresIt->second.kind != TileValue::Kind::Accum ||
      maxIt == tiles.end() || maxIt->second.kind != TileValue::Kind::Row ||
      sumIt == tiles.end() || sumIt->second.kind != TileValue::Kind::Row)
    return error(op, "expects a score tile and two row vectors");
  const TileValue &scores = scoresIt->second;
  const SmallVector<Value> &m = maxIt->second.regs, &l = sumIt->second.regs;
  // exp(x) = exp2(x·log2 e): without exp2_scale the scale is log2 e.
  double scale = kLog2E;
  if (FloatAttr attr = op.getExp2ScaleAttr())
    scale = attr.getValueAsDouble();
  Value scaleValue = f32(scale);
  Value negInf = f32(-std::numeric_limits<double>::infinity());
  int64_t nTiles = scores.cols / 8;

  TileValue newMax, newSum, probs, alpha;
  newMax.kind = newSum.kind = alpha.kind = TileValue::Kind::Row;
  probs.kind = TileValue::Kind::Accum;
  probs.cols = scores.cols;
  probs.regs.resize(scores.regs.size());
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t half = 0; half < 2; ++half) {
      auto reg = [&](int64_t nt, int64_t e) { return (mb * nTiles + nt) * 4 + e; };
      Value rowMax = m[2 * mb + half];
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t e = 2 * half; e < 2 * half + 2; ++e)
          rowMax = fmax(rowMax, scores.regs[reg(nt, e)]);
      rowMax = rowReduceMax(rowMax);
      // The fully-masked-row guard: a row still at -inf uses 0 as reference.
      Value isEmpty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, rowMax, negInf);
      Value reference = select(isEmpty, f32(0.0), rowMax);
      // P = exp2(c·s - c·m_ref): one FFMA and one MUFU.EX2 per element.
      Value offset = fmul(reference, f32(-scale));
      Value rowSum;
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t e = 2 * half; e < 2 * half + 2; ++e) {
          Value p = exp2Approx(fma(scores.regs[reg(nt, e)], scaleValue, offset));
          probs.regs[reg(nt, e)] = p;
          rowSum = rowSum ? fadd(rowSum, p) : p;
        }
      rowSum = rowReduceSum(rowSum);
      // α = exp2(c·(m - m_ref)) is exactly 1 while the max does not move.
      Value rowAlpha = exp2Approx(
          fmul(arith::SubFOp::create(b, loc, m[2 * mb + half], reference), scaleValue));
      newMax.regs.push_back(rowMax);
      newSum.regs.push_back(fadd(fmul(rowAlpha, l[2 * mb + half]), rowSum));
      alpha.regs.push_back(rowAlpha);
    }
  tiles[op.getNewMax()] = std::move(newMax);
  tiles[op.getNewSum()] = std::move(newSum);
  tiles[op.getProbs()] = std::move(probs);
  tiles[op.getAlpha()] = std::move(alpha);
  return success();
}

LogicalResult KernelEmitter::lowerRescale(flash::RescaleOp op) {
  auto accIt = tiles.find(op.getAcc()), alphaIt = tiles.find(op.getAlpha());
  if (accIt == tiles.end() || accIt->second.kind != TileValue::Kind::Accum ||
      alphaIt == tiles.end() || alphaIt->second.kind != TileValue::Kind::Row)
    return error(op, "expects an f32 tile and a row vector");
  TileValue result = accIt->second;
  int64_t perBlock = result.cols / 8 * 4;
  for (size_t i = 0; i < result.regs.size(); ++i)
    result.regs[i] = fmul(result.regs[i], alphaIt->second.regs[2 * (i / perBlock) + (i % 4) / 2]);
  tiles[op.getResult()] = std::move(result);
  return success();
}

LogicalResult KernelEmitter::lowerFinalize(flash::FinalizeOp op) {
  auto accIt = tiles.find(op.getAcc()), maxIt = tiles.find(op.getMax()),
       sumIt = tiles.find(op.getSum());
  if (accIt == tiles.end() || accIt->second.kind != TileValue::Kind::Accum ||
      maxIt == tiles.end() || maxIt->second.kind != TileValue::Kind::Row ||
      sumIt == tiles.end() || sumIt->second.kind != TileValue::Kind::Row)
    return error(op, "expects an f32 tile and two row vectors");
  const TileValue &acc = accIt->second;
  Value zero = f32(0.0), negInf = f32(-std::numeric_limits<double>::infinity());
  Value maxScale = f32(op.getMaxScale().convertToFloat());
  TileValue out = acc, lse;
  lse.kind = TileValue::Kind::Row;
  int64_t perBlock = acc.cols / 8 * 4;
  for (int64_t row = 0; row < 2 * config.rowBlocks(); ++row) {
    Value l = sumIt->second.regs[row], m = maxIt->second.regs[row];
    // A row that saw no key: O = 0 and LSE = -inf (never 0/0).
    Value isEmpty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, l, zero);
    Value inverse = select(isEmpty, zero, arith::DivFOp::create(b, loc, f32(1.0), l));
    for (size_t i = 0; i < out.regs.size(); ++i)
      if (static_cast<int64_t>(2 * (i / perBlock) + (i % 4) / 2) == row)
        out.regs[i] = fmul(out.regs[i], inverse);
    Value logSum = fmul(log2Approx(l), f32(kLn2));
    lse.regs.push_back(select(isEmpty, negInf, fadd(fmul(maxScale, m), logSum)));
  }
  tiles[op.getOutput()] = std::move(out);
  tiles[op.getLse()] = std::move(lse);
  return success();
}
