//===- SplitCombine.cpp - The kernel that merges a split_keys kernel's splits ===//
//
// A flash.kernel with split_keys runs S CTAs per query tile, each over its
// part of the key blocks (flash.split_key_range); with S > 1 each stores
// its partial state, O normalized by its own row sums (f32) and its LSE,
// and this kernel, `<name>_combine`, launched after it on the same stream,
// merges the S states of every row:
//
//   m = max_s LSE_s,  w_s = exp(LSE_s - m),  O = Σ w_s·O_s / Σ w_s,
//   LSE = m + log Σ w_s
//
// (a row no split saw a key of: O = 0, LSE = -inf, as flash.finalize
// gives an unsplit row). A warp merges one row of O: the lanes find m over
// the splits, then walk the splits in order, each lane D/32 columns of
// every O_s, and convert the row to the element type. The interpreter's
// KernelExecutor::combineSplits is the same computation on the host.
//
// ABI: the main kernel's up to and including the split arguments (the
// partial O and LSE and S), so one argument list serves both launches; the
// main kernel appends only its target arguments after them. Grid
// (ceil(B·H·N / 4), 1, 1), 128 threads, no shared memory.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Conversion/FlashToNVVM/KernelModule.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

namespace {

constexpr int64_t kCombineThreads = 128;
constexpr int64_t kCombineWarps = kCombineThreads / 32;

class SplitCombineEmitter : public CompanionEmitter {
public:
  using CompanionEmitter::CompanionEmitter;

  LogicalResult emit();

private:
  /// Merges row `row` of [B, H, N] (this warp's).
  void emitRow(Value row);
  /// Loads `count` consecutive f32 at `address` (aligned to 4·count when
  /// count is 2 or 4).
  SmallVector<Value> loadFloats(Value address, int64_t count);

  Value outPtr, lsePtr, outStrides[3], partialOut, partialLse, splits;
};

SmallVector<Value> SplitCombineEmitter::loadFloats(Value address, int64_t count) {
  Type f32Type = b.getF32Type();
  if (count == 1)
    return {LLVM::LoadOp::create(b, loc, f32Type, address, /*alignment=*/4)};
  auto vectorType = VectorType::get({count}, f32Type);
  Value vector = LLVM::LoadOp::create(b, loc, vectorType, address, /*alignment=*/4 * count);
  SmallVector<Value> values;
  for (int64_t i = 0; i < count; ++i)
    values.push_back(LLVM::ExtractElementOp::create(b, loc, vector, i32(i)));
  return values;
}

void SplitCombineEmitter::emitRow(Value row) {
  using P = arith::CmpIPredicate;
  Type f32Type = b.getF32Type();
  const float negInf = -std::numeric_limits<float>::infinity();
  Value rows = toI64(mul(mul(batchSize, headCount), queryLen)); // B·H·N, i64
  Value row64 = toI64(row);

  // m = max over the splits: lane l reads splits l, l + 32, ...
  auto maxLoop = scf::ForOp::create(b, loc, lane, splits, i32(32), ValueRange{f32(negInf)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(maxLoop.getBody());
    Value at = add(mul(toI64(maxLoop.getInductionVar()), rows), row64);
    Value lse = LLVM::LoadOp::create(b, loc, f32Type, gepElements(partialLse, at, f32Type), 4);
    scf::YieldOp::create(b, loc, ValueRange{fmax(maxLoop.getRegionIterArgs()[0], lse)});
  }
  Value largest = maxLoop.getResult(0);
  for (int64_t mask = 16; mask >= 1; mask /= 2)
    largest = fmax(largest, shuffleXor(largest, mask));
  // A row no split saw: every weight exp2(-inf) = 0 (no -inf - -inf).
  Value unseen = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, largest, f32(negInf));
  Value shift = select(unseen, f32(0), largest);

  // Lane l owns columns [l·c, (l + 1)·c) of the row, c = D / 32.
  int64_t perLane = config.headDim / 32;
  int64_t chunk = perLane % 4 == 0 ? 4 : perLane % 2 == 0 ? 2 : 1;
  Value firstColumn = toI64(mul(lane, i32(perLane)));
  SmallVector<Value> init(perLane + 1, f32(0));
  auto splitLoop = scf::ForOp::create(b, loc, i32(0), splits, i32(1), init);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(splitLoop.getBody());
    Value split = toI64(splitLoop.getInductionVar());
    Value stateRow = add(mul(split, rows), row64);
    Value lse =
        LLVM::LoadOp::create(b, loc, f32Type, gepElements(partialLse, stateRow, f32Type), 4);
    Value weight =
        exp2Approx(fmul(arith::SubFOp::create(b, loc, lse, shift), f32(M_LOG2E)));
    ValueRange carried = splitLoop.getRegionIterArgs();
    SmallVector<Value> next{fadd(carried[0], weight)};
    Value rowStart = add(mul(stateRow, i64(config.headDim)), firstColumn);
    for (int64_t first = 0; first < perLane; first += chunk) {
      Value address = gepElements(partialOut, add(rowStart, i64(first)), f32Type);
      for (auto [i, value] : llvm::enumerate(loadFloats(address, chunk)))
        next.push_back(fma(weight, value, carried[1 + first + i]));
    }
    scf::YieldOp::create(b, loc, next);
  }
  Value total = splitLoop.getResult(0);
  Value inverse = select(unseen, f32(0),
                         arith::DivFOp::create(b, loc, f32(1), total).getResult());

  // (b, h, i) of the row, for O's strides; LSE is dense [B, H, N].
  Value query = arith::RemUIOp::create(b, loc, row, queryLen);
  Value batchHead = arith::DivUIOp::create(b, loc, row, queryLen);
  Value head = arith::RemUIOp::create(b, loc, batchHead, headCount);
  Value batch = arith::DivUIOp::create(b, loc, batchHead, headCount);
  Value outRow = add(add(headOffset(outStrides, batch, head), mul(toI64(query), outStrides[2])),
                     firstColumn);
  SmallVector<Value> values;
  for (int64_t c = 0; c < perLane; ++c)
    values.push_back(fmul(splitLoop.getResult(1 + c), inverse));
  if (perLane % 2 == 0) {
    // Pairs of halves as i32 words: 4, 8 or 16 bytes per lane.
    SmallVector<Value> words;
    for (int64_t c = 0; c < perLane; c += 2)
      words.push_back(packHalves(values[c], values[c + 1]));
    Value address = gepElements(outPtr, outRow, b.getI16Type());
    if (words.size() == 1) {
      LLVM::StoreOp::create(b, loc, words[0], address, /*alignment=*/4);
    } else {
      auto vectorType = VectorType::get({static_cast<int64_t>(words.size())}, b.getI32Type());
      Value vector = LLVM::PoisonOp::create(b, loc, vectorType);
      for (auto [i, word] : llvm::enumerate(words))
        vector = LLVM::InsertElementOp::create(b, loc, vector, word, i32(i));
      LLVM::StoreOp::create(b, loc, vector, address, /*alignment=*/4 * words.size());
    }
  } else {
    for (int64_t c = 0; c < perLane; ++c) {
      Value half = LLVM::FPTruncOp::create(b, loc, config.elementType, values[c]);
      LLVM::StoreOp::create(b, loc, half,
                            gepElements(outPtr, add(outRow, i64(c)), b.getI16Type()), 2);
    }
  }
  auto firstLane = scf::IfOp::create(b, loc, cmpI(P::eq, lane, i32(0)), /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(firstLane.thenBlock()->getTerminator());
  Value logTotal = fmul(log2Approx(total), f32(M_LN2));
  Value lse = select(unseen, f32(negInf), fadd(largest, logTotal));
  LLVM::StoreOp::create(b, loc, lse, gepElements(lsePtr, row64, f32Type), 4);
}

LogicalResult SplitCombineEmitter::emit() {
  MLIRContext *ctx = kernel.getContext();
  if (config.headDim % 32 != 0)
    return error(kernel, "the split combine kernel needs a head dim that is a multiple of 32");
  SmallVector<Type> argTypes;
  if (failed(appendForwardArguments(argTypes)))
    return failure();
  unsigned firstSplitArgument = argTypes.size();
  appendSplitArguments(argTypes);
  b.setInsertionPointToEnd(gpuModule.getBody());
  func = LLVM::LLVMFuncOp::create(
      b, loc, splitCombineKernelName(kernelName()),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  func->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func->setAttr(NVVM::NVVMDialect::getReqntidAttrName(),
                b.getDenseI32ArrayAttr({static_cast<int32_t>(kCombineThreads), 1, 1}));
  // Reads the partial states only; writes O and LSE.
  for (unsigned i : {3u, 4u, firstSplitArgument, firstSplitArgument + 1})
    func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
  for (unsigned i : {firstSplitArgument, firstSplitArgument + 1})
    func.setArgAttr(i, LLVM::LLVMDialect::getReadonlyAttrName(), b.getUnitAttr());

  Block &entry = *func.addEntryBlock(b);
  b.setInsertionPointToStart(&entry);
  outPtr = entry.getArgument(3);
  lsePtr = entry.getArgument(4);
  for (int i = 0; i < 3; ++i)
    outStrides[i] = entry.getArgument(5 + 9 + i); // after q's, k's and v's
  unsigned arg = bindSizesAndInputs(entry.getArguments(), 5 + 12);
  partialOut = entry.getArgument(arg++);
  partialLse = entry.getArgument(arg++);
  splits = entry.getArgument(arg++);
  bindThreadCoordinates();

  Value row = add(mul(NVVM::BlockIdXOp::create(b, loc, b.getI32Type()), i32(kCombineWarps)), warp);
  Value rows = mul(mul(batchSize, headCount), queryLen);
  auto inside =
      scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, row, rows), /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(inside.thenBlock()->getTerminator());
    emitRow(row);
  }
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

} // namespace

flash::LaunchAttr lowering::emitSplitCombineKernel(flash::KernelOp kernel,
                                                   const KernelConfig &config,
                                                   gpu::GPUModuleOp gpuModule, StringRef passName,
                                                   flash::GemmKind gemm) {
  SplitCombineEmitter emitter(kernel, config, gpuModule, passName);
  LogicalResult emitted = emitter.emit();
  return emitter.launchFacts(emitted, gemm, flash::GridKind::SplitCombine, kCombineThreads,
                                 /*dynamicSharedBytes=*/0);
}
