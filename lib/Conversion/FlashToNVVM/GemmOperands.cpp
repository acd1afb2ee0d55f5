//===- GemmOperands.cpp - Operands and results of the two GEMMs ------------===//
//
// What every backend's Q·Kᵀ and P·V need before they issue instructions:
// the operands checked, the K or V block acquired from the copy pipeline
// (and Q before the first GEMM), diag(α) applied to the accumulator
// registers, and the result recorded as a tile.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

LogicalResult KernelEmitter::checkQKDot(flash::QKDotOp op) {
  auto queryIt = tiles.find(op.getQuery());
  auto keyIt = tiles.find(op.getKey());
  if (queryIt == tiles.end() || queryIt->second.kind != TileValue::Kind::Query ||
      keyIt == tiles.end() || keyIt->second.kind != TileValue::Kind::KeyValue ||
      keyIt->second.operand != flash::KVOperand::Key)
    return error(op, "expects the Q tile of flash.load_q and a K block of flash.load_kv");
  if (failed(acquireKV(op, keyIt->second)))
    return failure();
  if (!queryAcquired)
    acquireQuery(/*pendingGroups=*/0);
  return success();
}

void KernelEmitter::defineAccumTile(Value result, ArrayRef<Value> regs, int64_t cols,
                                  float scale) {
  TileValue tile;
  tile.kind = TileValue::Kind::Accum;
  tile.cols = cols;
  Value scaleValue = scale != 1.0f ? f32(scale) : Value();
  for (Value value : regs)
    tile.regs.push_back(scaleValue ? fmul(scaleValue, value) : value);
  tiles[result] = std::move(tile);
}

FailureOr<SmallVector<Value>> KernelEmitter::checkAccumulate(Operation *op, Value acc,
                                                           Value alpha, Value probs,
                                                           Value value) {
  auto accIt = tiles.find(acc), probsIt = tiles.find(probs), valueIt = tiles.find(value);
  if (accIt == tiles.end() || accIt->second.kind != TileValue::Kind::Accum ||
      accIt->second.cols != config.headDim || probsIt == tiles.end() ||
      probsIt->second.kind != TileValue::Kind::Accum || probsIt->second.cols != config.bc ||
      valueIt == tiles.end() || valueIt->second.kind != TileValue::Kind::KeyValue ||
      valueIt->second.operand != flash::KVOperand::Value)
    return error(op, "expects a Br x D accumulator, Br x Bc probabilities and a V block");
  SmallVector<Value> regs = accIt->second.regs;
  if (alpha) {
    auto alphaIt = tiles.find(alpha);
    if (alphaIt == tiles.end() || alphaIt->second.kind != TileValue::Kind::Row)
      return error(op, "expects α as a row vector");
    // diag(α)·A rides on the accumulator registers right before the GEMM.
    int64_t perBlock = config.accTiles() * 4;
    for (size_t i = 0; i < regs.size(); ++i)
      regs[i] = fmul(regs[i], alphaIt->second.regs[2 * (i / perBlock) + (i % 4) / 2]);
  }
  if (failed(acquireKV(op, valueIt->second)))
    return failure();
  return regs;
}
