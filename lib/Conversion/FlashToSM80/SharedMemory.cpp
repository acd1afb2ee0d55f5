//===- SharedMemory.cpp - The padded layout of the mma.sync kernel ---------===//
//
// Q, K and V tiles are rows of D + 8 elements: the 16 padding bytes put the
// 8 row addresses of each ldmatrix into 8 distinct groups of 4 banks. Each
// lane's ldmatrix row address is computed once (qLdOffset, kLdOffset,
// vLdOffset); a GEMM adds immediates to it.
//
//===----------------------------------------------------------------------===//

#include "SM80Emitter.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm80;

void SM80Emitter::emitSharedMemoryLayout() {
  PaddedLayout layout(config);
  Value base = sharedMemoryBase(/*alignment=*/16);
  smemQ = gepBytes(base, i32(layout.qOffset()));
  smemK = gepBytes(base, i32(layout.kOffset()));
  smemV = gepBytes(base, i32(layout.vOffset()));

  // ldmatrix.x4: lanes 8i..8i+7 give the row addresses of matrix i.
  int64_t rowBytes = layout.rowBytes();
  Value low3 = arith::AndIOp::create(b, loc, lane, i32(7));
  Value bit3 = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, lane, i32(3)), i32(1));
  Value bit4 = arith::ShRUIOp::create(b, loc, lane, i32(4));
  // A operand (Q): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
  // (rows 0-7, k 8-15), (rows 8-15, k 8-15) of the warp's first 16 rows
  // (row block mb adds 16·mb rows).
  Value qRow = add(add(mul(warp, i32(config.rowsPerWarp)), low3), mul(bit3, i32(8)));
  qLdOffset = add(mul(qRow, i32(rowBytes)), mul(bit4, i32(16)));
  // B operand of Q·Kᵀ (K rows are n): (n 0-7, k 0-7), (n 0-7, k 8-15),
  // (n 8-15, k 0-7), (n 8-15, k 8-15) -> b0, b1 of two n-tiles.
  Value kRow = add(low3, mul(bit4, i32(8)));
  kLdOffset = add(mul(kRow, i32(rowBytes)), mul(bit3, i32(16)));
  // B operand of P·V through .trans (V rows are k): (k 0-7, n 0-7),
  // (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
  Value vRow = add(low3, mul(bit3, i32(8)));
  vLdOffset = add(mul(vRow, i32(rowBytes)), mul(bit4, i32(16)));
}

Value SM80Emitter::sharedChunkOffset(Value row, Value chunk, int64_t rows) {
  return add(mul(row, i32(PaddedLayout(config).rowBytes())), mul(chunk, i32(16)));
}

std::optional<int64_t> SM80Emitter::sharedRowStepBytes(int64_t rowStep) {
  return rowStep * PaddedLayout(config).rowBytes();
}

void SM80Emitter::loadQueryRegisters() {
  int64_t rowBytes = PaddedLayout(config).rowBytes();
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t kStep = 0; kStep < config.headDim / 16; ++kStep)
      queryFragments.push_back(ldmatrixX4(*this, 
          gepBytes(smemQ, add(qLdOffset, i32(mb * 16 * rowBytes + kStep * 32))),
          /*transpose=*/false));
}
