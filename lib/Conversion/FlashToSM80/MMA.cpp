//===- MMA.cpp - S = Q·Kᵀ and A += P·V on mma.sync.m16n8k16 ---------------===//
//
// Fragments of mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16} (g = lane/4,
// t = lane%4; every A/B register packs two 16-bit values, low half first):
//   A (16x16): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16x8):  c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// Q comes from `ldmatrix.x4`, K from `ldmatrix.x4` (its rows are the n
// index, so the non-transposed load gives B), V from `ldmatrix.x4.trans`.
// The C fragments of two adjacent n-tiles of S, rounded and packed in pairs,
// are exactly the A fragment of one k-step of P·V, so P never leaves the
// registers.
//
//===----------------------------------------------------------------------===//

#include "SM80Emitter.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm80;

std::array<Value, 4> sm80::ldmatrixX4(EmitterCore &emitter, Value smemAddress, bool transpose) {
  OpBuilder &b = emitter.b;
  Location loc = emitter.loc;
  MLIRContext *ctx = b.getContext();
  Type i32Type = b.getI32Type();
  auto resultType = LLVM::LLVMStructType::getLiteral(ctx, {i32Type, i32Type, i32Type, i32Type});
  Value result = NVVM::LdMatrixOp::create(
      b, loc, resultType, smemAddress, 4,
      transpose ? NVVM::MMALayout::col : NVVM::MMALayout::row,
      NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8), NVVM::LdStMatrixEltType::B16);
  return {emitter.extract(result, 0), emitter.extract(result, 1), emitter.extract(result, 2),
          emitter.extract(result, 3)};
}

std::array<Value, 4> sm80::mmaSync(EmitterCore &emitter, ArrayRef<Value> a, ArrayRef<Value> bFrag,
                                   ArrayRef<Value> c) {
  OpBuilder &b = emitter.b;
  Location loc = emitter.loc;
  MLIRContext *ctx = b.getContext();
  Type f32Type = b.getF32Type();
  auto resultType = LLVM::LLVMStructType::getLiteral(ctx, {f32Type, f32Type, f32Type, f32Type});
  NVVM::MMATypes type =
      emitter.config.elementType.isBF16() ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  // bf16 operands are i32-packed; the verifier wants f16 ones as vector<2xf16>.
  SmallVector<Value, 4> aOperands(a), bOperands(bFrag);
  if (type == NVVM::MMATypes::f16) {
    auto pair = VectorType::get({2}, b.getF16Type());
    for (Value &operand : aOperands)
      operand = LLVM::BitcastOp::create(b, loc, pair, operand);
    for (Value &operand : bOperands)
      operand = LLVM::BitcastOp::create(b, loc, pair, operand);
  }
  Value result = NVVM::MmaOp::create(
      b, loc, resultType, aOperands, bOperands, c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{type, type},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  return {emitter.extract(result, 0), emitter.extract(result, 1), emitter.extract(result, 2),
          emitter.extract(result, 3)};
}

std::array<Value, 4> SM80Emitter::queryFragment(Value qBase, int64_t mb, int64_t kStep) {
  int64_t kSteps = config.headDim / 16;
  if (config.qInRegisters && queryAcquired)
    return queryFragments[mb * kSteps + kStep];
  return ldmatrixX4(*this, gepBytes(qBase, i32(mb * 16 * PaddedLayout(config).rowBytes() + kStep * 32)),
                    /*transpose=*/false);
}

LogicalResult SM80Emitter::lowerQKDot(flash::QKDotOp op) {
  if (failed(checkQKDot(op)))
    return failure();

  // acc[mb·nTiles + nt]: every K fragment feeds the warp's row blocks.
  int64_t nTiles = config.scoreTiles(), rowBlocks = config.rowBlocks();
  Value zero = f32(0.0);
  SmallVector<std::array<Value, 4>> acc(rowBlocks * nTiles, {zero, zero, zero, zero});
  int64_t rowBytes = PaddedLayout(config).rowBytes();
  Value qBase = config.qInRegisters ? Value() : opaquePointer(gepBytes(smemQ, qLdOffset));
  Value kBase = opaquePointer(gepBytes(smemK, kLdOffset));
  for (int64_t kStep = 0; kStep < config.headDim / 16; ++kStep) {
    SmallVector<std::array<Value, 4>> a;
    for (int64_t mb = 0; mb < rowBlocks; ++mb)
      a.push_back(queryFragment(qBase, mb, kStep));
    for (int64_t pair = 0; pair < nTiles / 2; ++pair) {
      std::array<Value, 4> k = ldmatrixX4(*this, 
          gepBytes(kBase, i32(pair * 16 * rowBytes + kStep * 32)), /*transpose=*/false);
      for (int64_t mb = 0; mb < rowBlocks; ++mb) {
        std::array<Value, 4> *c = &acc[mb * nTiles + 2 * pair];
        c[0] = mmaSync(*this, a[mb], {k[0], k[1]}, c[0]);
        c[1] = mmaSync(*this, a[mb], {k[2], k[3]}, c[1]);
      }
    }
  }
  SmallVector<Value> regs;
  for (auto &fragment : acc)
    regs.append(fragment.begin(), fragment.end());
  defineAccumTile(op.getResult(), regs, config.bc, op.getScale().convertToFloat());
  return success();
}

LogicalResult SM80Emitter::lowerAccumulate(Operation *op, Value acc, Value alpha, Value probs,
                                           Value value) {
  FailureOr<SmallVector<Value>> scaled = checkAccumulate(op, acc, alpha, probs, value);
  if (failed(scaled))
    return failure();
  SmallVector<Value> regs = std::move(*scaled);
  const SmallVector<Value> &p = tiles.find(probs)->second.regs;
  int64_t rowBytes = PaddedLayout(config).rowBytes(), rowBlocks = config.rowBlocks();
  int64_t pTiles = config.scoreTiles(), accTiles = config.accTiles();
  Value vBase = opaquePointer(gepBytes(smemV, vLdOffset));
  for (int64_t kStep = 0; kStep < config.bc / 16; ++kStep) {
    SmallVector<std::array<Value, 4>> a;
    for (int64_t mb = 0; mb < rowBlocks; ++mb) {
      const Value *lo = &p[(mb * pTiles + 2 * kStep) * 4], *hi = lo + 4;
      a.push_back({packHalves(lo[0], lo[1]), packHalves(lo[2], lo[3]),
                   packHalves(hi[0], hi[1]), packHalves(hi[2], hi[3])});
    }
    for (int64_t pair = 0; pair < config.headDim / 16; ++pair) {
      std::array<Value, 4> v = ldmatrixX4(*this, 
          gepBytes(vBase, i32(kStep * 16 * rowBytes + pair * 32)), /*transpose=*/true);
      for (int64_t mb = 0; mb < rowBlocks; ++mb)
        for (int64_t half = 0; half < 2; ++half) {
          Value *c = &regs[(mb * accTiles + 2 * pair + half) * 4];
          std::array<Value, 4> d = mmaSync(*this, a[mb], {v[2 * half], v[2 * half + 1]}, {c, 4});
          for (int e = 0; e < 4; ++e)
            c[e] = d[e];
        }
    }
  }
  defineAccumTile(op->getResult(0), regs, config.headDim);
  return success();
}
