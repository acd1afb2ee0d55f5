//===- BackwardKernels.cpp - The backward's kernels, ABI and walk ---------===//
//
// The ABI the three kernels share, the preprocess and convert kernels, and
// the walk over the main region: loops, copies, row statistics and the
// element-wise ops on transposed tiles (layout in BackwardEmitter.h). The
// mma.sync GEMMs are in BackwardGemms.cpp.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToSM80/BackwardEmitter.h"
#include "flashc/Config/KernelRules.h"
#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Conversion/FlashToNVVM/KernelModule.h"
#include "flashc/Conversion/FlashToSM80/Passes.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/SaveAndRestore.h"

#include <array>
#include <limits>
#include <optional>

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm80;

static constexpr double kLog2E = 1.4426950408889634;
static constexpr int64_t kSmallKernelThreads = 128;

BackwardEmitter::BackwardEmitter(flash::BackwardKernelOp kernel,
                                 const KernelConfig &config,
                                 gpu::GPUModuleOp gpuModule, StringRef pass,
                                 bool deterministic, bool stageAuxGrads)
    : EmitterCore(kernel, config, gpuModule), kernel(kernel), pass(pass.str()),
      columnSlices(config::backwardColumnSlices(config.headDim)),
      deterministic(deterministic), stageAuxGrads(stageAuxGrads) {
  kernel.walk([&](flash::ScoreModGradOp op) { stagesAuxGrads |= !stagedAddsOf(op).empty(); });
  kernel.walk([&](flash::AuxGradAddOp) { addsAuxGrads = true; });
  // dPᵀ beside Sᵀ costs Br/2 registers through the mask and the
  // probabilities: on mma.sync ptxas spills at D = 128 and with aux
  // gradient adds (measured with ptxas -v over the examples).
  pairsTransposedProducts = config.headDim <= 64 && !addsAuxGrads;
}

std::string BackwardEmitter::functionName(flash::BackwardKernelOp kernel,
                                          BackwardStage stage) {
  switch (stage) {
  case BackwardStage::Preprocess:
    return backwardKernelName(kernel.getSymName(), "preprocess");
  case BackwardStage::Main:
    return backwardKernelName(kernel.getSymName());
  case BackwardStage::Convert:
    return backwardKernelName(kernel.getSymName(), "convert");
  }
  llvm_unreachable("unknown stage");
}

int64_t BackwardEmitter::threadsOf(BackwardStage s) const {
  switch (s) {
  case BackwardStage::Preprocess: // a few lanes per query row
    return kSmallKernelThreads;
  case BackwardStage::Main:
    return config.numThreads;
  case BackwardStage::Convert:
    return kSmallKernelThreads;
  }
  llvm_unreachable("unknown stage");
}

int64_t BackwardEmitter::launchThreadsOf(BackwardStage s) const {
  return threadsOf(s) + (s == BackwardStage::Main ? auxiliaryThreads() : 0);
}

void BackwardEmitter::syncBodyThreads() {
  if (!auxiliaryThreads()) {
    NVVM::Barrier0Op::create(b, loc);
    return;
  }
  syncNamedBarrier(1, threadsOf(BackwardStage::Main));
}

int64_t BackwardEmitter::sharedBytesOf(BackwardStage s) const {
  return s == BackwardStage::Main
             ? llvm::alignTo(mainSharedBytes(queryStages()), 16) +
                   rowStatBytes(queryStages()) + stagingBytes()
             : 0;
}

int64_t BackwardEmitter::queryStages() const {
  auto fits = [&](int64_t stages) {
    return llvm::alignTo(mainSharedBytes(stages), 16) + rowStatBytes(stages) + stagingBytes() <=
           kMaxSharedBytes;
  };
  if (mergeBarriers >= 3 && fits(3))
    return 3;
  return fits(2) ? 2 : 1;
}

int64_t BackwardEmitter::rowStatBytes(int64_t stages) const {
  // Two statistics (LSE, Δ) per stage; only the pipelined loop stages them.
  return stages >= 2 ? stages * 2 * config.br * 4 : 0;
}

Value BackwardEmitter::rowStatBuffer(int64_t slot, Value stage) {
  return gepBytes(smemRowStats, add(i32(slot * config.br * 4), mul(stage, i32(2 * config.br * 4))));
}

int64_t BackwardEmitter::stagingBytes() const {
  return hasStagedAdds() ? kStagingSlots * 8 + config.numWarps * kMaxStagedAdds * 16 : 0;
}

Value BackwardEmitter::sharedChunkOffset(Value row, Value chunk, int64_t rows) {
  return add(mul(row, i32(BackwardLayout(config).rowBytes())),
             mul(chunk, i32(16)));
}

std::optional<int64_t> BackwardEmitter::sharedRowStepBytes(int64_t rowStep) {
  return rowStep * BackwardLayout(config).rowBytes();
}

//===----------------------------------------------------------------------===//
// The ABI
//===----------------------------------------------------------------------===//

void BackwardEmitter::emitFunction(StringRef name) {
  MLIRContext *ctx = kernel.getContext();
  auto globalPtr = LLVM::LLVMPointerType::get(ctx, 1);
  // q k v o dO lse Δ dq_accum dq_lock dq dk dv; strides of q k v o dO dq dk dv;
  // B H HKV N M; params; aux tensors; one f32 gradient per aux tensor; one
  // i64 fixed-point accumulator per aux tensor (deterministic mode); the
  // block summary (a kernel with one).
  static_assert(3 * kStrideSets == kBackwardStrides, "a (batch, head, row) stride per set");
  SmallVector<Type> argTypes;
  appendBackwardArguments(argTypes);

  b.setInsertionPointToEnd(gpuModule.getBody());
  func = LLVM::LLVMFuncOp::create(
      b, loc, name,
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  func->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func->setAttr(
      NVVM::NVVMDialect::getReqntidAttrName(),
      b.getDenseI32ArrayAttr({static_cast<int32_t>(launchThreadsOf(stage)), 1, 1}));
  for (unsigned i = 0; i < argTypes.size(); ++i)
    if (argTypes[i] == globalPtr)
      func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                      b.getUnitAttr());

  Block &entry = *func.addEntryBlock(b);
  b.setInsertionPointToStart(&entry);
  unsigned arg = 0;
  for (Value *pointer : {&qPtr, &kPtr, &vPtr, &oPtr, &outputGradPtr, &lsePtr,
                         &deltaPtr, &queryGradAccumPtr, &queryGradLockPtr,
                         &queryGradPtr, &keyGradPtr, &valueGradPtr})
    *pointer = entry.getArgument(arg++);
  for (auto &set : strides)
    for (Value &stride : set)
      stride = entry.getArgument(arg++);
  arg = bindSizesAndInputs(entry.getArguments(), arg);
  for (Attribute attr : kernel.getTensors())
    auxGradPointers[cast<flash::AuxTensorAttr>(attr).getName().getValue()] =
        entry.getArgument(arg++);
  for (Attribute attr : kernel.getTensors())
    auxGradFixedPointers[cast<flash::AuxTensorAttr>(attr).getName().getValue()] =
        entry.getArgument(arg++);
  if (kernel.getBlockSummaryAttr())
    blockSummaryPtr = entry.getArgument(arg++);
  bindThreadCoordinates();
}

LogicalResult BackwardEmitter::emit(BackwardStage which) {
  stage = which;
  for (Attribute attr : kernel.getParams()) {
    auto param = cast<flash::ParamAttr>(attr);
    if (!param.getType().isInteger(32) && !param.getType().isF32())
      return error(kernel, "parameter '")
             << param.getName().getValue() << "' must be i32 or f32";
  }
  emitFunction(functionName(kernel, stage));
  LogicalResult result = success();
  switch (stage) {
  case BackwardStage::Preprocess:
    result = emitPreprocess();
    break;
  case BackwardStage::Main:
    result = emitMain();
    break;
  case BackwardStage::Convert:
    result = emitConvert();
    break;
  }
  if (failed(result))
    return failure();
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

flash::LaunchAttr BackwardEmitter::launchAttr(BackwardStage which) {
  SmallVector<Attribute> paramNames, paramTypes, tensorNames;
  signatureNames(paramNames, paramTypes, tensorNames);
  flash::GridKind grid = which == BackwardStage::Main
                             ? flash::GridKind::PerKeyTile
                             : flash::GridKind::PerRowTile;
  auto emitError = [&] {
    return kernel.emitOpError()
           << passName() << ": internal error: invalid launch facts: ";
  };
  int64_t threads = launchThreadsOf(which);
  return flash::LaunchAttr::getChecked(
      emitError, kernel.getContext(), gemmKind(), grid, threads,
      sharedBytesOf(which), config.br, config.bc, config.headDim, threads / 32,
      /*rows_per_warp=*/int64_t{16}, config.elementType,
      /*tensor_maps=*/int64_t{0}, b.getArrayAttr(paramNames),
      b.getArrayAttr(paramTypes), b.getArrayAttr(tensorNames),
      which == BackwardStage::Main ? columnSlices : int64_t{1});
}

Value BackwardEmitter::columnSliceOffset(int64_t bytes) {
  return columnSlice ? mul(columnSlice, i32(bytes)) : Value();
}

Value BackwardEmitter::ownsAuxGrads(Value predicate) {
  if (!columnSlice)
    return predicate;
  return arith::AndIOp::create(b, loc, predicate,
                               cmpI(arith::CmpIPredicate::eq, columnSlice, i32(0)));
}

Value BackwardEmitter::queryTileIndex(Value batch, Value head, Value queryTile) {
  Value tiles = arith::CeilDivUIOp::create(b, loc, queryLen, i32(config.br));
  return add(mul(add(mul(batch, headCount), head), tiles), queryTile);
}

Value BackwardEmitter::queryGradAccumTile(Value batch, Value head, Value queryTile,
                                          Value slice) {
  // In i32 up to the tile's index (B·H·tiles stays far below 2^31 where
  // dq_accum fits a GPU): a 64-bit product of the loop-invariant factors
  // would be hoisted out of the query loop and held in two registers.
  Value tile = toI64(queryTileIndex(batch, head, queryTile));
  Value first = mul(tile, i64(config.br * config.headDim));
  if (slice)
    first = add(first, toI64(mul(slice, i32(config.br * gradColumns()))));
  return first;
}

Value BackwardEmitter::queryGradAccumElement(Value row, Value column) {
  Value pair = arith::ShRUIOp::create(b, loc, row, i32(1));
  Value slot = arith::XOrIOp::create(
      b, loc, pair, arith::AndIOp::create(b, loc, mul(column, i32(4)), i32(queryGradPairSwizzle())));
  return add(mul(column, i32(config.br)),
             add(mul(slot, i32(2)), arith::AndIOp::create(b, loc, row, i32(1))));
}

//===----------------------------------------------------------------------===//
// Preprocess and convert
//===----------------------------------------------------------------------===//

/// Element offset of row `row` of (batch, head) in a strided tensor.
static Value rowOffset(EmitterCore &e, Value (&stride)[3], Value batch,
                       Value head, Value row) {
  return e.add(e.headOffset(stride, batch, head), e.mul(e.toI64(row), stride[2]));
}

/// Element offset of (batch, head, row) in a dense [B, H, N] f32 array.
static Value statIndex(EmitterCore &e, Value batch, Value head, Value row) {
  return e.add(
      e.toI64(e.mul(e.add(e.mul(batch, e.headCount), head), e.queryLen)),
      e.toI64(row));
}

LogicalResult BackwardEmitter::emitPreprocess() {
  Type i32Type = b.getI32Type(), f32Type = b.getF32Type();
  Block &block = kernel.getPreprocessBlock();
  Value queryTile = NVVM::BlockIdXOp::create(b, loc, i32Type);
  Value head = NVVM::BlockIdYOp::create(b, loc, i32Type);
  Value batch = NVVM::BlockIdZOp::create(b, loc, i32Type);
  scalars.map(block.getArgument(0), batch);
  scalars.map(block.getArgument(1), head);
  scalars.map(block.getArgument(2), queryTile);

  // A row is read by `lanes` neighbouring lanes, lane k taking 16-byte
  // chunks k, k + lanes, ...: a warp's load covers 32 / lanes whole rows
  // of 128 bytes and more (one thread per row touched 32 rows per load, at
  // half the copy rate: 163 us for the 128 MB of O and dO at D = 128 on an
  // H100 under ncu). The lanes' partial dots meet by shuffles.
  int64_t chunksPerRow = config.headDim / 8, lanes = 1;
  while (lanes < 8 && chunksPerRow % (2 * lanes) == 0)
    lanes *= 2;
  int64_t threads = threadsOf(BackwardStage::Preprocess), rowsPerPass = threads / lanes;
  Value laneInRow = arith::RemUIOp::create(b, loc, tid, i32(lanes));
  Value rowInPass = arith::DivUIOp::create(b, loc, tid, i32(lanes));
  Value lastRow = arith::SubIOp::create(b, loc, queryLen, i32(1));
  auto chunkType = VectorType::get({8}, config.elementType);
  auto f32x4 = VectorType::get({4}, f32Type);
  // Each pass's Δ (valid, value, address), stored after every pass's loads.
  SmallVector<std::array<Value, 3>> deltaStores;
  for (int64_t first = 0; first < config.br; first += rowsPerPass) {
    Value tileRow = add(rowInPass, i32(first));
    Value row = add(mul(queryTile, i32(config.br)), tileRow);
    Value valid = cmpI(arith::CmpIPredicate::slt, row, queryLen);
    if (first + rowsPerPass > config.br)
      valid = arith::AndIOp::create(b, loc, valid,
                                    cmpI(arith::CmpIPredicate::ult, tileRow, i32(config.br)));
    // Rows past N (or past the tile) read the last row: every lane reaches
    // the shuffles, and only valid rows store.
    Value readRow = arith::MinSIOp::create(b, loc, row, lastRow);
    DenseMap<Value, Value> rowBase; // load_rows result -> the row's first element
    for (Operation &op : block.without_terminator()) {
      loc = op.getLoc();
      if (auto load = dyn_cast<flash::LoadRowsOp>(op)) {
        bool isOutput = load.getOperand() == flash::RowOperand::Output;
        Value base = isOutput ? oPtr : outputGradPtr;
        Value offset = rowOffset(*this, strides[isOutput ? OS : DOS],
                                 lookupScalar(load.getBatch()),
                                 lookupScalar(load.getHead()), readRow);
        rowBase[load.getResult()] = gepElements(base, offset, config.elementType);
        continue;
      }
      if (auto dot = dyn_cast<flash::RowDotOp>(op)) {
        Value lhs = rowBase.lookup(dot.getLhs()),
              rhs = rowBase.lookup(dot.getRhs());
        if (!lhs || !rhs)
          return error(&op, "expects two flash.load_rows tiles");
        Value sum = f32(0.0);
        for (int64_t step = 0; step < chunksPerRow / lanes; ++step) {
          Value element0 = mul(add(laneInRow, i32(step * lanes)), i32(8));
          auto loadChunk = [&](Value base) {
            return LLVM::LoadOp::create(b, loc, chunkType,
                                        gepElements(base, toI64(element0), config.elementType),
                                        16)
                .getResult();
          };
          Value x = loadChunk(lhs), y = loadChunk(rhs);
          for (int64_t e = 0; e < 8; ++e) {
            auto element = [&](Value vec) -> Value {
              Value half = LLVM::ExtractElementOp::create(b, loc, vec, i32(e));
              return LLVM::FPExtOp::create(b, loc, f32Type, half);
            };
            sum = fma(element(x), element(y), sum);
          }
        }
        for (int64_t laneMask = 1; laneMask < lanes; laneMask *= 2)
          sum = fadd(sum, shuffleXor(sum, laneMask));
        scalars.map(dot.getResult(), sum);
        continue;
      }
      if (auto store = dyn_cast<flash::StoreDeltaOp>(op)) {
        Value delta = lookupScalar(store.getDelta());
        if (!delta)
          return error(&op, "expects a flash.row_dot result");
        Value index = statIndex(*this, lookupScalar(store.getBatch()),
                                lookupScalar(store.getHead()), row);
        deltaStores.push_back({valid, delta, gepElements(deltaPtr, index, f32Type)});
        continue;
      }
      if (failed(lowerScalarOp(&op)))
        return failure();
    }
  }
  Value firstLane = cmpI(arith::CmpIPredicate::eq, laneInRow, i32(0));
  for (auto [valid, delta, address] : deltaStores) {
    OpBuilder::InsertionGuard guard(b);
    auto ifStores = scf::IfOp::create(b, loc, arith::AndIOp::create(b, loc, valid, firstLane),
                                      /*withElseRegion=*/false);
    b.setInsertionPoint(ifStores.thenBlock()->getTerminator());
    LLVM::StoreOp::create(b, loc, delta, address, 4);
  }
  // The tile's dQ accumulator starts at 0 (the main kernel adds into it),
  // rows past N included: a bulk reduce adds whole tiles. Where the first
  // add stores the tile, nothing is written (half this kernel's bytes).
  Value zero = LLVM::ZeroOp::create(b, loc, f32x4);
  Value accumTile = gepElements(queryGradAccumPtr, queryGradAccumTile(batch, head, queryTile, {}),
                                b.getF32Type());
  int64_t chunks = firstAddStoresQueryGrads() ? 0 : config.br * config.headDim / 4;
  for (int64_t first = 0; first < chunks; first += threads) {
    OpBuilder::InsertionGuard guard(b);
    Value chunk = add(tid, i32(first));
    if (first + threads > chunks) {
      auto inTile = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, chunk, i32(chunks)),
                                      /*withElseRegion=*/false);
      b.setInsertionPoint(inTile.thenBlock()->getTerminator());
    }
    LLVM::StoreOp::create(b, loc, zero,
                          gepElements(accumTile, toI64(mul(chunk, i32(4))), b.getF32Type()), 16);
  }
  // The query tile's semaphores (deterministic dQ, one per column slice)
  // start at turn 0.
  onFirstThread([&] {
    for (int64_t slice = 0; slice < columnSlices; ++slice)
      LLVM::StoreOp::create(
          b, loc, i32(0),
          lockAddress(batch, head, queryTile, columnSlices > 1 ? i32(slice) : Value()), 4);
  });
  zeroTensorGrads();
  return success();
}

void BackwardEmitter::forEachTensorGradElement(
    const llvm::StringMap<Value> &pointers, int64_t extra,
    llvm::function_ref<void(StringRef name, Value index)> body) {
  // The tensors the main kernel adds gradients into, spread over the whole
  // grid of the small kernel, thread by thread.
  llvm::SetVector<StringRef> names;
  kernel.walk([&](flash::AuxGradAddOp add) { names.insert(add.getTensor()); });
  if (names.empty())
    return;
  Type i32Type = b.getI32Type();
  Value gridX = NVVM::GridDimXOp::create(b, loc, i32Type);
  Value gridY = NVVM::GridDimYOp::create(b, loc, i32Type);
  Value gridZ = NVVM::GridDimZOp::create(b, loc, i32Type);
  Value threads = i64(threadsOf(stage));
  Value block =
      add(mul(add(mul(toI64(NVVM::BlockIdZOp::create(b, loc, i32Type)),
                      toI64(gridY)),
                  toI64(NVVM::BlockIdYOp::create(b, loc, i32Type))),
              toI64(gridX)),
          toI64(NVVM::BlockIdXOp::create(b, loc, i32Type)));
  Value first = add(mul(block, threads), toI64(tid));
  Value step = mul(mul(mul(toI64(gridX), toI64(gridY)), toI64(gridZ)), threads);
  for (StringRef name : names) {
    Value pointer = pointers.lookup(name);
    if (!pointer)
      continue;
    Value elements = tensorElementCount(name);
    if (!elements)
      continue;
    Value count = add(i64(extra), elements);
    // A null pointer: the caller wants no gradient of this tensor.
    auto ifGiven = scf::IfOp::create(b, loc, isNonNull(pointer),
                                     /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifGiven.thenBlock()->getTerminator());
    auto loop = scf::ForOp::create(b, loc, first, count, step);
    b.setInsertionPointToStart(loop.getBody());
    body(name, loop.getInductionVar());
  }
}

Value BackwardEmitter::tensorElementCount(StringRef name) {
  flash::AuxTensorAttr decl = kernel.lookupTensor(name);
  if (!decl)
    return Value();
  Value count = i64(1);
  for (int64_t extent : decl.getExtents())
    count = mul(count,
                flash::AuxTensorAttr::isRole(extent)
                    ? toI64(launchSizeOf(flash::AuxTensorAttr::decodeRole(extent)))
                    : i64(extent));
  return count;
}

Value BackwardEmitter::isNonNull(Value pointer) {
  return LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne, pointer,
                              LLVM::ZeroOp::create(b, loc, pointer.getType()));
}

void BackwardEmitter::zeroTensorGrads() {
  if (deterministic) {
    // The fixed-point accumulators: the overflow flag, then the elements.
    forEachTensorGradElement(auxGradFixedPointers, 1, [&](StringRef name, Value index) {
      LLVM::StoreOp::create(
          b, loc, i64(0),
          gepElements(auxGradFixedPointers.lookup(name), index, b.getI64Type()),
          8);
    });
    return;
  }
  forEachTensorGradElement(auxGradPointers, 0, [&](StringRef name, Value index) {
    LLVM::StoreOp::create(
        b, loc, f32(0.0),
        gepElements(auxGradPointers.lookup(name), index, b.getF32Type()), 4);
  });
}

void BackwardEmitter::convertFixedPointGrads() {
  forEachTensorGradElement(auxGradPointers, 0, [&](StringRef name, Value index) {
    Value fixed = auxGradFixedPointers.lookup(name);
    // The runtime passes both pointers or neither; a missing accumulator
    // leaves the gradient NaN rather than a silent zero.
    Value nan = f32(std::numeric_limits<float>::quiet_NaN());
    auto ifFixed = scf::IfOp::create(b, loc, b.getF32Type(), isNonNull(fixed),
                                     /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifFixed.thenBlock());
      Value flag = LLVM::LoadOp::create(b, loc, b.getI64Type(), fixed, 8);
      Value sum = LLVM::LoadOp::create(
          b, loc, b.getI64Type(),
          gepElements(fixed, add(index, i64(1)), b.getI64Type()), 8);
      Value value = arith::MulFOp::create(
          b, loc, arith::SIToFPOp::create(b, loc, b.getF32Type(), sum),
          f32(kFixedPointUnit));
      Value clean = cmpI(arith::CmpIPredicate::eq, flag, i64(0));
      scf::YieldOp::create(b, loc, select(clean, value, nan));
      b.setInsertionPointToStart(ifFixed.elseBlock());
      scf::YieldOp::create(b, loc, nan);
    }
    LLVM::StoreOp::create(
        b, loc, ifFixed.getResult(0),
        gepElements(auxGradPointers.lookup(name), index, b.getF32Type()), 4);
  });
}

LogicalResult BackwardEmitter::emitConvert() {
  Type i32Type = b.getI32Type(), f32Type = b.getF32Type();
  Value queryTile = NVVM::BlockIdXOp::create(b, loc, i32Type);
  Value head = NVVM::BlockIdYOp::create(b, loc, i32Type);
  Value batch = NVVM::BlockIdZOp::create(b, loc, i32Type);
  // A thread converts four rows x eight columns: per column, the rows'
  // two pairs lie in two neighbouring slots (the swizzle keeps bit 0 of
  // the pair index), one 16-byte load. Neighbouring threads take
  // neighbouring columns, so a row's stores are coalesced; the loads of
  // threads one row quad apart share 32-byte sectors.
  int64_t chunksPerRow = config.headDim / 8, total = config.br / 4 * chunksPerRow;
  auto f32x4 = VectorType::get({4}, f32Type);
  auto chunkType = VectorType::get({8}, config.elementType);
  Value accumTile = gepElements(queryGradAccumPtr, queryGradAccumTile(batch, head, queryTile, {}),
                                f32Type);
  Value firstRow = mul(queryTile, i32(config.br));
  for (int64_t it = 0; it * kSmallKernelThreads < total; ++it) {
    OpBuilder::InsertionGuard guard(b);
    Value index = add(tid, i32(it * kSmallKernelThreads));
    Value quad = arith::DivUIOp::create(b, loc, index, i32(chunksPerRow));
    Value chunk = arith::RemUIOp::create(b, loc, index, i32(chunksPerRow));
    Value valid = cmpI(arith::CmpIPredicate::slt, add(firstRow, mul(quad, i32(4))), queryLen);
    if ((it + 1) * kSmallKernelThreads > total)
      valid = arith::AndIOp::create(b, loc, valid,
                                    cmpI(arith::CmpIPredicate::ult, index, i32(total)));
    auto inside = scf::IfOp::create(b, loc, valid, /*withElseRegion=*/false);
    b.setInsertionPoint(inside.thenBlock()->getTerminator());
    Value column = mul(chunk, i32(8));
    SmallVector<Value> rows(4, LLVM::UndefOp::create(b, loc, chunkType));
    // A tile no turn added (no key block sees it) was never written: zeros.
    Value untouched;
    if (firstAddStoresQueryGrads()) {
      Value slice = columnSlices > 1
                        ? arith::DivUIOp::create(b, loc, column,
                                                 i32(config.headDim / columnSlices))
                              .getResult()
                        : Value();
      Value turns = LLVM::LoadOp::create(b, loc, i32Type,
                                         lockAddress(batch, head, queryTile, slice), 4);
      untouched = cmpI(arith::CmpIPredicate::eq, turns, i32(0));
    }
    for (int64_t e = 0; e < 8; ++e) {
      Value four = LLVM::LoadOp::create(
          b, loc, f32x4,
          gepElements(accumTile,
                      toI64(queryGradAccumElement(mul(quad, i32(4)), add(column, i32(e)))),
                      f32Type),
          16);
      if (untouched)
        four = select(untouched, LLVM::ZeroOp::create(b, loc, f32x4), four);
      for (int64_t r = 0; r < 4; ++r) {
        Value element = LLVM::ExtractElementOp::create(b, loc, four, i32(r));
        rows[r] = LLVM::InsertElementOp::create(
            b, loc, rows[r], LLVM::FPTruncOp::create(b, loc, config.elementType, element),
            i32(e));
      }
    }
    for (int64_t r = 0; r < 4; ++r) {
      Value row = add(firstRow, add(mul(quad, i32(4)), i32(r)));
      OpBuilder::InsertionGuard rowGuard(b);
      if (r > 0) {
        auto inN = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, row, queryLen),
                                     /*withElseRegion=*/false);
        b.setInsertionPoint(inN.thenBlock()->getTerminator());
      }
      Value target = gepElements(
          queryGradPtr, add(rowOffset(*this, strides[DQS], batch, head, row), toI64(column)),
          config.elementType);
      LLVM::StoreOp::create(b, loc, rows[r], target, 16);
    }
  }
  if (deterministic)
    convertFixedPointGrads();
  return success();
}

//===----------------------------------------------------------------------===//
// The main kernel: walk
//===----------------------------------------------------------------------===//

LogicalResult BackwardEmitter::emitMain() {
  Type i32Type = b.getI32Type();
  assignSharedBuffers();
  splitBodyThreads();
  int64_t rowStatOffset = llvm::alignTo(mainSharedBytes(queryStages()), 16);
  smemRowStats = gepBytes(sharedMemoryBase(/*alignment=*/16), i32(rowStatOffset));
  if (hasStagedAdds()) {
    // The staging slots start at 0 (each flush leaves them so); the first
    // barrier of the first tile orders this before any add.
    stagingBase = gepBytes(sharedMemoryBase(/*alignment=*/16),
                           i32(rowStatOffset + rowStatBytes(queryStages())));
    Value threads = i32(threadsOf(BackwardStage::Main));
    auto zero = scf::ForOp::create(b, loc, tid, i32(kStagingSlots), threads);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(zero.getBody());
    LLVM::StoreOp::create(b, loc, i64(0),
                          gepBytes(stagingBase, mul(zero.getInductionVar(), i32(8))), 8);
  }
  // Adjacent CTAs share a key block (its K and V are read from L2 once).
  Value ctaColumn = ctaKeyColumn();
  if (columnSlices > 1)
    columnSlice = arith::RemUIOp::create(b, loc, NVVM::BlockIdXOp::create(b, loc, i32Type),
                                         i32(columnSlices));
  Value keyTile = ctaColumn;
  if (deterministic) {
    turn = awaitedTurn = ctaColumn;
    Value keyTiles = arith::CeilDivUIOp::create(b, loc, keyLen, i32(config.bc));
    keyTile = arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, keyTiles, i32(1)),
                                    ctaColumn);
  }
  scalars.map(kernel.getKeyTile(), keyTile);
  scalars.map(kernel.getKvHead(), NVVM::BlockIdYOp::create(b, loc, i32Type));
  scalars.map(kernel.getBatch(), NVVM::BlockIdZOp::create(b, loc, i32Type));
  if (failed(lowerBlock(kernel.getMainBlock())))
    return failure();
  // No copy may be in flight when the CTA exits (every query tile skipped).
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  drainQueryGrads();
  return success();
}

LogicalResult BackwardEmitter::lowerBlock(Block &block) {
  for (Operation &op : block.without_terminator())
    if (!loweredAhead.contains(&op) && failed(lowerOp(&op)))
      return failure();
  // The terminator yields the accumulators.
  settleAccumulates();
  return success();
}

LogicalResult BackwardEmitter::lowerOp(Operation *op) {
  loc = op->getLoc();
  // Products in flight overlap softmax_grad (dS = P·(dP - Δ)), the other
  // accumulating product and the dQ add only; a score mod's gradient
  // waits for them.
  if (!isa<flash::SoftmaxGradOp, flash::AccumulateTransposedOp, flash::QueryGradAddOp>(op))
    settleAccumulates();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](scf::ForOp loop) { return lowerFor(loop); })
      .Case([&](flash::LoadKVOp load) {
        bool isKey = load.getOperand() == flash::KVOperand::Key;
        return lowerTileCopy(load, isKey ? kPtr : vPtr, isKey ? KS : VS,
                             load.getBatch(), load.getKvHead(),
                             load.getKeyTile(), /*keyRows=*/true,
                             isKey ? smemK : smemV);
      })
      .Case([&](flash::LoadQOp load) {
        RowTensor rows = rowTensorOf(load);
        return lowerTileCopy(load, rows.base, rows.set, load.getBatch(), load.getHead(),
                             load.getQueryTile(), /*keyRows=*/false, rows.smem);
      })
      .Case([&](flash::LoadRowsOp load) -> LogicalResult {
        if (load.getOperand() != flash::RowOperand::OutputGrad)
          return error(op, "O is read by the preprocess only");
        RowTensor rows = rowTensorOf(load);
        return lowerTileCopy(load, rows.base, rows.set, load.getBatch(),
                             load.getHead(), load.getQueryTile(),
                             /*keyRows=*/false, rows.smem);
      })
      .Case([&](flash::LoadRowStatOp load) { return lowerRowStat(load); })
      .Case([&](flash::QKDotOp dot) {
        return lowerTransposedDot(dot, dot.getKey(), dot.getQuery(),
                                  dot.getScale().convertToFloat());
      })
      .Case([&](flash::OutputGradDotOp dot) {
        return lowerTransposedDot(dot, dot.getValue(), dot.getOutputGrad(),
                                  1.0f);
      })
      .Case([&](flash::ScoreModOp mod) { return lowerElementRegion(mod); })
      .Case([&](flash::MaskOp mask) { return lowerElementRegion(mask); })
      .Case([&](flash::MaskKeyBoundsOp bounds) {
        return lowerMaskKeyBounds(bounds);
      })
      .Case([&](flash::RecomputeProbsOp probs) {
        return lowerRecomputeProbs(probs);
      })
      .Case([&](flash::SoftmaxGradOp grad) { return lowerSoftmaxGrad(grad); })
      .Case([&](flash::ScoreModGradOp grad) { return lowerScoreModGrad(grad); })
      .Case([&](flash::AccumulateTransposedOp acc) {
        return lowerAccumulateTransposed(acc);
      })
      .Case([&](flash::QueryGradAddOp add) { return lowerQueryGradAdd(add); })
      .Case([&](flash::StoreKeyGradsOp store) {
        return lowerStoreKeyGrads(store);
      })
      .Case([&](arith::ConstantOp constant) -> LogicalResult {
        if (!isa<ShapedType>(constant.getType()))
          return lowerScalarOp(constant);
        FailureOr<BackwardValue> tile = zeroTile(constant);
        if (failed(tile))
          return failure();
        values[constant.getResult()] = std::move(*tile);
        return success();
      })
      .Default([&](Operation *other) { return lowerScalarOp(other); });
}

int64_t BackwardEmitter::registerCount(Type type) const {
  auto tensor = cast<RankedTensorType>(type);
  if (tensor.getRank() == 1)
    return config.br / 8 * 2;
  if (tensor.getDimSize(0) == config.bc &&
      tensor.getDimSize(1) == config.headDim)
    return gradColumns() / 8 * 4;
  return config.br / 8 * 4;
}

FailureOr<BackwardValue> BackwardEmitter::zeroTile(arith::ConstantOp op) {
  auto type = dyn_cast<RankedTensorType>(op.getType());
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!type || !dense || !dense.isSplat() || !type.getElementType().isF32() ||
      type.getRank() != 2 || type.getDimSize(0) != config.bc ||
      type.getDimSize(1) != config.headDim)
    return error(op,
                 "only splat f32 Bc x D accumulator constants are supported");
  BackwardValue tile;
  tile.kind = BackwardValue::Kind::KeyAcc;
  tile.regs.assign(registerCount(type),
                   f32(dense.getSplatValue<APFloat>().convertToFloat()));
  return tile;
}

void BackwardEmitter::flatten(ValueRange originals,
                              SmallVectorImpl<Value> &out) {
  for (Value original : originals) {
    if (isa<RankedTensorType>(original.getType())) {
      const BackwardValue &tile = values.find(original)->second;
      out.append(tile.regs.begin(), tile.regs.end());
    } else {
      out.push_back(lookupScalar(original));
    }
  }
}

LogicalResult BackwardEmitter::mapFlattened(Operation *user,
                                            ValueRange originals,
                                            ValueRange lowered) {
  for (Value original : originals) {
    if (!isa<RankedTensorType>(original.getType())) {
      scalars.map(original, lowered.front());
      lowered = lowered.drop_front();
      continue;
    }
    auto type = cast<RankedTensorType>(original.getType());
    if (type.getRank() != 2 || type.getDimSize(0) != config.bc)
      return error(user,
                   "loops may carry Bc x D accumulators and scalars only");
    int64_t count = registerCount(type);
    BackwardValue tile;
    tile.kind = BackwardValue::Kind::KeyAcc;
    tile.regs.assign(lowered.begin(), lowered.begin() + count);
    lowered = lowered.drop_front(count);
    values[original] = std::move(tile);
  }
  return success();
}

Value BackwardEmitter::hoistFact(Value fact, scf::ForOp loop) {
  FailureOr<SmallVector<Operation *>> slice = factSlice({fact}, loop);
  if (failed(slice) || failed(lowerSlice(*slice)))
    return {};
  loweredAhead.insert(slice->begin(), slice->end());
  return lookupScalar(fact);
}

/// Whether `value` is computed from `root`: through the operands of its
/// defining op and of the ops nested in that op's regions; a loop's
/// induction variable through the loop's bounds, any other loop-carried
/// value through the whole loop; the kernel's own arguments are inputs.
static bool isComputedFrom(Value value, Value root) {
  SmallVector<Value> worklist{value};
  llvm::DenseSet<Value> seen;
  auto operandsWithin = [&](Operation *op) {
    op->walk([&](Operation *nested) {
      worklist.append(nested->operand_begin(), nested->operand_end());
    });
  };
  while (!worklist.empty()) {
    Value next = worklist.pop_back_val();
    if (next == root)
      return true;
    if (!seen.insert(next).second)
      continue;
    if (Operation *def = next.getDefiningOp()) {
      operandsWithin(def);
      continue;
    }
    Operation *owner = cast<BlockArgument>(next).getOwner()->getParentOp();
    if (auto loop = dyn_cast_or_null<scf::ForOp>(owner); loop && next == loop.getInductionVar())
      worklist.append({loop.getLowerBound(), loop.getUpperBound(), loop.getStep()});
    else if (owner && isa<LoopLikeOpInterface>(owner))
      operandsWithin(owner);
  }
  return false;
}

bool BackwardEmitter::factsFollowKeyTile(scf::ForOp loop,
                                         ArrayRef<Operation *> visibleSlice) {
  Value keyTile = kernel.getKeyTile();
  auto fromKeyTile = [&](Value value) {
    return value != keyTile && isComputedFrom(value, keyTile);
  };
  if (fromKeyTile(loop.getLowerBound()) || fromKeyTile(loop.getUpperBound()) ||
      fromKeyTile(loop.getStep()))
    return false;
  for (Operation *op : visibleSlice)
    for (Value operand : op->getOperands())
      if (operand != loop.getInductionVar() && loop.isDefinedOutsideOfLoop(operand) &&
          fromKeyTile(operand))
        return false;
  return true;
}

Value BackwardEmitter::turnBeforeTile(ArrayRef<Operation *> visibleSlice, Value anyVisible) {
  // Turn r takes key block T - 1 - r: the earlier turns are the later key
  // blocks, the nearest the last to add.
  Value keyTileArg = kernel.getKeyTile();
  Value ownKeyTile = lookupScalar(keyTileArg);
  // From the loop's opaque key length, as the other per-tile indices are
  // (OpaqueLoopValues), not one more value held across the loop.
  Value keyTiles = arith::CeilDivUIOp::create(b, loc, keyLen, i32(config.bc));
  Value nearest = nextIndexWhere(keyTileArg, visibleSlice,
                                 [&] { return lookupScalar(anyVisible); },
                                 add(ownKeyTile, i32(1)), keyTiles, /*wholeWarp=*/true);
  scalars.map(keyTileArg, ownKeyTile);
  if (!nearest)
    return {};
  // Its turn is T - 1 - nearest; none found (nearest = T) gives 0.
  return arith::SubIOp::create(b, loc, keyTiles, nearest);
}

/// The first classified mask of `loop`'s body: its any_visible decides
/// which query tiles the loop walks.
static flash::MaskOp classifiedMaskOf(scf::ForOp loop) {
  for (auto mask : loop.getBody()->getOps<flash::MaskOp>())
    if (mask.isClassified())
      return mask;
  return {};
}

bool BackwardEmitter::awaitsOwnTurnOnly() {
  if (!deterministic)
    return false;
  bool own = true;
  kernel.getMainBlock().walk([&](scf::ForOp loop) {
    bool addsQueryGrads = false;
    loop->walk([&](flash::QueryGradAddOp) { addsQueryGrads = true; });
    if (addsQueryGrads && classifiedMaskOf(loop))
      own = false;
  });
  return own;
}

Value BackwardEmitter::ctaKeyColumn() {
  Value ctaColumn = NVVM::BlockIdXOp::create(b, loc, b.getI32Type());
  return columnSlices > 1 ? arith::DivUIOp::create(b, loc, ctaColumn, i32(columnSlices)).getResult()
                          : ctaColumn;
}

bool BackwardEmitter::everyTurnAdds() {
  if (!deterministic)
    return false;
  bool every = true;
  kernel.getMainBlock().walk([&](scf::ForOp loop) {
    if (loop.getBody()->getOps<flash::QueryGradAddOp>().empty())
      return;
    // The ops of the body that any_visible is computed from (a superset
    // of the slice lowerFor hoists: this one needs no lowered values).
    SmallVector<Operation *> slice;
    if (flash::MaskOp mask = classifiedMaskOf(loop)) {
      llvm::SetVector<Operation *> ops;
      SmallVector<Value> worklist{mask.getAnyVisible()};
      while (!worklist.empty()) {
        Operation *def = worklist.pop_back_val().getDefiningOp();
        if (def && loop->isAncestor(def) && ops.insert(def))
          worklist.append(def->operand_begin(), def->operand_end());
      }
      slice.assign(ops.begin(), ops.end());
    }
    every &= factsFollowKeyTile(loop, slice);
  });
  return every;
}

/// Batch, head and query tile of a Br-row copy (flash.load_q, flash.load_rows).
static std::optional<std::array<Value, 3>> rowCopyCoordinates(Operation *op) {
  if (auto load = dyn_cast<flash::LoadQOp>(op))
    return std::array<Value, 3>{load.getBatch(), load.getHead(), load.getQueryTile()};
  if (auto load = dyn_cast<flash::LoadRowsOp>(op))
    return std::array<Value, 3>{load.getBatch(), load.getHead(), load.getQueryTile()};
  return std::nullopt;
}

BackwardEmitter::RowTensor BackwardEmitter::rowTensorOf(Operation *copy) const {
  if (isa<flash::LoadQOp>(copy))
    return {qPtr, QS, smemQ};
  return {outputGradPtr, DOS, smemDO};
}

Value BackwardEmitter::stageBuffer(Value buffer, Value stage) {
  return gepBytes(buffer, mul(stage, i32(queryStageBytes())));
}

SmallVector<Operation *> BackwardEmitter::prefetchableCopies(scf::ForOp loop) {
  prefetchedStats.clear();
  if (queryStages() < 2 ||
      getConstantIntValue(loop.getStep()) != std::optional<int64_t>(1))
    return {};
  SmallVector<Operation *> copies;
  for (Operation &op : loop.getBody()->without_terminator()) {
    std::optional<std::array<Value, 3>> at = rowCopyCoordinates(&op);
    if (!at)
      continue;
    auto [batch, head, tile] = *at;
    if (tile != loop.getInductionVar() || !loop.isDefinedOutsideOfLoop(batch) ||
        !loop.isDefinedOutsideOfLoop(head))
      return {};
    copies.push_back(&op);
  }
  // LSE and Δ of the tile come with its copies: read from shared memory
  // where used, instead of an address and a global load per column.
  if (!copies.empty())
    for (auto stat : loop.getBody()->getOps<flash::LoadRowStatOp>())
      if (stat.getQueryTile() == loop.getInductionVar() &&
          loop.isDefinedOutsideOfLoop(stat.getBatch()) &&
          loop.isDefinedOutsideOfLoop(stat.getHead()) && prefetchedStats.size() < 2)
        prefetchedStats.push_back(stat);
  return copies;
}

void BackwardEmitter::issueRowStatCopy(flash::LoadRowStatOp op, Value tile, Value buffer) {
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead());
  Value source = op.getStat() == flash::RowStat::Lse ? lsePtr : deltaPtr;
  int64_t threads = config.numThreads;
  for (int64_t first = 0; first < config.br; first += threads) {
    OpBuilder::InsertionGuard guard(b);
    Value index = add(tid, i32(first));
    if (first + threads > config.br) {
      auto inside = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, index, i32(config.br)),
                                      /*withElseRegion=*/false);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
    }
    Value row = add(mul(tile, i32(config.br)), index);
    Value valid = cmpI(arith::CmpIPredicate::slt, row, queryLen);
    Value src = gepElements(source, statIndex(*this, batch, head, select(valid, row, i32(0))),
                            b.getF32Type());
    NVVM::CpAsyncOp::create(b, loc, gepBytes(buffer, mul(index, i32(4))), src, 4,
                            NVVM::LoadCacheModifierKind::CA, select(valid, i32(4), i32(0)));
  }
}

void BackwardEmitter::issueRowCopies(ArrayRef<Operation *> copies, Value tile,
                                     Value stage, Value predicate) {
  auto issue = scf::IfOp::create(b, loc, predicate, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(issue.thenBlock()->getTerminator());
  // The statistics join the group the first copy commits.
  for (auto [slot, stat] : llvm::enumerate(prefetchedStats))
    issueRowStatCopy(stat, tile, rowStatBuffer(slot, stage));
  for (Operation *op : copies) {
    RowTensor rows = rowTensorOf(op);
    auto [batch, head, unused] = *rowCopyCoordinates(op);
    issueRowCopy(rows.base, rows.set, lookupScalar(batch), lookupScalar(head), tile,
                 stageBuffer(rows.smem, stage));
  }
  // A tile not copied commits as many (empty) groups, so that every
  // iteration leaves the same number in flight for cp.async.wait_group.
  b.setInsertionPoint(issue.elseBlock()->getTerminator());
  for (size_t group = 0; group < copies.size(); ++group)
    NVVM::CpAsyncCommitGroupOp::create(b, loc);
}

LogicalResult BackwardEmitter::lowerQueryTileBody(scf::ForOp loop,
                                                  SmallVectorImpl<Value> &yielded) {
  // Earlier iterations' GEMMs may still read the Q/dO/dSᵀ buffers.
  sharedReadSinceCopy = true;
  if (failed(lowerBlock(*loop.getBody())))
    return failure();
  prefetched.clear();
  prefetchedStatBuffers.clear();
  prefetchAcquired = false;
  groupsInFlight = 0;
  if (copiesAfterScoreGrads)
    return error(loop, "internal error: the tile after next was never copied");
  flatten(cast<scf::YieldOp>(loop.getBody()->getTerminator()).getOperands(), yielded);
  return success();
}

bool BackwardEmitter::addsQueryGradsOnce(scf::ForOp loop) {
  int64_t adds = 0;
  bool inBody = true;
  loop.getBody()->walk([&](flash::QueryGradAddOp add) {
    ++adds;
    inBody &= add->getBlock() == loop.getBody();
  });
  return adds == 1 && inBody;
}

void BackwardEmitter::issueCopiesAfterScoreGrads(bool acquireNext) {
  if (!copiesAfterScoreGrads)
    return;
  // A skipped tile's branch issues them without taking them: the visible
  // tile's body, in the other branch, issues them after its dQ add.
  DeferredCopies copies = *copiesAfterScoreGrads;
  if (acquireNext)
    acquireCopiesLeaving(0);
  else
    copiesAfterScoreGrads.reset();
  auto [tile, stage, predicate] = copies.next();
  issueRowCopies(copies.copies, tile, stage, predicate);
}

void BackwardEmitter::prefetchIntoOtherStage(
    ArrayRef<Operation *> prefetch, Value parity,
    function_ref<std::pair<Value, Value>()> nextTile) {
  Value stage = arith::AndIOp::create(b, loc, parity, i32(1));
  Value nextStage = arith::XOrIOp::create(b, loc, stage, i32(1));
  for (Operation *op : prefetch)
    prefetched[op] = stageBuffer(rowTensorOf(op).smem, stage);
  for (auto [slot, stat] : llvm::enumerate(prefetchedStats))
    prefetchedStatBuffers[stat] = rowStatBuffer(slot, stage);
  // mergeBarriers >= 2: this tile's copies, issued a tile ago, are
  // acquired by the barrier below instead of a second one before the
  // first GEMM.
  if (mergeBarriers >= 2) {
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    fenceSharedWrites();
    copiesPending = false;
    prefetchAcquired = true;
  }
  // Every thread is past the previous tile's GEMMs, which read the other
  // stage (and dSᵀ).
  syncBodyThreads();
  sharedReadSinceCopy = false;
  auto [next, copied] = nextTile();
  issueRowCopies(prefetch, next, nextStage, copied);
  groupsInFlight = static_cast<int64_t>(prefetch.size());
}

LogicalResult BackwardEmitter::lowerFor(scf::ForOp loop) {
  Value lower = lookupScalar(loop.getLowerBound()),
        upper = lookupScalar(loop.getUpperBound()),
        step = lookupScalar(loop.getStep());
  if (!lower || !upper || !step)
    return error(loop, "unknown loop bounds");
  if (loop.getInitArgs().empty())
    return error(loop, "expects a loop that carries the key gradients");
  // What this loop's tiles wait for is defined in its body.
  llvm::SaveAndRestore<Value> restoreAwaitedTurn(awaitedTurn);
  flash::MaskOp skipMask = classifiedMaskOf(loop);
  Value anyVisible = skipMask ? skipMask.getAnyVisible() : Value();
  FailureOr<SmallVector<Operation *>> visibleSlice =
      skipMask ? factSlice({anyVisible}, loop) : FailureOr<SmallVector<Operation *>>(failure());
  // A block summary's class is a global load per query tile, and most of a
  // packed-documents row is empty: walk the visible tiles only.
  bool readsSummary = succeeded(visibleSlice) &&
                      llvm::any_of(*visibleSlice, llvm::IsaPred<flash::BlockClassOp>);
  // Deterministic mode: a skipped tile needs no turn of its own where the
  // turns that add into a tile can be found from its facts (for a block
  // summary, by a search over the other key blocks' summary bytes);
  // otherwise it still waits for its turn and passes it on.
  bool skipsPassTurns = deterministic && succeeded(visibleSlice) &&
                        !factsFollowKeyTile(loop, *visibleSlice);
  if (readsSummary && !skipsPassTurns &&
      getConstantIntValue(loop.getStep()) == std::optional<int64_t>(1))
    return lowerVisibleWalk(loop, *visibleSlice, anyVisible, lower, upper);
  // The loop's ordinal o in [lower, upper) visits tile
  // lower + (o - lower + rotation) mod (upper - lower); the rotation spaces
  // the key blocks of one head (which start together) Bc/Br tiles apart.
  Value rotation, span;
  Value keyTile = rotatesQueryTiles ? lookupScalar(kernel.getKeyTile()) : Value();
  if (keyTile && getConstantIntValue(loop.getStep()) == std::optional<int64_t>(1)) {
    span = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, upper, lower), i32(1));
    rotation = arith::RemUIOp::create(
        b, loc, mul(keyTile, i32(std::max<int64_t>(1, config.bc / config.br))), span);
  }
  auto tileAt = [&](Value ordinal) -> Value {
    if (!rotation)
      return ordinal;
    Value offset = add(arith::SubIOp::create(b, loc, ordinal, lower), rotation);
    return add(lower, arith::RemUIOp::create(b, loc, offset, span));
  };
  // Whether the tile of ordinal `ordinal` (>= lower) is copied: the ordinal
  // is before `upper` and, for a classified mask, the tile not empty.
  auto copiesTile = [&](Value ordinal) -> Value {
    Value inside = cmpI(arith::CmpIPredicate::slt, ordinal, upper);
    Value tile = tileAt(ordinal);
    if (failed(visibleSlice))
      return inside;
    // The tile after the last would read past its summary row (past the
    // summary, for the last row): the last tile stands in.
    if (readsSummary)
      tile = arith::MinSIOp::create(b, loc, tile, arith::SubIOp::create(b, loc, upper, i32(1)));
    scalars.map(loop.getInductionVar(), tile);
    if (failed(lowerSlice(*visibleSlice)))
      return inside;
    return arith::AndIOp::create(b, loc, inside, lookupScalar(anyVisible));
  };
  // Q and dO of the next query tile are copied into the other stage while
  // this one's GEMMs run (FlashAttention-2's software pipelining).
  SmallVector<Operation *> prefetch = prefetchableCopies(loop);
  // Three stages (mergeBarriers >= 3): the tile after next is copied right
  // after the barrier that publishes dSᵀ, which also acquires the next
  // tile's copies, so that a tile starts without a barrier.
  bool copiesAtScoreGradBarrier =
      !prefetch.empty() && queryStages() == 3 && addsQueryGradsOnce(loop);
  auto stageOf = [&](Value ordinal) -> Value {
    // Opaque: LLVM would otherwise strength-reduce every stage offset into
    // a register of its own carried across the loop.
    if (copiesAtScoreGradBarrier)
      return arith::RemUIOp::create(b, loc, opaqueValue(ordinal), i32(3));
    return arith::AndIOp::create(b, loc, ordinal, i32(1));
  };
  if (!prefetch.empty()) {
    // An earlier loop's GEMMs may still read the stage.
    syncBodyThreads();
    issueRowCopies(prefetch, tileAt(lower), stageOf(lower), copiesTile(lower));
    if (copiesAtScoreGradBarrier) {
      Value second = add(lower, i32(1));
      issueRowCopies(prefetch, tileAt(second), stageOf(second), copiesTile(second));
      // The first tile's copies (and K, V) are acquired here, the second's
      // at the first tile's dSᵀ barrier.
      acquireCopiesLeaving(static_cast<int64_t>(prefetch.size()));
    }
  }

  SmallVector<Value> inits;
  flatten(loop.getInitArgs(), inits);
  auto newLoop = scf::ForOp::create(b, loc, lower, upper, step, inits);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(newLoop.getBody());
  Value iv = newLoop.getInductionVar();
  OpaqueLoopValues opaque(*this);
  // The tile of ordinal o is in stage o mod 2 (mod 3 with three stages).
  if (copiesAtScoreGradBarrier) {
    Value stage = stageOf(iv);
    for (Operation *op : prefetch)
      prefetched[op] = stageBuffer(rowTensorOf(op).smem, stage);
    for (auto [slot, stat] : llvm::enumerate(prefetchedStats))
      prefetchedStatBuffers[stat] = rowStatBuffer(slot, stage);
    prefetchAcquired = true;
    sharedReadSinceCopy = false;
    // Computed where issued (nothing held across the tile); the mask's
    // facts lowered for the tile after next are mapped back afterwards.
    copiesAfterScoreGrads = DeferredCopies{prefetch, [&, iv]() {
      Value original = scalars.lookupOrNull(loop.getInductionVar());
      SmallVector<std::pair<Value, Value>> saved;
      if (succeeded(visibleSlice))
        for (Operation *op : *visibleSlice)
          for (Value result : op->getResults())
            saved.push_back({result, scalars.lookupOrNull(result)});
      Value afterNext = add(iv, i32(2));
      Value copied = copiesTile(afterNext);
      std::array<Value, 3> next{tileAt(afterNext), stageOf(afterNext), copied};
      scalars.map(loop.getInductionVar(), original);
      for (auto [result, value] : saved) {
        if (value)
          scalars.map(result, value);
        else
          scalars.erase(result);
      }
      return next;
    }};
  } else if (!prefetch.empty())
    prefetchIntoOtherStage(prefetch, iv, [&] {
      Value next = add(iv, i32(1));
      Value copied = copiesTile(next);
      return std::make_pair(tileAt(next), copied);
    });
  scalars.map(loop.getInductionVar(), tileAt(iv));
  if (failed(mapFlattened(loop, loop.getRegionIterArgs(),
                          newLoop.getRegionIterArgs())))
    return failure();
  // Before hoistFact: the search maps the facts to other key blocks, the
  // hoist maps them back to this one.
  if (deterministic && succeeded(visibleSlice) && !skipsPassTurns) {
    awaitedTurn = turnBeforeTile(*visibleSlice, anyVisible);
    if (!awaitedTurn)
      return error(loop, "the query tiles' any_visible fact does not lower");
  }

  // A query tile the classified mask empties costs one uniform branch
  // around the iteration's body (its copies were never issued).
  scf::IfOp visible;
  if (Value tileVisible = skipMask ? hoistFact(anyVisible, loop) : Value()) {
    visible = scf::IfOp::create(b, loc, ValueRange(inits).getTypes(), tileVisible,
                                /*withElseRegion=*/true);
    b.setInsertionPointToStart(visible.elseBlock());
    // A skipped tile has no dSᵀ barrier: it acquires the next tile's
    // copies and copies the one after itself.
    if (copiesAtScoreGradBarrier)
      issueCopiesAfterScoreGrads(/*acquireNext=*/true);
    // The turns still owed go first: the next turn's CTA may be waiting
    // for them, and this one may now wait at every skipped tile.
    if (skipsPassTurns) {
      settleDeferredTurns();
      for (auto add : loop.getBody()->getOps<flash::QueryGradAddOp>()) {
        Value batch = lookupScalar(add.getBatch()),
              head = lookupScalar(add.getHead()),
              queryTile = lookupScalar(add.getQueryTile());
        if (!batch || !head || !queryTile)
          return error(
              add, "deterministic mode: (b, h, qt) must be known before the "
                   "tile's body");
        Value address = lockAddress(batch, head, queryTile, columnSlice);
        waitForTurn(address);
        passTurn(address);
      }
    }
    scf::YieldOp::create(b, loc, newLoop.getRegionIterArgs());
    b.setInsertionPointToStart(visible.thenBlock());
  }
  SmallVector<Value> yielded;
  if (failed(lowerQueryTileBody(loop, yielded)))
    return failure();
  scf::YieldOp::create(b, loc, yielded);
  if (visible) {
    b.setInsertionPointAfter(visible);
    scf::YieldOp::create(b, loc, visible.getResults());
  }
  b.setInsertionPointAfter(newLoop);
  return mapFlattened(loop, loop.getResults(), newLoop.getResults());
}

LogicalResult BackwardEmitter::lowerVisibleWalk(scf::ForOp loop,
                                                ArrayRef<Operation *> visibleSlice,
                                                Value anyVisible, Value lower, Value upper) {
  // The first visible tile at or after `from`, or `upper`: each warp tests
  // 32 tiles per step (one ballot over its lanes' summary bytes); every
  // warp reads the same bytes, so the answer is the CTA's.
  auto nextVisible = [&](Value from) {
    return nextIndexWhere(loop.getInductionVar(), visibleSlice,
                          [&] { return lookupScalar(anyVisible); }, from, upper,
                          /*wholeWarp=*/true);
  };
  // any_visible is the intervals' fact and the summary's; the intervals
  // alone, without loads, rule out the tiles before a causal diagonal, so
  // the search that reads the summary starts past them.
  Value start = lower;
  if (auto both = anyVisible.getDefiningOp<arith::AndIOp>()) {
    Value intervals = both.getLhs();
    FailureOr<SmallVector<Operation *>> slice = factSlice({intervals}, loop);
    if (succeeded(slice) && llvm::none_of(*slice, llvm::IsaPred<flash::BlockClassOp>))
      if (Value past = nextIndexWhere(loop.getInductionVar(), *slice,
                                      [&] { return lookupScalar(intervals); }, lower, upper,
                                      /*wholeWarp=*/true))
        start = past;
  }
  Value first = nextVisible(start);
  if (!first)
    return error(loop, "the query tiles' any_visible fact does not lower");
  // Q and dO of the next visible tile are copied into the other stage while
  // this one's GEMMs run; the stage alternates with the walk's ordinal.
  SmallVector<Operation *> prefetch = prefetchableCopies(loop);
  if (!prefetch.empty()) {
    // An earlier loop's GEMMs may still read the stage.
    syncBodyThreads();
    issueRowCopies(prefetch, first, i32(0), cmpI(arith::CmpIPredicate::slt, first, upper));
  }

  SmallVector<Value> inits{first, i32(0)};
  flatten(loop.getInitArgs(), inits);
  SmallVector<Type> types(ValueRange(inits).getTypes());
  SmallVector<Location> locs(inits.size(), loc);
  auto walk = scf::WhileOp::create(b, loc, types, inits);
  OpBuilder::InsertionGuard guard(b);
  Block *before = b.createBlock(&walk.getBefore(), {}, types, locs);
  scf::ConditionOp::create(b, loc,
                           cmpI(arith::CmpIPredicate::slt, before->getArgument(0), upper),
                           before->getArguments());
  Block *after = b.createBlock(&walk.getAfter(), {}, types, locs);
  Value tile = after->getArgument(0), ordinal = after->getArgument(1);
  OpaqueLoopValues opaque(*this);
  // The next tile's search reads global memory only: issued before the
  // barrier, its loads overlap the wait.
  Value next = nextVisible(add(tile, i32(1)));
  assert(next && "the first search lowered the same slice");
  // The walk's k-th tile is in stage k mod 2.
  if (!prefetch.empty())
    prefetchIntoOtherStage(prefetch, ordinal, [&] {
      return std::make_pair(next, cmpI(arith::CmpIPredicate::slt, next, upper));
    });
  scalars.map(loop.getInductionVar(), tile);
  // Deterministic mode: the tile waits for the turn of the nearest later
  // key block that sees it (skipped tiles pass no turn).
  if (deterministic) {
    awaitedTurn = turnBeforeTile(visibleSlice, anyVisible);
    if (!awaitedTurn)
      return error(loop, "the query tiles' any_visible fact does not lower");
  }
  if (failed(mapFlattened(loop, loop.getRegionIterArgs(), after->getArguments().drop_front(2))))
    return failure();
  SmallVector<Value> yielded;
  if (failed(lowerQueryTileBody(loop, yielded)))
    return failure();
  yielded.insert(yielded.begin(), {next, add(ordinal, i32(1))});
  scf::YieldOp::create(b, loc, yielded);
  b.setInsertionPointAfter(walk);
  return mapFlattened(loop, loop.getResults(), walk.getResults().drop_front(2));
}

BackwardEmitter::OpaqueLoopValues::OpaqueLoopValues(BackwardEmitter &emitter)
    : emitter(emitter) {
  members = {&emitter.tid,          &emitter.lane,          &emitter.warp,
             &emitter.groupId,      &emitter.threadInGroup, &emitter.batchSize,
             &emitter.headCount,    &emitter.kvHeadCount,   &emitter.queryLen,
             &emitter.keyLen,       &emitter.qPtr,          &emitter.kPtr,
             &emitter.vPtr,         &emitter.oPtr,          &emitter.outputGradPtr,
             &emitter.lsePtr,       &emitter.deltaPtr,      &emitter.queryGradAccumPtr,
             &emitter.queryGradLockPtr, &emitter.queryGradPtr, &emitter.keyGradPtr,
             &emitter.valueGradPtr};
  for (llvm::StringMap<Value> *map :
       {&emitter.params, &emitter.auxPointers, &emitter.auxGradPointers,
        &emitter.auxGradFixedPointers})
    for (auto &entry : *map)
      members.push_back(&entry.second);
  for (Value *member : members) {
    saved.push_back(*member);
    *member = emitter.opaqueValue(*member);
  }
}

BackwardEmitter::OpaqueLoopValues::~OpaqueLoopValues() {
  for (auto [member, value] : llvm::zip(members, saved))
    *member = value;
}

//===----------------------------------------------------------------------===//
// Copies and row statistics
//===----------------------------------------------------------------------===//

LogicalResult BackwardEmitter::lowerTileCopy(Operation *op, Value base,
                                             StrideSet set, Value batchValue,
                                             Value headValue, Value tileValue,
                                             bool keyRows, Value smem) {
  Value batch = lookupScalar(batchValue), head = lookupScalar(headValue),
        tile = lookupScalar(tileValue);
  if (!batch || !head || !tile)
    return error(op, "unknown tile coordinates");
  BackwardValue value;
  value.kind = BackwardValue::Kind::Shared;
  value.keyRows = keyRows;
  if (Value stage = prefetched.lookup(op)) {
    // Issued by the previous iteration (or before the loop) into this
    // iteration's stage; acquired at the tile's start where merged.
    value.smem = stage;
    if (prefetchAcquired) {
      values[op->getResult(0)] = std::move(value);
      return success();
    }
  } else {
    if (!keyRows && sharedReadSinceCopy) {
      syncBodyThreads();
      sharedReadSinceCopy = false;
    }
    // This copy is the newest group: the next wait is for every group.
    groupsInFlight = 0;
    if (keyRows)
      issueTileCopy(allThreads(), base, headOffset(strides[set], batch, head), strides[set][2],
                    tile, config.bc, keyLen, smem);
    else
      issueRowCopy(base, set, batch, head, tile, smem);
    value.smem = smem;
  }
  copiesPending = true;
  values[op->getResult(0)] = std::move(value);
  return success();
}

void BackwardEmitter::issueRowCopy(Value base, StrideSet set, Value batch, Value head,
                                   Value tile, Value smem) {
  issueTileCopy(allThreads(), base, headOffset(strides[set], batch, head), strides[set][2],
                tile, config.br, queryLen, smem);
}

void BackwardEmitter::acquireCopies() {
  // The prefetch of the next tile stays in flight.
  if (copiesPending)
    acquireCopiesLeaving(groupsInFlight);
}

void BackwardEmitter::acquireCopiesLeaving(int64_t inFlight) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, static_cast<int32_t>(inFlight));
  fenceSharedWrites();
  syncBodyThreads();
  copiesPending = false;
}

LogicalResult BackwardEmitter::lowerRowStat(flash::LoadRowStatOp op) {
  if (!lookupScalar(op.getBatch()) || !lookupScalar(op.getHead()) ||
      !lookupScalar(op.getQueryTile()))
    return error(op, "unknown row coordinates");
  // Loaded where each column is used (columnValue): held for the whole
  // query tile, LSE and Δ would take Br/4 registers beside the tiles.
  BackwardValue value;
  value.kind = BackwardValue::Kind::Columns;
  value.rowStat = op;
  values[op.getResult()] = std::move(value);
  return success();
}

Value BackwardEmitter::columnValue(const BackwardValue &columns,
                                   int64_t column) {
  if (!columns.regs.empty())
    return columns.regs[column];
  flash::LoadRowStatOp op = columns.rowStat;
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead()),
        queryTile = lookupScalar(op.getQueryTile());
  bool isLse = op.getStat() == flash::RowStat::Lse;
  Value source = isLse ? lsePtr : deltaPtr;
  // Rows past N: LSE = -inf (the guard zeroes P there), Δ = 0.
  Value outside = f32(isLse ? -std::numeric_limits<double>::infinity() : 0.0);
  int64_t index = column / 2 * 4 + column % 2;
  Value row = queryOf(mul(queryTile, i32(config.br)), index);
  Value valid = cmpI(arith::CmpIPredicate::slt, row, queryLen);
  if (Value buffer = prefetchedStatBuffers.lookup(op)) {
    // Copied with the tile (rows past N zero filled: Δ = 0 as it is).
    Value offset = queryOf(i32(0), index);
    Value loaded = LLVM::LoadOp::create(b, loc, b.getF32Type(),
                                        gepBytes(buffer, mul(offset, i32(4))), 4);
    return isLse ? select(valid, loaded, outside) : loaded;
  }
  Value globalIndex = statIndex(*this, batch, head, select(valid, row, i32(0)));
  Value loaded = LLVM::LoadOp::create(
      b, loc, b.getF32Type(), gepElements(source, globalIndex, b.getF32Type()), 4);
  return select(valid, loaded, outside);
}

FailureOr<const BackwardValue *>
BackwardEmitter::lookup(Operation *user, Value value,
                        BackwardValue::Kind kind) {
  auto it = values.find(value);
  if (it == values.end() || it->second.kind != kind)
    return error(user, "operand is not a tile of the expected kind");
  return &it->second;
}

//===----------------------------------------------------------------------===//
// Element-wise ops on transposed tiles
//===----------------------------------------------------------------------===//

Value BackwardEmitter::queryOf(Value firstQuery, int64_t index) {
  int64_t nt = index / 4, e = index % 4;
  return add(firstQuery,
             add(mul(threadInGroup, i32(2)), i32(8 * nt + (e & 1))));
}

Value BackwardEmitter::keyOf(Value firstKey, int64_t index) {
  int64_t e = index % 4;
  Value row = add(mul(warp, i32(16)), groupId);
  return add(firstKey, e >= 2 ? add(row, i32(8)) : row);
}

LogicalResult BackwardEmitter::lowerElementRegion(Operation *op) {
  bool isMask = isa<flash::MaskOp>(op);
  FailureOr<const BackwardValue *> scores =
      lookup(op, op->getOperand(0), BackwardValue::Kind::Scores);
  if (failed(scores))
    return failure();
  Value batch = lookupScalar(op->getOperand(1)),
        head = lookupScalar(op->getOperand(2)),
        queryTile = lookupScalar(op->getOperand(3)),
        keyTile = lookupScalar(op->getOperand(4));
  if (!batch || !head || !queryTile || !keyTile)
    return error(op, "unknown (b, h, qt, kt) operands");
  BackwardValue result = **scores;
  // A classified mask is the identity on a tile it fully shows.
  scf::IfOp fullTile;
  auto mask = dyn_cast<flash::MaskOp>(op);
  if (mask && mask.isClassified()) {
    Value allVisible = lookupScalar(mask.getAllVisible());
    if (!allVisible)
      return error(op, "unknown all_visible operand");
    SmallVector<Type> types(result.regs.size(), b.getF32Type());
    fullTile =
        scf::IfOp::create(b, loc, types, allVisible, /*withElseRegion=*/true);
    b.setInsertionPointToStart(fullTile.thenBlock());
    scf::YieldOp::create(b, loc, result.regs);
    b.setInsertionPointToStart(fullTile.elseBlock());
  }
  Value firstQuery = mul(queryTile, i32(config.br)),
        firstKey = mul(keyTile, i32(config.bc));
  Value negInf = f32(-std::numeric_limits<double>::infinity());
  // The tiles are transposed: a mask's loads at the query (doc[b, i]) run
  // along the columns, and are predicated loads at [column base + 4c]
  // (EmitterCore::beginColumnLoads), as the forward's at the key.
  Block &region = op->getRegion(0).front();
  bool predicated = isMask && regionLoadsAt(op, region.getArgument(2));
  if (predicated)
    beginColumnLoads(region.getArgument(0), firstQuery);
  auto end = llvm::make_scope_exit([&] { endColumnLoads(); });
  for (auto [index, element] : llvm::enumerate(result.regs)) {
    SmallVector<Value, 1> leading;
    if (!isMask)
      leading.push_back(element);
    // The key first: the order the IR had before (argument order).
    Value key = keyOf(firstKey, index);
    Value query = predicated ? columnIndex(8 * (index / 4) + (index % 2))
                             : queryOf(firstQuery, index);
    FailureOr<Value> yielded = emitRegionElement(op, leading, batch, head, query, key);
    if (failed(yielded))
      return failure();
    element = isMask ? select(*yielded, element, negInf) : *yielded;
  }
  if (fullTile) {
    scf::YieldOp::create(b, loc, result.regs);
    b.setInsertionPointAfter(fullTile);
    result.regs.assign(fullTile.getResults().begin(),
                       fullTile.getResults().end());
  }
  values[op->getResult(0)] = std::move(result);
  return success();
}

LogicalResult BackwardEmitter::lowerMaskKeyBounds(flash::MaskKeyBoundsOp op) {
  FailureOr<const BackwardValue *> scores =
      lookup(op, op.getScores(), BackwardValue::Kind::Scores);
  if (failed(scores))
    return failure();
  Value keyTile = lookupScalar(op.getKeyTile()),
        length = lookupScalar(op.getKeyLen());
  if (!keyTile || !length)
    return error(op, "unknown key tile or key length");
  Value firstKey = mul(keyTile, i32(config.bc));
  // Only the block that runs past the key length pays for the selects.
  Value partial =
      cmpI(arith::CmpIPredicate::sgt, add(firstKey, i32(config.bc)), length);
  const SmallVector<Value> &regs = (*scores)->regs;
  SmallVector<Type> types(regs.size(), b.getF32Type());
  auto branch =
      scf::IfOp::create(b, loc, types, partial, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Value negInf = f32(-std::numeric_limits<double>::infinity());
    SmallVector<Value> masked;
    for (auto [index, element] : llvm::enumerate(regs))
      masked.push_back(select(
          cmpI(arith::CmpIPredicate::slt, keyOf(firstKey, index), length),
          element, negInf));
    scf::YieldOp::create(b, loc, masked);
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, regs);
  }
  BackwardValue result = **scores;
  result.regs.assign(branch.getResults().begin(), branch.getResults().end());
  values[op.getResult()] = std::move(result);
  return success();
}

/// Register of a Columns value that register `index` of a Scores tile reads.
static int64_t columnOf(int64_t index) { return index / 4 * 2 + (index & 1); }

LogicalResult BackwardEmitter::lowerRecomputeProbs(flash::RecomputeProbsOp op) {
  FailureOr<const BackwardValue *> scores =
      lookup(op, op.getScores(), BackwardValue::Kind::Scores);
  FailureOr<const BackwardValue *> lse =
      lookup(op, op.getLse(), BackwardValue::Kind::Columns);
  if (failed(scores) || failed(lse))
    return failure();
  Value negInf = f32(-std::numeric_limits<double>::infinity()), zero = f32(0.0);
  // With score_scale the scores are a dot's through masks only: finite or
  // -inf (flash-fold-backward-scale), so a row with LSE = -inf gets the
  // exponent offset -inf, which makes every P of the row 0.
  FloatAttr scoreScale = op.getScoreScaleAttr();
  Value exponentScale = f32(kLog2E * (scoreScale ? scoreScale.getValueAsDouble() : 1.0));
  SmallVector<Value> offsets, unseen;
  BackwardValue result = **scores;
  for (auto [index, element] : llvm::enumerate(result.regs)) {
    int64_t column = columnOf(index);
    if (column == static_cast<int64_t>(offsets.size())) {
      Value value = columnValue(**lse, column);
      Value rowUnseen =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, value, negInf);
      Value offset = fmul(value, f32(-kLog2E));
      offsets.push_back(scoreScale ? select(rowUnseen, negInf, offset) : offset);
      unseen.push_back(rowUnseen);
    }
    // P = exp(S - LSE) = 2^(S·log2 e - LSE·log2 e). Without score_scale a
    // row with LSE = -inf (it sees no key, or lies past N) is zeroed per
    // element, never NaN: past N nothing masks the scores, and a score mod
    // may make them +inf or NaN there (s - log(N - i)), so folding -inf
    // into the exponent is not enough.
    Value p = exp2Approx(fma(element, exponentScale, offsets[column]));
    element = scoreScale ? p : select(unseen[column], zero, p);
  }
  values[op.getResult()] = std::move(result);
  return success();
}

LogicalResult BackwardEmitter::lowerSoftmaxGrad(flash::SoftmaxGradOp op) {
  FailureOr<const BackwardValue *> probs =
      lookup(op, op.getProbs(), BackwardValue::Kind::Scores);
  FailureOr<const BackwardValue *> probGrad =
      lookup(op, op.getProbGrad(), BackwardValue::Kind::Scores);
  FailureOr<const BackwardValue *> delta =
      lookup(op, op.getDelta(), BackwardValue::Kind::Columns);
  if (failed(probs) || failed(probGrad) || failed(delta))
    return failure();
  Value zero = f32(0.0);
  BackwardValue result = **probs;
  SmallVector<Value> deltas;
  for (auto [index, element] : llvm::enumerate(result.regs)) {
    int64_t column = columnOf(index);
    if (column == static_cast<int64_t>(deltas.size()))
      deltas.push_back(columnValue(**delta, column));
    Value p = element;
    Value dp = (*probGrad)->regs[index];
    Value ds =
        fmul(p, arith::SubFOp::create(b, loc, dp, deltas[column]));
    // Where P = 0 (masked, unseen) dS is 0 whatever dP - Δ is.
    Value masked =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, p, zero);
    element = select(masked, zero, ds);
  }
  values[op.getResult()] = std::move(result);
  return success();
}

bool BackwardEmitter::isUniformAdd(flash::AuxGradAddOp add, Block &body) {
  SmallVector<Value> worklist(add.getIndices().begin(), add.getIndices().end());
  llvm::DenseSet<Value> seen;
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      // (g, s, b, h, i, j): only b and h are the same over a tile.
      if (arg.getOwner() == &body && arg.getArgNumber() != 2 && arg.getArgNumber() != 3)
        return false;
      continue;
    }
    Operation *def = value.getDefiningOp();
    if (def && def->getBlock() == &body)
      worklist.append(def->operand_begin(), def->operand_end());
  }
  return true;
}

SmallVector<flash::AuxGradAddOp> BackwardEmitter::stagedAddsOf(flash::ScoreModGradOp op) const {
  SmallVector<flash::AuxGradAddOp> staged;
  if (!stageAuxGrads)
    return staged;
  Block &body = op.getBody().front();
  op.getBody().walk([&](flash::AuxGradAddOp add) {
    if (!isUniformAdd(add, body) && static_cast<int64_t>(staged.size()) < kMaxStagedAdds)
      staged.push_back(add);
  });
  return staged;
}

Value BackwardEmitter::shuffleXor64(Value value, int64_t laneMask) {
  Type i32Type = b.getI32Type(), i64Type = b.getI64Type();
  Value low = arith::TruncIOp::create(b, loc, i32Type, value);
  Value high = arith::TruncIOp::create(
      b, loc, i32Type, arith::ShRUIOp::create(b, loc, value, i64(32)));
  low = arith::ExtUIOp::create(b, loc, i64Type, shuffleXor(low, laneMask));
  high = arith::ExtUIOp::create(b, loc, i64Type, shuffleXor(high, laneMask));
  return arith::OrIOp::create(b, loc, low, arith::ShLIOp::create(b, loc, high, i64(32)));
}

void BackwardEmitter::reduceStagedBounds() {
  // Over the warp, then over the CTA through the slots after the staging
  // ones: (lowest, highest) per warp and staged add.
  Value stats = gepBytes(stagingBase, i32(kStagingSlots * 8));
  Value firstLane = cmpI(arith::CmpIPredicate::eq, lane, i32(0));
  for (auto [index, entry] : llvm::enumerate(stagedAdds)) {
    StagedAdd &staged = entry.second;
    Value lowest = staged.lowest, highest = staged.highest;
    for (int64_t mask = 16; mask >= 1; mask /= 2) {
      lowest = arith::MinSIOp::create(b, loc, lowest, shuffleXor64(lowest, mask));
      highest = arith::MaxSIOp::create(b, loc, highest, shuffleXor64(highest, mask));
    }
    Value slot = gepBytes(stats, EmitterCore::add(mul(warp, i32(kMaxStagedAdds * 16)),
                                                  i32(index * 16)));
    auto write = scf::IfOp::create(b, loc, firstLane, /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(write.thenBlock()->getTerminator());
      LLVM::StoreOp::create(b, loc, lowest, slot, 8);
      LLVM::StoreOp::create(b, loc, highest, gepBytes(slot, i32(8)), 8);
    }
  }
  syncBodyThreads();
  for (auto [index, entry] : llvm::enumerate(stagedAdds)) {
    StagedAdd &staged = entry.second;
    Value lowest = i64(std::numeric_limits<int64_t>::max());
    Value highest = i64(std::numeric_limits<int64_t>::min());
    for (int64_t w = 0; w < config.numWarps; ++w) {
      Value slot = gepBytes(stats, i32(w * kMaxStagedAdds * 16 + index * 16));
      lowest = arith::MinSIOp::create(
          b, loc, lowest, LLVM::LoadOp::create(b, loc, b.getI64Type(), slot, 8));
      highest = arith::MaxSIOp::create(
          b, loc, highest,
          LLVM::LoadOp::create(b, loc, b.getI64Type(), gepBytes(slot, i32(8)), 8));
    }
    staged.lowest = lowest;
    staged.highest = highest;
    // An empty range (no live element) has highest < lowest: nothing to stage.
    Value span = arith::SubIOp::create(b, loc, highest, lowest);
    staged.fits = arith::AndIOp::create(
        b, loc, cmpI(arith::CmpIPredicate::sge, highest, lowest),
        cmpI(arith::CmpIPredicate::slt, span, i64(staged.capacity)));
  }
}

void BackwardEmitter::flushStagedAdds() {
  // Every staged add has landed in shared memory.
  syncBodyThreads();
  Value threads = i32(threadsOf(BackwardStage::Main));
  for (auto &[op, staged] : stagedAdds) {
    auto add = cast<flash::AuxGradAddOp>(op);
    Value count = select(staged.fits,
                         arith::TruncIOp::create(
                             b, loc, b.getI32Type(),
                             EmitterCore::add(arith::SubIOp::create(b, loc, staged.highest,
                                                                    staged.lowest),
                                              i64(1))),
                         i32(0));
    auto loop = scf::ForOp::create(b, loc, tid, count, threads);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value k = loop.getInductionVar();
    Value slot = gepBytes(stagingBase, mul(EmitterCore::add(k, i32(staged.slot)), i32(8)));
    Value element = EmitterCore::add(staged.lowest, toI64(k));
    if (deterministic) {
      Value fixed = auxGradFixedPointers.lookup(add.getTensor());
      Value sum = LLVM::LoadOp::create(b, loc, b.getI64Type(), slot, 8);
      Value nonzero = cmpI(arith::CmpIPredicate::ne, sum, i64(0));
      addFixedPoint("global",
                    gepElements(fixed, EmitterCore::add(element, i64(1)), b.getI64Type()),
                    fixed, sum, nonzero);
    } else {
      Value sum = LLVM::LoadOp::create(b, loc, b.getF32Type(), slot, 4);
      Value nonzero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, sum, f32(0.0));
      atomicAdd(gepElements(auxGradPointers.lookup(add.getTensor()), element, b.getF32Type()),
                sum, nonzero);
    }
    LLVM::StoreOp::create(b, loc, i64(0), slot, 8);
  }
}

LogicalResult BackwardEmitter::lowerScoreModGrad(flash::ScoreModGradOp op) {
  FailureOr<const BackwardValue *> grads =
      lookup(op, op.getGrads(), BackwardValue::Kind::Scores);
  FailureOr<const BackwardValue *> scores =
      lookup(op, op.getScores(), BackwardValue::Kind::Scores);
  if (failed(grads) || failed(scores))
    return failure();
  Value batch = lookupScalar(op.getBatch()), head = lookupScalar(op.getHead()),
        queryTile = lookupScalar(op.getQueryTile()),
        keyTile = lookupScalar(op.getKeyTile());
  if (!batch || !head || !queryTile || !keyTile)
    return error(op, "unknown (b, h, qt, kt) operands");
  Value firstQuery = mul(queryTile, i32(config.br)),
        firstKey = mul(keyTile, i32(config.bc));
  Value zero = f32(0.0);
  // An aux gradient add whose element does not depend on (i, j) (ALiBi's
  // slopes[h]) hits one address from the whole tile: summed in registers
  // and over the warp first, then one atomic per warp.
  uniformAdds.clear();
  Block &body = op.getBody().front();
  op.getBody().walk([&](flash::AuxGradAddOp add) {
    if (isUniformAdd(add, body))
      uniformAdds[add] = UniformAdd{zero, Value(), Value(), Value()};
  });
  // The others are staged in shared memory per tile (stagedAddsOf): a first
  // pass over the elements finds each one's index range.
  stagedAdds.clear();
  SmallVector<flash::AuxGradAddOp> staged = stagedAddsOf(op);
  auto forEachElement = [&](llvm::function_ref<void(size_t, Value)> use) -> LogicalResult {
    bool boundsPass = auxAddMode == AuxAddMode::Bounds;
    if (!staged.empty()) {
      // Each pass computes its indices (and which elements are live)
      // afresh: LLVM would otherwise keep the first pass's, one per
      // element, live across the barrier.
      batch = opaqueValue(batch);
      head = opaqueValue(head);
      firstQuery = opaqueValue(firstQuery);
      firstKey = opaqueValue(firstKey);
    }
    for (auto [index, element] : llvm::enumerate((*grads)->regs)) {
      Value g = boundsPass ? opaqueValue(element) : element;
      // A masked or unseen element has no derivative and adds no aux gradient.
      elementLive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, g, zero);
      FailureOr<Value> yielded =
          emitRegionElement(op, {g, (*scores)->regs[index]}, batch, head,
                            queryOf(firstQuery, index), keyOf(firstKey, index));
      if (failed(yielded))
        return failure();
      use(index, select(elementLive, *yielded, zero));
    }
    elementLive = Value();
    return success();
  };
  if (!staged.empty()) {
    int64_t capacity = kStagingSlots / static_cast<int64_t>(staged.size());
    for (auto [index, add] : llvm::enumerate(staged))
      stagedAdds[add] = StagedAdd{static_cast<int64_t>(index) * capacity, capacity,
                                  i64(std::numeric_limits<int64_t>::max()),
                                  i64(std::numeric_limits<int64_t>::min()), Value()};
    auxAddMode = AuxAddMode::Bounds;
    if (failed(forEachElement([](size_t, Value) {})))
      return failure();
    reduceStagedBounds();
    auxAddMode = AuxAddMode::Staged;
  }
  BackwardValue result = **grads;
  if (failed(forEachElement([&](size_t index, Value value) { result.regs[index] = value; })))
    return failure();
  auxAddMode = AuxAddMode::Direct;
  Value firstLane = cmpI(arith::CmpIPredicate::eq, lane, i32(0));
  for (auto &[add, sum] : uniformAdds) {
    if (!sum.address)
      continue; // the region never reached it
    Value total = sum.total;
    for (int64_t mask = 16; mask >= 1; mask /= 2)
      total = fadd(total, shuffleXor(total, mask));
    addTensorGrad(sum.address, sum.flag, total,
                  arith::AndIOp::create(b, loc, sum.valid, firstLane));
  }
  uniformAdds.clear();
  if (!stagedAdds.empty())
    flushStagedAdds();
  stagedAdds.clear();
  values[op.getResult()] = std::move(result);
  return success();
}

LogicalResult BackwardEmitter::lowerRegionEffect(Operation *op) {
  auto add = dyn_cast<flash::AuxGradAddOp>(op);
  if (!add || !elementLive)
    return EmitterCore::lowerRegionEffect(op);
  flash::AuxTensorAttr decl = kernel.lookupTensor(add.getTensor());
  Value pointer = auxGradPointers.lookup(add.getTensor());
  if (!decl || !pointer)
    return error(op, "unknown aux tensor '") << add.getTensor() << "'";
  SmallVector<Value> indices;
  for (Value index : add.getIndices())
    indices.push_back(lookupScalar(index));
  Value valid, linear;
  if (failed(auxElementIndex(op, decl, indices, valid, linear)))
    return failure();
  Value value = lookupScalar(add.getValue());
  Value index = select(valid, linear, i64(0));
  Value address, flag, given;
  if (deterministic) {
    // The fixed-point accumulator: the overflow flag, then the elements.
    Value fixed = auxGradFixedPointers.lookup(add.getTensor());
    flag = fixed;
    address = gepElements(fixed, EmitterCore::add(index, i64(1)), b.getI64Type());
    given = isNonNull(fixed);
  } else {
    address = gepElements(pointer, index, b.getF32Type());
    // A null gradient pointer: the caller wants no gradient of this tensor.
    given = isNonNull(pointer);
  }
  // Every column slice computes the same dS: slice 0 alone adds.
  valid = ownsAuxGrads(arith::AndIOp::create(b, loc, valid, given));
  auto staged = stagedAdds.find(add);
  if (staged != stagedAdds.end() && auxAddMode == AuxAddMode::Bounds) {
    StagedAdd &range = staged->second;
    Value live = arith::AndIOp::create(b, loc, valid, elementLive);
    range.lowest = select(live, arith::MinSIOp::create(b, loc, range.lowest, linear),
                          range.lowest);
    range.highest = select(live, arith::MaxSIOp::create(b, loc, range.highest, linear),
                           range.highest);
    return success();
  }
  if (auxAddMode == AuxAddMode::Bounds)
    return success(); // the first pass only finds the staged adds' ranges
  if (staged != stagedAdds.end()) {
    StagedAdd &range = staged->second;
    Value live = arith::AndIOp::create(b, loc, valid, elementLive);
    Value offset = arith::TruncIOp::create(
        b, loc, b.getI32Type(), arith::SubIOp::create(b, loc, index, range.lowest));
    Value slot = gepBytes(stagingBase, mul(EmitterCore::add(offset, i32(range.slot)), i32(8)));
    stageTensorGrad(slot, flag, value, arith::AndIOp::create(b, loc, live, range.fits));
    // A tile whose range does not fit adds directly.
    Value notStaged = arith::XOrIOp::create(
        b, loc, range.fits, arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
    addTensorGrad(address, flag, value, arith::AndIOp::create(b, loc, live, notStaged));
    return success();
  }
  auto uniform = uniformAdds.find(add);
  if (uniform != uniformAdds.end()) {
    UniformAdd &sum = uniform->second;
    sum.total = fadd(sum.total, select(elementLive, value, f32(0.0)));
    sum.address = address;
    sum.flag = flag;
    sum.valid = valid;
    return success();
  }
  addTensorGrad(address, flag, value,
                arith::AndIOp::create(b, loc, valid, elementLive));
  return success();
}

//===----------------------------------------------------------------------===//
// The driver
//===----------------------------------------------------------------------===//

FailureOr<KernelConfig> sm80::rejectBackwardConfig(flash::BackwardKernelOp kernel,
                                                   StringRef pass,
                                                   const Twine &message) {
  kernel.emitOpError() << pass << ": " << message;
  return failure();
}

FailureOr<KernelConfig> sm80::backwardBaseConfig(flash::BackwardKernelOp kernel,
                                                 StringRef pass) {
  auto fail = [&](const Twine &message) {
    return rejectBackwardConfig(kernel, pass, message);
  };
  FailureOr<KernelConfig> checked = checkedTileConfig(kernel, pass, "backward kernel");
  if (failed(checked))
    return failure();
  KernelConfig config = *checked;
  config.rowsPerWarp = 16;
  int64_t d = config.headDim;
  // Column slices address whole 64-column panels (wgmma) and 16-column
  // mma.sync units: each slice must be a multiple of 64 columns.
  int64_t slices = config::backwardColumnSlices(d);
  if (slices > 1 && (d % slices || (d / slices) % 64))
    return fail("head dim " + Twine(d) + " does not split into " + Twine(slices) +
                " column slices of a multiple of 64 columns");
  return config;
}

/// The mma.sync kernel's shape for `kernel`: a warp per 16 keys.
static FailureOr<KernelConfig> mmaSyncConfig(flash::BackwardKernelOp kernel,
                                             StringRef pass) {
  FailureOr<KernelConfig> config = backwardBaseConfig(kernel, pass);
  if (failed(config))
    return failure();
  if (config->br % 16 || config->br < 16 || config->br > 128)
    return rejectBackwardConfig(kernel, pass,
                                "Br = " + Twine(config->br) +
                                    " must be a multiple of 16 in [16, 128]");
  if (config->bc % 16 || config->bc < 16 || config->bc > 256)
    return rejectBackwardConfig(
        kernel, pass,
        "Bc = " + Twine(config->bc) +
            " must be a multiple of 16 in [16, 256] (a warp per 16 keys)");
  config->numWarps = config->bc / 16;
  config->numThreads = 32 * config->numWarps;
  return config;
}

LogicalResult sm80::lowerBackwardKernels(ModuleOp module, StringRef pass,
                                         bool deterministic, bool stageAuxGrads) {
  return lowerBackwardKernels(
      module,
      [&](flash::BackwardKernelOp kernel) {
        return mmaSyncConfig(kernel, pass);
      },
      [&](flash::BackwardKernelOp kernel, const KernelConfig &config,
          gpu::GPUModuleOp gpuModule) {
        return std::make_unique<BackwardEmitter>(kernel, config, gpuModule, pass,
                                                 deterministic || kernel.getOrderedQueryGrads(),
                                                 stageAuxGrads);
      });
}

LogicalResult sm80::lowerBackwardKernels(ModuleOp module,
                                         BackwardConfigFn chooseConfig,
                                         BackwardEmitterFn makeEmitter) {
  SmallVector<flash::BackwardKernelOp> kernels(
      module.getOps<flash::BackwardKernelOp>());
  if (kernels.empty())
    return success();
  gpu::GPUModuleOp gpuModule = getOrCreateKernelModule(module);
  OpBuilder b(module.getContext());
  SmallVector<NamedAttribute> launches;
  bool failedAny = false;
  for (flash::BackwardKernelOp kernel : kernels) {
    FailureOr<KernelConfig> config = chooseConfig(kernel);
    if (failed(config)) {
      failedAny = true;
      continue;
    }
    // The main kernel's layout is the target's: its size is checked here,
    // for every target alike.
    std::unique_ptr<BackwardEmitter> main =
        makeEmitter(kernel, *config, gpuModule);
    int64_t sharedBytes = main->sharedBytesOf(BackwardStage::Main);
    if (sharedBytes > kMaxSharedBytes) {
      kernel.emitOpError() << main->passName() << ": the tiles need "
                           << sharedBytes
                           << " bytes of shared memory, more than a block can "
                              "have";
      failedAny = true;
      continue;
    }
    for (BackwardStage stage : {BackwardStage::Preprocess, BackwardStage::Main,
                                BackwardStage::Convert}) {
      std::unique_ptr<BackwardEmitter> emitter =
          makeEmitter(kernel, *config, gpuModule);
      flash::LaunchAttr launch;
      if (succeeded(emitter->emit(stage)))
        launch = emitter->launchAttr(stage);
      if (!launch) {
        if (emitter->getFunc())
          emitter->getFunc().erase();
        failedAny = true;
        break;
      }
      launches.push_back(
          b.getNamedAttr(BackwardEmitter::functionName(kernel, stage), launch));
    }
    if (failedAny || !kernel.getBlockSummaryAttr())
      continue;
    // The summary of the backward's own tiling, launched before the main
    // kernel (BlockSummary.cpp).
    flash::LaunchAttr summary = lowering::emitBlockSummaryKernel(
        kernel, *config, gpuModule, main->passName(), main->gemmKind());
    if (!summary) {
      failedAny = true;
      continue;
    }
    launches.push_back(
        b.getNamedAttr(backwardKernelName(kernel.getSymName(), "summary"), summary));
  }
  if (failedAny)
    return failure();
  recordLaunches(gpuModule, launches);
  for (flash::BackwardKernelOp kernel : kernels)
    kernel.erase();
  return success();
}
