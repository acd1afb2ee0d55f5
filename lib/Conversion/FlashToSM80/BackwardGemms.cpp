//===- BackwardGemms.cpp - The backward's five GEMMs on mma.sync ----------===//
//
// Per warp (key rows 16w..16w+15 of the block; fragments as in MMA.cpp):
//   Sᵀ  = K·Qᵀ,  dPᵀ = V·dOᵀ   A: K/V rows (ldmatrix), B: Q/dO rows as n
//   dV += Pᵀ·dO, dK += dSᵀ·Q   A: Pᵀ/dSᵀ from registers, B: dO/Q rows as k
//                              (ldmatrix.trans)
// and, over the CTA, dQ += dS·K: dSᵀ through shared memory (A by
// ldmatrix.trans of dSᵀ, B = K by ldmatrix.trans), the warps splitting the
// Br x D result in m16 x n16 units, added to the f32 accumulator with
// red.global.add.f32.
//
//===----------------------------------------------------------------------===//

#include "SM80Emitter.h"

#include "flashc/Conversion/FlashToSM80/BackwardEmitter.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm80;

void BackwardEmitter::assignSharedBuffers() {
  BackwardLayout layout(config, queryStages());
  Value base = sharedMemoryBase(/*alignment=*/16);
  smemK = gepBytes(base, i32(layout.keyOffset()));
  smemV = gepBytes(base, i32(layout.valueOffset()));
  smemQ = gepBytes(base, i32(layout.queryOffset()));
  smemDO = gepBytes(base, i32(layout.outputGradOffset()));
  smemDS = gepBytes(base, i32(layout.scoreGradOffset()));
  computeLaneOffsets();
}

int64_t BackwardEmitter::mainSharedBytes(int64_t stages) const {
  return BackwardLayout(config, stages).sharedBytes();
}

int64_t BackwardEmitter::queryStageBytes() const {
  return BackwardLayout(config).stageBytes();
}

void BackwardEmitter::computeLaneOffsets() {
  BackwardLayout layout(config);
  int64_t rowBytes = layout.rowBytes();
  Value low3 = arith::AndIOp::create(b, loc, lane, i32(7));
  Value bit3 = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, lane, i32(3)), i32(1));
  Value bit4 = arith::ShRUIOp::create(b, loc, lane, i32(4));
  // A from the warp's K/V rows: (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
  // (8-15, 8-15).
  Value keyRow = add(add(mul(warp, i32(16)), low3), mul(bit3, i32(8)));
  keyRowsA = add(mul(keyRow, i32(rowBytes)), mul(bit4, i32(16)));
  // B from Q/dO rows as n: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
  // (n 8-15, k 8-15) -> b0, b1 of two n-tiles.
  queryRowsB =
      add(mul(add(low3, mul(bit4, i32(8))), i32(rowBytes)), mul(bit3, i32(16)));
  // B from rows as k through .trans (Q, dO, K): (k 0-7, n 0-7), (k 8-15,
  // n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
  queryRowsTransB =
      add(mul(add(low3, mul(bit3, i32(8))), i32(rowBytes)), mul(bit4, i32(16)));
  keyRowsTransB = queryRowsTransB;
  // A = dS (m = query, k = key) from dSᵀ rows (keys) through .trans:
  // (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
  scoreGradTransA =
      add(mul(add(low3, mul(bit4, i32(8))), i32(layout.scoreRowBytes())),
          mul(bit3, i32(16)));
}

/// The dPᵀ = V·dOᵀ after Sᵀ = K·Qᵀ `dot` in its block whose tiles are
/// already in shared memory: issued right behind Sᵀ.
static flash::OutputGradDotOp independentPartnerOf(
    flash::QKDotOp dot, const llvm::DenseMap<Value, BackwardValue> &values) {
  for (Operation *op = dot->getNextNode(); op; op = op->getNextNode()) {
    auto partner = dyn_cast<flash::OutputGradDotOp>(op);
    if (!partner)
      continue;
    for (Value tile : {partner.getValue(), partner.getOutputGrad()}) {
      auto it = values.find(tile);
      if (it == values.end() || it->second.kind != BackwardValue::Kind::Shared)
        return {};
    }
    return partner;
  }
  return {};
}

LogicalResult BackwardEmitter::lowerTransposedDot(Operation *op, Value keyTile,
                                                  Value rowTile, float scale) {
  BackwardValue result;
  result.kind = BackwardValue::Kind::Scores;
  if (auto issued = productsInFlight.find(op); issued != productsInFlight.end()) {
    // Issued beside Sᵀ: no dVᵀ goes ahead of it (accumulateReadyAfter).
    result.regs = completeTransposedProduct(issued->second, /*laterProducts=*/0);
    productsInFlight.erase(issued);
  } else {
    FailureOr<const BackwardValue *> keys =
        lookup(op, keyTile, BackwardValue::Kind::Shared);
    FailureOr<const BackwardValue *> rows =
        lookup(op, rowTile, BackwardValue::Kind::Shared);
    if (failed(keys) || failed(rows))
      return failure();
    if (!(*keys)->keyRows || (*rows)->keyRows)
      return error(op, "expects a Br-row tile (Q, dO) and a key block (K, V)");
    acquireCopies();
    sharedReadSinceCopy = true;
    result.regs = issueTransposedProduct((*keys)->smem, (*rows)->smem);
    // dPᵀ does not depend on Sᵀ: issued behind it, it runs while the mask
    // and the probabilities are computed, and is completed where used.
    flash::OutputGradDotOp partner;
    if (auto dot = dyn_cast<flash::QKDotOp>(op); dot && pairsTransposedProducts)
      partner = independentPartnerOf(dot, values);
    if (partner)
      productsInFlight[partner] = issueTransposedProduct(
          values.find(partner.getValue())->second.smem,
          values.find(partner.getOutputGrad())->second.smem);
    flash::AccumulateTransposedOp ahead =
        isa<flash::OutputGradDotOp>(op) ? accumulateReadyAfter(op) : nullptr;
    if (ahead)
      issueAccumulateAhead(ahead);
    result.regs = completeTransposedProduct(result.regs, (partner || ahead) ? 1 : 0);
  }
  if (scale != 1.0f)
    for (Value &element : result.regs)
      element = fmul(element, f32(scale));
  values[op->getResult(0)] = std::move(result);
  return success();
}

SmallVector<Value> BackwardEmitter::issueTransposedProduct(Value keyRows,
                                                      Value queryRows) {
  int64_t rowBytes = BackwardLayout(config).rowBytes(), nTiles = config.br / 8;
  Value zero = f32(0.0);
  SmallVector<std::array<Value, 4>> acc(nTiles, {zero, zero, zero, zero});
  Value aBase = opaquePointer(gepBytes(keyRows, keyRowsA));
  Value bBase = opaquePointer(gepBytes(queryRows, queryRowsB));
  for (int64_t kStep = 0; kStep < config.headDim / 16; ++kStep) {
    std::array<Value, 4> a =
        ldmatrixX4(*this, gepBytes(aBase, i32(kStep * 32)), false);
    for (int64_t pair = 0; pair < nTiles / 2; ++pair) {
      std::array<Value, 4> y = ldmatrixX4(
          *this, gepBytes(bBase, i32(pair * 16 * rowBytes + kStep * 32)),
          /*transpose=*/false);
      acc[2 * pair] = mmaSync(*this, a, {y[0], y[1]}, acc[2 * pair]);
      acc[2 * pair + 1] = mmaSync(*this, a, {y[2], y[3]}, acc[2 * pair + 1]);
    }
  }
  SmallVector<Value> regs;
  for (auto &fragment : acc)
    regs.append(fragment.begin(), fragment.end());
  return regs;
}

LogicalResult
BackwardEmitter::lowerAccumulateTransposed(flash::AccumulateTransposedOp op) {
  FailureOr<const BackwardValue *> acc =
      lookup(op, op.getAcc(), BackwardValue::Kind::KeyAcc);
  FailureOr<const BackwardValue *> lhs =
      lookup(op, op.getLhs(), BackwardValue::Kind::Scores);
  FailureOr<const BackwardValue *> rows =
      lookup(op, op.getRows(), BackwardValue::Kind::Shared);
  if (failed(acc) || failed(lhs) || failed(rows))
    return failure();
  if ((*rows)->keyRows)
    return error(op, "expects a Br-row tile (Q, dO)");
  if (overlapsAccumulates) {
    // In flight until read; the one issued before (dVᵀ) completes here.
    issueAccumulateAhead(op);
    settleAccumulates(/*keepNewest=*/1);
    return success();
  }
  acquireCopies();
  sharedReadSinceCopy = true;
  BackwardValue result;
  result.kind = BackwardValue::Kind::KeyAcc;
  result.regs = accumulateProduct((*acc)->regs, (*lhs)->regs, (*rows)->smem);
  values[op.getResult()] = std::move(result);
  return success();
}

flash::AccumulateTransposedOp BackwardEmitter::accumulateReadyAfter(Operation *dot) {
  // Beside a dPᵀ issued with Sᵀ (D <= 64), dVᵀ's operands and accumulators
  // held through the wait spill 16-72 bytes (ptxas -v, full and causal at
  // Br = 128): there dKᵀ alone stays in flight.
  if (!overlapsAccumulates || pairsTransposedProducts)
    return {};
  for (Operation *op = dot->getNextNode(); op; op = op->getNextNode()) {
    auto accumulate = dyn_cast<flash::AccumulateTransposedOp>(op);
    if (!accumulate || loweredAhead.contains(op))
      continue;
    auto lowered = [&](Value value, BackwardValue::Kind kind) {
      auto it = values.find(value);
      return it != values.end() && it->second.kind == kind;
    };
    if (lowered(accumulate.getAcc(), BackwardValue::Kind::KeyAcc) &&
        lowered(accumulate.getLhs(), BackwardValue::Kind::Scores) &&
        lowered(accumulate.getRows(), BackwardValue::Kind::Shared) &&
        !values.find(accumulate.getRows())->second.keyRows)
      return accumulate;
  }
  return {};
}

void BackwardEmitter::issueAccumulateAhead(flash::AccumulateTransposedOp op) {
  const BackwardValue &acc = values.find(op.getAcc())->second;
  acquireCopies();
  sharedReadSinceCopy = true;
  accumulatesInFlight.push_back(
      {op.getResult(),
       issueAccumulate(acc.regs, values.find(op.getLhs())->second.regs,
                       values.find(op.getRows())->second.smem),
       acc.regs.size()});
  loweredAhead.insert(op);
}

void BackwardEmitter::settleAccumulates(int64_t keepNewest) {
  int64_t settled = static_cast<int64_t>(accumulatesInFlight.size()) - keepNewest;
  if (settled > 0)
    defineSettled(awaitProducts(keepNewest, inFlightAccumulatorRegs(settled)), settled);
}

SmallVector<Value> BackwardEmitter::inFlightAccumulatorRegs(size_t count) const {
  SmallVector<Value> regs;
  for (const AccumulateInFlight &product : ArrayRef(accumulatesInFlight).take_front(count))
    regs.append(product.regs);
  return regs;
}

void BackwardEmitter::defineSettled(ArrayRef<Value> tied, size_t count) {
  for (const AccumulateInFlight &product : ArrayRef(accumulatesInFlight).take_front(count)) {
    BackwardValue result;
    result.kind = BackwardValue::Kind::KeyAcc;
    result.regs.assign(tied.begin(), tied.begin() + product.accRegs);
    tied = tied.drop_front(product.regs.size());
    values[product.result] = std::move(result);
  }
  accumulatesInFlight.erase(accumulatesInFlight.begin(),
                            accumulatesInFlight.begin() + std::min(count, accumulatesInFlight.size()));
}

SmallVector<Value> BackwardEmitter::accumulateProduct(ArrayRef<Value> acc,
                                                      ArrayRef<Value> x,
                                                      Value queryRows) {
  int64_t rowBytes = BackwardLayout(config).rowBytes();
  SmallVector<Value> regs(acc);
  Value bBase = gepBytes(queryRows, queryRowsTransB);
  if (Value slice = columnSliceOffset(gradColumns() * 2))
    bBase = gepBytes(bBase, slice);
  bBase = opaquePointer(bBase);
  for (int64_t kStep = 0; kStep < config.br / 16; ++kStep) {
    // The C fragments of n-tiles 2k and 2k+1, rounded and packed, are the A
    // fragment of k-step k.
    const Value *lo = &x[2 * kStep * 4], *hi = lo + 4;
    std::array<Value, 4> a = {
        packHalves(lo[0], lo[1]), packHalves(lo[2], lo[3]),
        packHalves(hi[0], hi[1]), packHalves(hi[2], hi[3])};
    for (int64_t pair = 0; pair < gradColumns() / 16; ++pair) {
      std::array<Value, 4> y = ldmatrixX4(
          *this, gepBytes(bBase, i32(kStep * 16 * rowBytes + pair * 32)),
          /*transpose=*/true);
      for (int64_t half = 0; half < 2; ++half) {
        Value *c = &regs[(2 * pair + half) * 4];
        std::array<Value, 4> d =
            mmaSync(*this, a, {y[2 * half], y[2 * half + 1]}, {c, 4});
        std::copy(d.begin(), d.end(), c);
      }
    }
  }
  return regs;
}

void BackwardEmitter::atomicAdd(Value address, Value value, Value predicate) {
  Value flag = arith::ExtUIOp::create(b, loc, b.getI32Type(), predicate);
  emitAsm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\t@p red.global.add.f32 "
          "[$0], $1;\n\t}",
          "l,f,r", {address, value, flag});
}

void BackwardEmitter::addFixedPoint(StringRef space, Value address, Value flag, Value addend,
                                    Value predicate) {
  Value given = arith::ExtUIOp::create(b, loc, b.getI32Type(), predicate);
  bool convert = addend.getType().isF32();
  // An f32 addend becomes q = rni(value · 2^32), saturating, and |value ·
  // 2^32| > 2^62 (or NaN) sets the flag; an i64 one (a staged sum) is q.
  // Integer adds are exact, so any order gives the same bits; a signed
  // overflow of the sum (old and q of one sign, old + q of the other) sets
  // the flag too: the gradient is then NaN, never wrapped.
  // 0f4F800000 is 2^32 = 1 / kFixedPointUnit, 0f5E800000 is 2^62.
  static_assert(kFixedPointUnit == 0x1p-32f, "the asm's scale is 1 / kFixedPointUnit");
  std::string text = "{\n\t.reg .pred p, bad, wrapped;\n\t";
  if (convert)
    text += ".reg .f32 s, a;\n\t";
  text += ".reg .s64 q, old, sum, x, y;\n\t"
          "setp.ne.b32 p, $3, 0;\n\t";
  if (convert)
    text += "mul.f32 s, $2, 0f4F800000;\n\t"
            "abs.f32 a, s;\n\t"
            "setp.gtu.f32 bad, a, 0f5E800000;\n\t"
            "cvt.rni.s64.f32 q, s;\n\t";
  else
    text += "setp.ne.b32 bad, 0, 0;\n\t"
            "mov.s64 q, $2;\n\t";
  text += "mov.s64 old, 0;\n\t"
          "@p atom." + space.str() + ".add.u64 old, [$0], q;\n\t"
          "add.s64 sum, old, q;\n\t"
          "xor.b64 x, old, sum;\n\t"
          "xor.b64 y, q, sum;\n\t"
          "and.b64 x, x, y;\n\t"
          "setp.lt.s64 wrapped, x, 0;\n\t"
          "or.pred bad, bad, wrapped;\n\t"
          "and.pred bad, bad, p;\n\t"
          "@bad red.global.or.b64 [$1], 1;\n\t}";
  std::string constraints = std::string(space == "shared" ? "r" : "l") + ",l," +
                            (convert ? "f" : "l") + ",r";
  emitAsm(text, constraints, {address, flag, addend, given});
}

void BackwardEmitter::addTensorGrad(Value address, Value flag, Value value,
                                    Value predicate) {
  if (!deterministic)
    return atomicAdd(address, value, predicate);
  addFixedPoint("global", address, flag, value, predicate);
}

void BackwardEmitter::stageTensorGrad(Value slot, Value flag, Value value, Value predicate) {
  if (!deterministic) {
    Value given = arith::ExtUIOp::create(b, loc, b.getI32Type(), predicate);
    emitAsm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\t@p red.shared.add.f32 "
            "[$0], $1;\n\t}",
            "r,f,r", {slot, value, given});
    return;
  }
  addFixedPoint("shared", slot, flag, value, predicate);
}

LogicalResult BackwardEmitter::lowerQueryGradAdd(flash::QueryGradAddOp op) {
  FailureOr<const BackwardValue *> ds =
      lookup(op, op.getScoreGrad(), BackwardValue::Kind::Scores);
  FailureOr<const BackwardValue *> key =
      lookup(op, op.getKey(), BackwardValue::Kind::Shared);
  if (failed(ds) || failed(key))
    return failure();
  if (!(*key)->keyRows)
    return error(op, "expects the key block");
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead()),
        queryTile = lookupScalar(op.getQueryTile());
  if (!batch || !head || !queryTile)
    return error(op, "unknown (b, h, qt) operands");
  if (queryGradAddsAwaitOwnTurn() && awaitedTurn != turn)
    return error(op, "internal error: the dQ add awaits another turn than its CTA's, but the "
                     "dQ writer awaits the CTA's own");
  acquireCopies();
  // Three stages: no barrier starts the tile, so one here keeps this
  // tile's dSᵀ stores behind every warpgroup's previous dQ product, which
  // reads the one dSᵀ buffer (found in review: without it, a warpgroup
  // without a dQ unit at D = 64 stored into dSᵀ under the other's dQ).
  if (copiesAfterScoreGrads)
    syncBodyThreads();
  storeScoreGrads((*ds)->regs);
  // Three stages: the next tile's copies (issued a tile ago) are acquired
  // by the barrier below too.
  if (copiesAfterScoreGrads)
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  fenceSharedWrites();
  // Deterministic: this CTA's turn at the tile first (the barrier below
  // tells every thread), unless thread 0 alone adds the tile: then
  // addQueryGrads waits right before its reduce and passes the turn on.
  Value lock = deterministic ? lockAddress(batch, head, queryTile, columnSlice) : Value();
  Value oneThreadLock;
  if (lock && addsQueryGradsFromOneThread())
    std::swap(lock, oneThreadLock);
  if (lock)
    waitForTurn(lock);
  if (!awaitQueryGradReads() || mergeBarriers < 1)
    syncBodyThreads();
  sharedReadSinceCopy = true;
  Value accumTile = queryGradAccumTile(batch, head, queryTile, columnSlice);
  addQueryGrads((*key)->smem, queryTile, accumTile, f32(op.getScale().convertToFloat()),
                oneThreadLock);
  // Every thread is past the previous tile's GEMMs (the barrier above):
  // the tile after next goes into their stage. Issued once dQ is staged,
  // where the fewest accumulators are live.
  issueCopiesAfterScoreGrads(/*acquireNext=*/false);
  if (lock) {
    // Every add of this CTA is visible before the next turn's CTA may
    // start its own.
    completeQueryGrads();
    emitAsm("fence.acq_rel.gpu;");
    syncBodyThreads();
    passTurn(lock);
  }
  return success();
}

void BackwardEmitter::storeScoreGrads(ArrayRef<Value> regs) {
  // dSᵀ (element type): key row 16w + g (+8), query columns 8·nt + 2t and
  // +1 in one 4-byte word.
  int64_t scoreRowBytes = BackwardLayout(config).scoreRowBytes();
  Value ownRow = add(mul(warp, i32(16)), groupId);
  Value storeBase = gepBytes(
      smemDS, add(mul(ownRow, i32(scoreRowBytes)), mul(threadInGroup, i32(4))));
  for (int64_t nt = 0; nt < config.br / 8; ++nt)
    for (int64_t half = 0; half < 2; ++half) {
      const Value *pair = &regs[nt * 4 + 2 * half];
      LLVM::StoreOp::create(
          b, loc, packHalves(pair[0], pair[1]),
          gepBytes(storeBase, i32(half * 8 * scoreRowBytes + nt * 16)), 4);
    }
}

void BackwardEmitter::addQueryGrads(Value keys, Value queryTile, Value accumTile, Value scale,
                                    Value turnLock) {
  assert(!turnLock && "mma.sync adds dQ from every thread");
  BackwardLayout layout(config);
  int64_t rowBytes = layout.rowBytes(), scoreRowBytes = layout.scoreRowBytes();
  // dQ (Br x D/S) in m16 x n16 units, unit u = slot·warps + w.
  int64_t pairs = gradColumns() / 16, units = config.br / 16 * pairs;
  if (Value slice = columnSliceOffset(gradColumns() * 2))
    keys = gepBytes(keys, slice);
  int64_t slots = (units + config.numWarps - 1) / config.numWarps;
  Value zero = f32(0.0);
  Value firstQuery = mul(queryTile, i32(config.br));
  for (int64_t slot = 0; slot < slots; ++slot) {
    OpBuilder::InsertionGuard guard(b);
    Value unit = add(warp, i32(slot * config.numWarps));
    if ((slot + 1) * config.numWarps > units) {
      auto inside = scf::IfOp::create(
          b, loc, cmpI(arith::CmpIPredicate::ult, unit, i32(units)),
          /*withElseRegion=*/false);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
    }
    Value rowBlock = arith::DivUIOp::create(b, loc, unit, i32(pairs));
    Value pair = arith::RemUIOp::create(b, loc, unit, i32(pairs));
    Value aBase =
        gepBytes(smemDS, add(scoreGradTransA, mul(rowBlock, i32(32))));
    Value bBase = gepBytes(keys, add(keyRowsTransB, mul(pair, i32(32))));
    std::array<Value, 4> acc[2] = {{zero, zero, zero, zero},
                                   {zero, zero, zero, zero}};
    for (int64_t kStep = 0; kStep < config.bc / 16; ++kStep) {
      std::array<Value, 4> a =
          ldmatrixX4(*this, gepBytes(aBase, i32(kStep * 16 * scoreRowBytes)),
                     /*transpose=*/true);
      std::array<Value, 4> y =
          ldmatrixX4(*this, gepBytes(bBase, i32(kStep * 16 * rowBytes)),
                     /*transpose=*/true);
      acc[0] = mmaSync(*this, a, {y[0], y[1]}, acc[0]);
      acc[1] = mmaSync(*this, a, {y[2], y[3]}, acc[1]);
    }
    // Element e of n-tile `half`: query row 16·rowBlock + g + 8·(e >= 2),
    // column 16·pair + 8·half + 2t + e%2.
    Value localRow = add(mul(rowBlock, i32(16)), groupId);
    Value column = add(mul(pair, i32(16)), mul(threadInGroup, i32(2)));
    for (int64_t e = 0; e < 4; e += 2) {
      Value tileRow = e >= 2 ? add(localRow, i32(8)) : localRow;
      Value valid = cmpI(arith::CmpIPredicate::slt, add(firstQuery, tileRow), queryLen);
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t odd = 0; odd < 2; ++odd) {
          Value index = add(accumTile, toI64(queryGradAccumElement(
                                           tileRow, add(column, i32(8 * half + odd)))));
          atomicAdd(gepElements(queryGradAccumPtr, index, b.getF32Type()),
                    fmul(acc[half][e + odd], scale), valid);
        }
    }
  }
}

Value BackwardEmitter::lockAddress(Value batch, Value head, Value queryTile, Value slice) {
  Value index = queryTileIndex(batch, head, queryTile);
  // A semaphore per column slice: the slices' dQ adds touch other columns.
  if (slice)
    index = add(mul(index, i32(columnSlices)), slice);
  return gepElements(queryGradLockPtr, toI64(index), b.getI32Type());
}

void BackwardEmitter::waitForTurn(Value address) {
  onFirstThread([&] { spinForTurn(address, awaitedTurn); });
}

void BackwardEmitter::spinForTurn(Value address, Value awaited) {
  emitAsm("{\n\t.reg .pred p;\n\t.reg .b32 v;\n"
          "FLASHC_WAIT_${:uid}:\n\tld.global.acquire.gpu.b32 v, [$0];\n"
          "\tsetp.ne.b32 p, v, $1;\n\t@p bra FLASHC_WAIT_${:uid};\n\t}",
          "l,r", {address, awaited});
}

void BackwardEmitter::passTurn(Value address) {
  onFirstThread([&] {
    Value next = add(turn, i32(1));
    emitAsm("st.global.release.gpu.b32 [$0], $1;", "l,r", {address, next});
  });
}

LogicalResult BackwardEmitter::lowerStoreKeyGrads(flash::StoreKeyGradsOp op) {
  FailureOr<const BackwardValue *> dk =
      lookup(op, op.getKeyGrad(), BackwardValue::Kind::KeyAcc);
  FailureOr<const BackwardValue *> dv =
      lookup(op, op.getValueGrad(), BackwardValue::Kind::KeyAcc);
  if (failed(dk) || failed(dv))
    return failure();
  Value batch = lookupScalar(op.getBatch()),
        kvHead = lookupScalar(op.getKvHead()),
        keyTile = lookupScalar(op.getKeyTile());
  if (!batch || !kvHead || !keyTile)
    return error(op, "unknown (b, kv_head, kt) operands");
  Value keyScale = f32(op.getKeyScale().convertToFloat());
  Value firstKey = mul(keyTile, i32(config.bc));
  Value column = mul(threadInGroup, i32(2));
  if (Value slice = columnSliceOffset(gradColumns()))
    column = add(column, slice);
  for (int64_t half = 0; half < 2; ++half) {
    OpBuilder::InsertionGuard guard(b);
    Value row = keyOf(firstKey, 2 * half);
    auto inside =
        scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, row, keyLen),
                          /*withElseRegion=*/false);
    b.setInsertionPoint(inside.thenBlock()->getTerminator());
    for (auto [grads, set, pointer, factor] :
         {std::tuple(*dk, DKS, keyGradPtr, keyScale),
          std::tuple(*dv, DVS, valueGradPtr, Value())}) {
      Value rowStart = add(add(mul(toI64(batch), strides[set][0]),
                               mul(toI64(kvHead), strides[set][1])),
                           mul(toI64(row), strides[set][2]));
      for (int64_t nt = 0; nt < gradColumns() / 8; ++nt) {
        const Value *pair = &grads->regs[nt * 4 + 2 * half];
        Value lo = factor ? fmul(pair[0], factor) : pair[0];
        Value hi = factor ? fmul(pair[1], factor) : pair[1];
        Value index = add(rowStart, toI64(add(column, i32(8 * nt))));
        LLVM::StoreOp::create(b, loc, packHalves(lo, hi),
                              gepElements(pointer, index, config.elementType),
                              4);
      }
    }
  }
  return success();
}
