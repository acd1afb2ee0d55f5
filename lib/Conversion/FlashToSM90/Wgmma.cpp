//===- Wgmma.cpp - S = Q·Kᵀ and A += P·V on wgmma.mma_async ----------------===//
//
// Per warpgroup and key block:
//   S (64 x Bc)  = Σ_k  wgmma m64nBck16  A: Q panel (K-major descriptor)
//                                        B: K block (K-major descriptor)
//   A (64 x D)  += Σ_k  wgmma m64nDk16   A: P from registers
//                                        B: V block (MN-major descriptor,
//                                           transposed: V rows are k)
// The instructions and their descriptors (the wgmma namespace) are
// described in Wgmma.h.
//
//===----------------------------------------------------------------------===//

#include "InlineAsm.h"
#include "SM90Emitter.h"
#include "Wgmma.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;


Value wgmma::descriptor(EmitterCore &e, Value address, int64_t offset, int64_t lbo,
                       int64_t sbo) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  // Shared-window addresses are below 2^18, so start >> 4 fits its 14 bits
  // and adding offset >> 4 cannot carry into the next field.
  Value start = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, address, e.i64(4)), e.i64(0x3FFF));
  int64_t fields = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (int64_t(1) << 62);
  return e.add(start, e.i64(fields + (offset >> 4)));
}

SmallVector<Value> wgmma::fence(EmitterCore &e, ArrayRef<Value> regs) {
  AsmCall call;
  call.addTied(regs);
  return call.emit(e.b, e.loc, "wgmma.fence.sync.aligned;");
}

SmallVector<Value> wgmma::mma(EmitterCore &e, int64_t n, ArrayRef<Value> acc,
                              const MmaOperands &operands) {
  int64_t count = n / 2;
  AsmCall call;
  if (acc.empty())
    call.addOutputs(e.b.getF32Type(), count);
  else
    call.addTied(acc);
  int64_t next = acc.empty() ? count : 2 * count;
  std::string aText;
  if (operands.aDescriptor) {
    call.addInput(operands.aDescriptor);
    aText = "$" + std::to_string(next++);
  } else {
    for (Value reg : operands.aRegs)
      call.addInput(reg);
    aText = operandList(next, 4);
    next += 4;
  }
  call.addInput(operands.bDescriptor);
  int64_t bIndex = next++;
  StringRef type = e.config.elementType.isBF16() ? "bf16" : "f16";
  // scale-d = 0 on the first k-step: D = A·B, no zero-filled inputs. A from
  // registers has no transpose flag.
  std::string flags =
      operands.aDescriptor
          ? llvm::formatv("1, 1, {0}, {1}", operands.transposeA ? 1 : 0,
                          operands.transposeB ? 1 : 0)
                .str()
          : llvm::formatv("1, 1, {0}", operands.transposeB ? 1 : 0).str();
  std::string text = llvm::formatv(
      "{{\n.reg .pred p;\nsetp.ne.b32 p, {0}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{1}k16.f32.{2}.{2} {3}, {4}, ${5}, p, {6};\n}",
      acc.empty() ? 0 : 1, n, type, operandList(0, count), aText, bIndex, flags);
  return call.emit(e.b, e.loc, text);
}

SmallVector<Value> wgmma::commit(EmitterCore &e, ArrayRef<Value> regs) {
  AsmCall().emit(e.b, e.loc, "wgmma.commit_group.sync.aligned;");
  return SmallVector<Value>(regs);
}

SmallVector<Value> wgmma::wait(EmitterCore &e, int64_t pending, ArrayRef<Value> regs) {
  AsmCall wait;
  wait.addTied(regs);
  return wait.emit(e.b, e.loc,
                   llvm::formatv("wgmma.wait_group.sync.aligned {0};", pending).str());
}

SmallVector<Value> wgmma::productOverHeadDim(EmitterCore &e, Value a, int64_t aRows, Value b,
                                             int64_t bRows, int64_t n) {
  wgmma::fence(e, {});
  SmallVector<Value> acc;
  for (int64_t kStep = 0; kStep < e.config.headDim / 16; ++kStep) {
    int64_t panel = kStep / 4, column = (kStep % 4) * 32;
    Value x = wgmma::descriptor(e, a, panel * aRows * 128 + column, 16, 1024);
    Value y = wgmma::descriptor(e, b, panel * bRows * 128 + column, 16, 1024);
    acc = wgmma::mma(e, n, acc, {x, {}, y});
  }
  return wgmma::commit(e, acc);
}

SmallVector<Value> SM90Emitter::issueQK(Value keyBuffer) {
  return wgmma::productOverHeadDim(*this, queryAddress, config.br, keyBuffer, config.bc,
                                   config.bc);
}

SmallVector<Value> SM90Emitter::packProbabilities(Value probs) {
  // P in registers: the S accumulators of n-tiles 2k and 2k+1, packed in
  // pairs, are the A fragment of k-step k (as for mma.sync).
  const SmallVector<Value> &p = tiles.find(probs)->second.regs;
  SmallVector<Value> packed;
  for (int64_t kStep = 0; kStep < config.bc / 16; ++kStep) {
    const Value *lo = &p[8 * kStep], *hi = lo + 4;
    for (auto [x, y] : {std::pair{lo[0], lo[1]}, {lo[2], lo[3]}, {hi[0], hi[1]}, {hi[2], hi[3]}})
      packed.push_back(packHalves(x, y));
  }
  return packed;
}

SmallVector<Value> SM90Emitter::issuePV(ArrayRef<Value> acc,
                                        SmallVectorImpl<Value> &packedProbs, Value valueBuffer) {
  SmallVector<Value> operands(acc);
  operands.append(packedProbs.begin(), packedProbs.end());
  operands = wgmma::fence(*this, operands);
  SmallVector<Value> regs(operands.begin(), operands.begin() + acc.size());
  ArrayRef<Value> probs = ArrayRef<Value>(operands).drop_front(acc.size());
  for (int64_t kStep = 0; kStep < config.bc / 16; ++kStep) {
    Value v = wgmma::descriptor(*this, valueBuffer, kStep * 16 * 128, config.bc * 128, 1024);
    regs = wgmma::mma(*this, config.headDim, regs,
                      {Value(), probs.slice(4 * kStep, 4), v, /*transposeA=*/false,
                       /*transposeB=*/true});
  }
  packedProbs.assign(probs.begin(), probs.end());
  return wgmma::commit(*this, regs);
}

LogicalResult SM90Emitter::lowerQKDot(flash::QKDotOp op) {
  if (failed(checkQKDot(op)))
    return failure();
  Value keyBuffer = deferredOp
                        ? kvSlot(flash::KVOperand::Key, blockOrdinal(pipeline->inductionVar)).address
                        : keyAddress;
  if (deferredOp)
    waitForGemmTurn();
  SmallVector<Value> scores = issueQK(keyBuffer);
  scores = deferredOp ? issuePendingPV(scores) : wgmma::wait(*this, 0, scores);
  defineAccumTile(op.getResult(), scores, config.bc, op.getScale().convertToFloat());
  return success();
}

LogicalResult SM90Emitter::lowerAccumulate(Operation *op, Value acc, Value alpha, Value probs,
                                           Value value) {
  if (deferredOp && op == deferredOp.getOperation())
    return lowerDeferredAccumulate(op, acc, alpha, probs, value);
  FailureOr<SmallVector<Value>> scaled = checkAccumulate(op, acc, alpha, probs, value);
  if (failed(scaled))
    return failure();
  SmallVector<Value> packed = packProbabilities(probs);
  SmallVector<Value> regs = issuePV(*scaled, packed, valueAddress);
  regs.append(packed);
  regs = wgmma::wait(*this, 0, regs);
  regs.resize(scaled->size());
  defineAccumTile(op->getResult(0), regs, config.headDim);
  return success();
}
