//===- EmitterCore.cpp - What every kernel emitter shares
//------------------===//
//
// Constants and small arithmetic, shared memory, cp.async tile copies,
// element regions and scalar ops: the parts of a lowering that do not
// depend on which kernel (forward, backward) is being emitted.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/EmitterCore.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

EmitterCore::EmitterCore(Operation *kernelOp, const KernelConfig &config,
                         gpu::GPUModuleOp gpuModule)
    : kernelOp(kernelOp), signature(cast<flash::KernelSignature>(kernelOp)),
      config(config), gpuModule(gpuModule), b(kernelOp->getContext()),
      loc(kernelOp->getLoc()) {}

InFlightDiagnostic EmitterCore::error(Operation *op, const Twine &message) {
  return op->emitOpError() << passName() << ": " << message;
}

void EmitterCore::bindThreadCoordinates() {
  Type i32Type = b.getI32Type();
  tid = NVVM::ThreadIdXOp::create(b, loc, i32Type);
  lane = arith::AndIOp::create(b, loc, tid, i32(31));
  warp = arith::ShRUIOp::create(b, loc, tid, i32(5));
  groupId = arith::ShRUIOp::create(b, loc, lane, i32(2));
  threadInGroup = arith::AndIOp::create(b, loc, lane, i32(3));
}

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

Value EmitterCore::i32(int64_t value) {
  return arith::ConstantIntOp::create(b, loc, value, 32);
}
Value EmitterCore::i64(int64_t value) {
  return arith::ConstantIntOp::create(b, loc, value, 64);
}
Value EmitterCore::f32(double value) {
  return arith::ConstantOp::create(
      b, loc, b.getF32FloatAttr(static_cast<float>(value)));
}
Value EmitterCore::toI64(Value value) {
  if (value.getType().isInteger(64))
    return value;
  return arith::ExtSIOp::create(b, loc, b.getI64Type(), value);
}

Value EmitterCore::headOffset(const Value *strides, Value batch, Value head) {
  return add(mul(toI64(batch), strides[0]), mul(toI64(head), strides[1]));
}
Value EmitterCore::add(Value a, Value c) {
  return arith::AddIOp::create(b, loc, a, c);
}
Value EmitterCore::mul(Value a, Value c) {
  return arith::MulIOp::create(b, loc, a, c);
}
Value EmitterCore::select(Value cond, Value t, Value f) {
  return arith::SelectOp::create(b, loc, cond, t, f);
}
Value EmitterCore::cmpI(arith::CmpIPredicate predicate, Value a, Value c) {
  return arith::CmpIOp::create(b, loc, predicate, a, c);
}
Value EmitterCore::fadd(Value a, Value c) {
  return arith::AddFOp::create(b, loc, a, c);
}
Value EmitterCore::fmul(Value a, Value c) {
  return arith::MulFOp::create(b, loc, a, c);
}
Value EmitterCore::fmax(Value a, Value c) {
  return arith::MaxNumFOp::create(b, loc, a, c);
}
Value EmitterCore::fma(Value a, Value c, Value d) {
  return LLVM::FMAOp::create(b, loc, a, c, d);
}

Value EmitterCore::exp2Approx(Value x) {
  return LLVM::CallIntrinsicOp::create(
             b, loc, b.getF32Type(),
             b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f"), ValueRange{x})
      .getResult(0);
}

Value EmitterCore::log2Approx(Value x) {
  return LLVM::CallIntrinsicOp::create(
             b, loc, b.getF32Type(),
             b.getStringAttr("llvm.nvvm.lg2.approx.ftz.f"), ValueRange{x})
      .getResult(0);
}

Value EmitterCore::shuffleXor(Value value, int64_t laneMask) {
  return NVVM::ShflOp::create(b, loc, value.getType(), i32(-1), value,
                              i32(laneMask), i32(31), NVVM::ShflKind::bfly,
                              UnitAttr());
}

Value EmitterCore::ctaVote(Value predicate, NVVM::BarrierReduction reduction) {
  Value word = arith::ExtUIOp::create(b, loc, b.getI32Type(), predicate);
  Value result =
      NVVM::BarrierOp::create(b, loc, b.getI32Type(), Value(), Value(),
                              NVVM::BarrierReductionAttr::get(b.getContext(), reduction), word)
          .getRes();
  return cmpI(arith::CmpIPredicate::ne, result, i32(0));
}

Value EmitterCore::opaquePointer(Value pointer) {
  Type i64Type = b.getI64Type();
  Value bits = LLVM::PtrToIntOp::create(b, loc, i64Type, pointer);
  Value moved = emitAsmValue(i64Type, "mov.b64 $0, $1;", "=l,l", ValueRange{bits});
  return LLVM::IntToPtrOp::create(b, loc, pointer.getType(), moved);
}

Value EmitterCore::opaqueValue(Value value) {
  Type type = value.getType();
  if (isa<LLVM::LLVMPointerType>(type))
    return opaquePointer(value);
  StringRef text, constraints;
  if (type.isInteger(64))
    text = "mov.b64 $0, $1;", constraints = "=l,l";
  else if (type.isInteger(32))
    text = "mov.b32 $0, $1;", constraints = "=r,r";
  else if (type.isF32())
    text = "mov.b32 $0, $1;", constraints = "=f,f";
  else
    return value;
  return emitAsmValue(type, text, constraints, ValueRange{value});
}

Value EmitterCore::emitAsmValue(Type result, StringRef text, StringRef constraints,
                                ValueRange operands) {
  return LLVM::InlineAsmOp::create(b, loc, result ? TypeRange{result} : TypeRange{}, operands,
                                   text, constraints,
                                   /*has_side_effects=*/true, /*is_align_stack=*/false,
                                   LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
                                   ArrayAttr())
      .getRes();
}

void EmitterCore::emitAsm(StringRef text, StringRef constraints, ValueRange operands) {
  emitAsmValue(Type(), text, constraints, operands);
}

void EmitterCore::syncNamedBarrier(int64_t id, int64_t threads) {
  LLVM::CallIntrinsicOp::create(b, loc,
                                b.getStringAttr("llvm.nvvm.barrier.cta.sync.aligned.count"),
                                ValueRange{i32(id), i32(threads)});
}

void EmitterCore::arriveAtNamedBarrier(int64_t id, int64_t threads) {
  LLVM::CallIntrinsicOp::create(b, loc,
                                b.getStringAttr("llvm.nvvm.barrier.cta.arrive.aligned.count"),
                                ValueRange{i32(id), i32(threads)});
}

void EmitterCore::onThread(int64_t thread, llvm::function_ref<void()> body) {
  OpBuilder::InsertionGuard guard(b);
  auto first = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::eq, tid, i32(thread)),
                                 /*withElseRegion=*/false);
  b.setInsertionPoint(first.thenBlock()->getTerminator());
  body();
}

Value EmitterCore::gepBytes(Value base, Value offset) {
  return LLVM::GEPOp::create(b, loc, base.getType(), b.getI8Type(), base,
                             ArrayRef<LLVM::GEPArg>{offset});
}

Value EmitterCore::gepElements(Value base, Value offset, Type elementType) {
  return LLVM::GEPOp::create(b, loc, base.getType(), elementType, base,
                             ArrayRef<LLVM::GEPArg>{offset});
}

Value EmitterCore::extract(Value aggregate, int64_t position) {
  return LLVM::ExtractValueOp::create(b, loc, aggregate, position);
}

Value EmitterCore::packHalves(Value lo, Value hi) {
  Type half = config.elementType;
  auto vectorType = VectorType::get({2}, half);
  Value vec = LLVM::UndefOp::create(b, loc, vectorType);
  Value loH = LLVM::FPTruncOp::create(b, loc, half, lo);
  Value hiH = LLVM::FPTruncOp::create(b, loc, half, hi);
  vec = LLVM::InsertElementOp::create(b, loc, vec, loH, i32(0));
  vec = LLVM::InsertElementOp::create(b, loc, vec, hiH, i32(1));
  return LLVM::BitcastOp::create(b, loc, b.getI32Type(), vec);
}

static constexpr llvm::StringLiteral kSharedMemoryName = "__flashc_smem";

Value EmitterCore::sharedMemoryBase(int64_t alignment) {
  auto sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), 3);
  if (auto existing =
          gpuModule.lookupSymbol<LLVM::GlobalOp>(kSharedMemoryName)) {
    // Kernels of one module share the declaration: it takes the largest
    // alignment any of them asks for.
    if (existing.getAlignment().value_or(0) < static_cast<uint64_t>(alignment))
      existing.setAlignment(alignment);
  } else {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(gpuModule.getBody());
    LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           kSharedMemoryName, Attribute(), alignment,
                           /*addrSpace=*/3);
  }
  return LLVM::AddressOfOp::create(b, loc, sharedPtr, kSharedMemoryName);
}

void EmitterCore::issueRowwiseTileCopy(
    const CopyThreads &threads, Value base, int64_t rows, Value dst,
    function_ref<std::pair<Value, Value>(Value row)> rowSource) {
  int64_t chunksPerRow = config.headDim / 8; // 16-byte chunks
  int64_t total = rows * chunksPerRow;
  int64_t perThread = (total + threads.count - 1) / threads.count;
  for (int64_t it = 0; it < perThread; ++it) {
    OpBuilder::InsertionGuard guard(b);
    Value index = add(threads.index, i32(it * threads.count));
    if ((it + 1) * threads.count > total) {
      auto inside = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, index, i32(total)),
                                      /*withElseRegion=*/false);
      b.setInsertionPoint(inside.thenBlock()->getTerminator());
    }
    Value row = arith::DivUIOp::create(b, loc, index, i32(chunksPerRow));
    Value chunk = arith::RemUIOp::create(b, loc, index, i32(chunksPerRow));
    Value chunkOffset = toI64(mul(chunk, i32(8)));
    auto [rowOffset, valid] = rowSource(row);
    Value src = gepElements(base, add(rowOffset, chunkOffset), b.getI16Type());
    Value dstAddress = gepBytes(dst, sharedChunkOffset(row, chunk, rows));
    NVVM::CpAsyncOp::create(b, loc, dstAddress, src, 16, NVVM::LoadCacheModifierKind::CG,
                            select(valid, i32(16), i32(0)));
  }
  NVVM::CpAsyncCommitGroupOp::create(b, loc);
}

void EmitterCore::issueTileCopy(const CopyThreads &threads, Value base, Value headOffset,
                                Value rowStride,
                                Value tileIndex, int64_t rows, Value length,
                                Value dst) {
  int64_t chunksPerRow = config.headDim / 8; // 16-byte chunks
  int64_t total = rows * chunksPerRow;
  int64_t perThread = (total + threads.count - 1) / threads.count;
  Type halfStorage = b.getI16Type();
  if (threads.count % chunksPerRow) {
    // D = 96: a thread's chunks are not in one column; index each copy.
    Value firstRow = mul(tileIndex, i32(rows));
    issueRowwiseTileCopy(threads, base, rows, dst, [&](Value row) -> std::pair<Value, Value> {
      Value position = add(firstRow, row);
      Value valid = cmpI(arith::CmpIPredicate::slt, position, length);
      // Out-of-range rows copy 0 bytes (zero fill) from a row that exists.
      Value clamped = select(valid, position, i32(0));
      return {add(headOffset, mul(toI64(clamped), rowStride)), valid};
    });
    return;
  }
  // Copy `it` of thread t moves chunk t % C of row t / C + it·S (C chunks
  // per row, S = threads / C rows per step). The source pointer
  // advances by S rows per copy and the destination is one opaque base plus
  // immediates, so a copy costs a compare, two selects and a 64-bit add, and
  // no 64-bit address per copy stays live across the key loop.
  int64_t rowsPerStep = threads.count / chunksPerRow;
  Value row = arith::DivUIOp::create(b, loc, threads.index, i32(chunksPerRow));
  Value chunk = arith::RemUIOp::create(b, loc, threads.index, i32(chunksPerRow));
  Value firstRow = add(mul(tileIndex, i32(rows)), row);
  // Rows left from this thread's first row: copy `it` is valid iff it·S < left.
  Value left = arith::SubIOp::create(b, loc, length, firstRow);
  Value chunkOffset = add(headOffset, toI64(mul(chunk, i32(8))));
  // Out-of-range rows copy 0 bytes (zero fill) from row 0, which exists.
  Value safe = gepElements(base, chunkOffset, halfStorage);
  Value src = gepElements(
      base, add(chunkOffset, mul(toI64(firstRow), rowStride)), halfStorage);
  Value step = mul(rowStride, i64(rowsPerStep));
  std::optional<int64_t> stepBytes = sharedRowStepBytes(rowsPerStep);
  Value dstBase =
      opaquePointer(gepBytes(dst, sharedChunkOffset(row, chunk, rows)));
  for (int64_t it = 0; it < perThread; ++it) {
    if (it > 0)
      src = gepElements(src, step, halfStorage);
    OpBuilder::InsertionGuard guard(b);
    if ((it + 1) * threads.count > total) {
      Value inside = cmpI(arith::CmpIPredicate::ult,
                          add(row, i32(it * rowsPerStep)), i32(rows));
      auto branch = scf::IfOp::create(b, loc, inside, /*withElseRegion=*/false);
      b.setInsertionPoint(branch.thenBlock()->getTerminator());
    }
    Value valid = cmpI(arith::CmpIPredicate::sgt, left, i32(it * rowsPerStep));
    Value dstAddress =
        stepBytes
            ? gepBytes(dstBase, i32(it * *stepBytes))
            : gepBytes(dst, sharedChunkOffset(add(row, i32(it * rowsPerStep)),
                                              chunk, rows));
    Value size = select(valid, i32(16), i32(0));
    NVVM::CpAsyncOp::create(b, loc, dstAddress, select(valid, src, safe), 16,
                            NVVM::LoadCacheModifierKind::CG, size);
  }
  NVVM::CpAsyncCommitGroupOp::create(b, loc);
}

FailureOr<Value> EmitterCore::emitRegionElement(Operation *op,
                                                ValueRange leading, Value batch,
                                                Value head, Value query,
                                                Value key) {
  Block &body = op->getRegion(0).front();
  unsigned argBase = leading.size();
  if (body.getNumArguments() != argBase + 4)
    return error(op,
                 "region arguments do not match the element it is emitted for");
  for (auto [argument, value] : llvm::zip(body.getArguments(), leading))
    scalars.map(argument, value);
  scalars.map(body.getArgument(argBase + 0), batch);
  scalars.map(body.getArgument(argBase + 1), head);
  scalars.map(body.getArgument(argBase + 2), query);
  scalars.map(body.getArgument(argBase + 3), key);
  Location outer = loc;
  for (Operation &inner : body.without_terminator()) {
    loc = inner.getLoc();
    if (failed(inner.getNumResults() == 0 ? lowerRegionEffect(&inner)
                                          : lowerScalarOp(&inner)))
      return failure();
  }
  loc = outer;
  auto yield = cast<flash::YieldOp>(body.getTerminator());
  Value yielded = lookupScalar(yield.getValue());
  if (!yielded)
    return error(yield, "unknown yielded value");
  return yielded;
}

LogicalResult EmitterCore::lowerRegionEffect(Operation *op) {
  return error(op, "unsupported operation in a region");
}

//===----------------------------------------------------------------------===//
// Scalars
//===----------------------------------------------------------------------===//

static Type lowerScalarType(Type type) {
  if (type.isIndex())
    return IntegerType::get(type.getContext(), 32);
  return type;
}

Value EmitterCore::ceilDiv(Value size, int64_t block) {
  return arith::DivUIOp::create(b, loc, add(size, i32(block - 1)), i32(block));
}

Value EmitterCore::blockSummaryRows(flash::BlockSummaryAttr summary) {
  return mul(summary.getPerBatch() ? batchSize : i32(1), summary.getPerHead() ? headCount : i32(1));
}

Value EmitterCore::blockSummaryOrder(flash::BlockSummaryAttr summary) {
  Value tiles = mul(toI64(blockSummaryRows(summary)), toI64(ceilDiv(queryLen, config.br)));
  Value bytes = mul(tiles, toI64(ceilDiv(keyLen, config.bc)));
  Value aligned = arith::AndIOp::create(b, loc, add(bytes, i64(3)), i64(~int64_t{3}));
  return gepBytes(blockSummaryPtr, aligned);
}

Value EmitterCore::blockSummaryOffset(flash::BlockSummaryAttr summary, Value batch, Value head,
                                      Value queryTile, Value keyTile) {
  Value heads = summary.getPerHead() ? headCount : i32(1);
  Value row = add(mul(summary.getPerBatch() ? toI64(batch) : i64(0), toI64(heads)),
                  summary.getPerHead() ? toI64(head) : i64(0));
  Value tile = add(mul(row, toI64(ceilDiv(queryLen, config.br))), toI64(queryTile));
  return add(mul(tile, toI64(ceilDiv(keyLen, config.bc))), toI64(keyTile));
}

LogicalResult EmitterCore::lowerScalarOp(Operation *op) {
  for (Value operand : op->getOperands())
    if (!lookupScalar(operand))
      return error(op, "operand is not a scalar this lowering knows");
  for (Type type : op->getResultTypes())
    if (isa<ShapedType>(type))
      return error(op, "unsupported tile operation");
  if (op->getNumRegions() != 0 || op->getNumResults() != 1)
    return error(op, "unsupported operation");
  Value result = op->getResult(0);

  if (auto param = dyn_cast<flash::ParamOp>(op)) {
    Value value = params.lookup(param.getName());
    if (!value || value.getType() != param.getType())
      return error(op, "unknown parameter");
    scalars.map(result, value);
    return success();
  }
  if (auto dim = dyn_cast<flash::DimOp>(op)) {
    Value value = sizeOf(dim.getRole());
    Type type = lowerScalarType(result.getType());
    if (!type.isInteger(32))
      value = arith::ExtSIOp::create(b, loc, type, value);
    scalars.map(result, value);
    return success();
  }
  if (auto kvHead = dyn_cast<flash::KVHeadOp>(op)) {
    Value group = arith::DivUIOp::create(b, loc, headCount, kvHeadCount);
    scalars.map(result, arith::DivUIOp::create(
                            b, loc, lookupScalar(kvHead.getHead()), group));
    return success();
  }
  if (auto blockClass = dyn_cast<flash::BlockClassOp>(op)) {
    auto kernel = dyn_cast<flash::KernelSignature>(kernelOp);
    if (!blockSummaryPtr || !kernel || !kernel.getBlockSummaryAttr())
      return error(op, "the kernel takes no block summary");
    Value offset = blockSummaryOffset(
        kernel.getBlockSummaryAttr(), lookupScalar(blockClass.getBatch()),
        lookupScalar(blockClass.getHead()), lookupScalar(blockClass.getQueryTile()),
        lookupScalar(blockClass.getKeyTile()));
    Value byte = LLVM::LoadOp::create(b, loc, b.getI8Type(), gepBytes(blockSummaryPtr, offset));
    scalars.map(result, arith::ExtUIOp::create(b, loc, b.getI32Type(), byte));
    return success();
  }
  if (auto load = dyn_cast<flash::AuxLoadOp>(op)) {
    FailureOr<Value> value = lowerAuxLoad(load);
    if (failed(value))
      return failure();
    scalars.map(result, *value);
    return success();
  }
  if (isa<math::MathDialect>(op->getDialect())) {
    FailureOr<Value> value = lowerMathOp(op);
    if (failed(value))
      return failure();
    scalars.map(result, *value);
    return success();
  }
  if (!isa<arith::ArithDialect>(op->getDialect()))
    return error(op, "unsupported operation");

  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    if (constant.getType().isIndex()) {
      auto value = cast<IntegerAttr>(constant.getValue()).getInt();
      scalars.map(result, i32(value));
      return success();
    }
  }
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp>(op)) {
    Value input = lookupScalar(op->getOperand(0));
    Type to = lowerScalarType(result.getType());
    unsigned from = input.getType().getIntOrFloatBitWidth(),
             width = to.getIntOrFloatBitWidth();
    Value value = input;
    if (width > from)
      value = isa<arith::IndexCastOp>(op)
                  ? Value(arith::ExtSIOp::create(b, loc, to, input))
                  : Value(arith::ExtUIOp::create(b, loc, to, input));
    else if (width < from)
      value = arith::TruncIOp::create(b, loc, to, input);
    scalars.map(result, value);
    return success();
  }
  // Any other arith op: clone it on the lowered operands, index -> i32.
  Operation *clone = b.clone(*op, scalars);
  clone->setLoc(loc);
  for (OpResult cloned : clone->getResults())
    cloned.setType(lowerScalarType(cloned.getType()));
  return success();
}

flash::LaunchAttr CompanionEmitter::launchFacts(LogicalResult emitted, flash::GemmKind gemm,
                                                flash::GridKind grid, int64_t threads,
                                                int64_t dynamicSharedBytes) {
  if (failed(emitted)) {
    if (func)
      func.erase();
    return {};
  }
  SmallVector<Attribute> paramNames, paramTypes, tensorNames;
  signatureNames(paramNames, paramTypes, tensorNames);
  auto emitError = [&] {
    return kernel.emitOpError() << pass << ": internal error: invalid launch facts: ";
  };
  return flash::LaunchAttr::getChecked(
      emitError, kernel.getContext(), gemm, grid, threads, dynamicSharedBytes, config.br,
      config.bc, config.headDim, threads / 32, config.rowsPerWarp, config.elementType,
      /*tensor_maps=*/int64_t{0}, b.getArrayAttr(paramNames), b.getArrayAttr(paramTypes),
      b.getArrayAttr(tensorNames), /*column_slices=*/int64_t{1});
}

Value EmitterCore::visibleIndexBits(Value index, ArrayRef<Operation *> slice,
                                      function_ref<Value()> visible, Value base, Value end,
                                      bool wholeWarp) {
  Type i32Type = b.getI32Type();
  Value candidate = wholeWarp ? add(base, lane) : base;
  // Indices at or past `end` are never visible, and their facts could read
  // past the summary: the last index stands in.
  Value tested =
      arith::MinSIOp::create(b, loc, candidate, arith::SubIOp::create(b, loc, end, i32(1)));
  scalars.map(index, tested);
  Value blockVisible = succeeded(lowerSlice(slice)) ? visible() : Value();
  if (!blockVisible)
    return {};
  blockVisible = arith::AndIOp::create(b, loc, blockVisible,
                                       cmpI(arith::CmpIPredicate::slt, candidate, end));
  if (!wholeWarp)
    return arith::ExtUIOp::create(b, loc, i32Type, blockVisible);
  return NVVM::VoteSyncOp::create(b, loc, i32Type, i32(-1), blockVisible,
                                  NVVM::VoteSyncKind::ballot);
}

Value EmitterCore::nextIndexWhere(Value index, ArrayRef<Operation *> slice,
                                  function_ref<Value()> visible, Value from, Value end,
                                  bool wholeWarp) {
  Type i32Type = b.getI32Type();
  // Carries the first index of the indices tested next; yields it and the
  // answer once the search stops.
  auto search = scf::WhileOp::create(b, loc, TypeRange{i32Type, i32Type}, ValueRange{from});
  OpBuilder::InsertionGuard guard(b);
  Block *before = b.createBlock(&search.getBefore(), {}, {i32Type}, {loc});
  Value base = before->getArgument(0);
  Value bits = visibleIndexBits(index, slice, visible, base, end, wholeWarp);
  if (!bits) {
    search.erase();
    return {};
  }
  // The lowest index that is visible wins.
  Value found = cmpI(arith::CmpIPredicate::ne, bits, i32(0));
  Value lowest = LLVM::CountTrailingZerosOp::create(b, loc, i32Type, bits, false);
  Value next = select(found, add(base, lowest), end);
  Value advanced = add(base, i32(wholeWarp ? 32 : 1));
  Value more = arith::AndIOp::create(
      b, loc, arith::XOrIOp::create(b, loc, found, arith::ConstantIntOp::create(b, loc, 1, 1)),
      cmpI(arith::CmpIPredicate::slt, advanced, end));
  scf::ConditionOp::create(b, loc, more, ValueRange{advanced, next});
  Block *after = b.createBlock(&search.getAfter(), {}, {i32Type, i32Type}, {loc, loc});
  scf::YieldOp::create(b, loc, ValueRange{after->getArgument(0)});
  return search.getResult(1);
}

FailureOr<SmallVector<Operation *>> EmitterCore::factSlice(ArrayRef<Value> facts,
                                                            scf::ForOp loop) {
  Block *body = loop.getBody();
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist(facts);
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (value == loop.getInductionVar())
      continue;
    if (loop.isDefinedOutsideOfLoop(value)) {
      if (!lookupScalar(value))
        return failure();
      continue;
    }
    Operation *def = value.getDefiningOp();
    if (!def || def->getBlock() != body || def->getNumRegions() != 0 ||
        def->getNumResults() != 1 || isa<ShapedType>(def->getResult(0).getType()) ||
        !isa<arith::ArithDialect, math::MathDialect, flash::FlashDialect>(def->getDialect()) ||
        !isPure(def))
      return failure();
    if (slice.insert(def))
      worklist.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  return ordered;
}

LogicalResult EmitterCore::lowerSlice(ArrayRef<Operation *> slice) {
  Location outer = loc;
  for (Operation *op : slice) {
    loc = op->getLoc();
    if (failed(lowerScalarOp(op)))
      return failure();
  }
  loc = outer;
  return success();
}

void EmitterCore::signatureNames(SmallVectorImpl<Attribute> &paramNames,
                                 SmallVectorImpl<Attribute> &paramTypes,
                                 SmallVectorImpl<Attribute> &tensorNames) {
  for (Attribute attr : signature.getParams()) {
    auto param = cast<flash::ParamAttr>(attr);
    paramNames.push_back(param.getName());
    paramTypes.push_back(TypeAttr::get(param.getType()));
  }
  for (Attribute attr : signature.getTensors())
    tensorNames.push_back(cast<flash::AuxTensorAttr>(attr).getName());
}

Value EmitterCore::sizeOf(flash::DimRole role) {
  switch (role) {
  case flash::DimRole::Batch:
    return batchSize;
  case flash::DimRole::Heads:
    return headCount;
  case flash::DimRole::KVHeads:
    return kvHeadCount;
  case flash::DimRole::QueryLen:
    return queryLen;
  case flash::DimRole::KeyLen:
    return keyLen;
  case flash::DimRole::HeadDim:
    return i32(config.headDim);
  }
  llvm_unreachable("unknown DimRole");
}

LogicalResult EmitterCore::appendForwardArguments(SmallVectorImpl<Type> &argTypes) {
  auto kernel = cast<flash::KernelOp>(kernelOp);
  Type i32Type = b.getI32Type(), i64Type = b.getI64Type();
  auto globalPtr = LLVM::LLVMPointerType::get(kernel.getContext(), 1);
  // q, k, v, o, lse; 12 i64 strides; B, H, HKV, N, M; params; aux; the
  // block summary.
  argTypes.append(5, globalPtr);
  argTypes.append(12, i64Type);
  argTypes.append(5, i32Type);
  for (Attribute attr : kernel.getParams()) {
    auto param = cast<flash::ParamAttr>(attr);
    if (!param.getType().isInteger(32) && !param.getType().isF32())
      return error(kernel, "parameter '") << param.getName().getValue()
                                          << "' must be i32 or f32";
    argTypes.push_back(param.getType());
  }
  argTypes.append(kernel.getTensors().size(), globalPtr);
  if (kernel.getBlockSummaryAttr())
    argTypes.push_back(globalPtr);
  if (kernel.getPagedKvAttr())
    argTypes.append({globalPtr, globalPtr, i32Type, i32Type});
  if (flash::VarlenAttr varlen = kernel.getVarlenAttr())
    for (StringAttr offsets : {varlen.getQueries(), varlen.getKeys()})
      if (!offsets.getValue().empty())
        argTypes.append({globalPtr, i32Type});
  return success();
}

void EmitterCore::appendBackwardArguments(SmallVectorImpl<Type> &argTypes) {
  auto kernel = cast<flash::BackwardKernelOp>(kernelOp);
  auto globalPtr = LLVM::LLVMPointerType::get(kernel.getContext(), 1);
  argTypes.append(kBackwardPointers, globalPtr);
  argTypes.append(kBackwardStrides, b.getI64Type());
  argTypes.append(5, b.getI32Type());
  for (Attribute attr : kernel.getParams())
    argTypes.push_back(cast<flash::ParamAttr>(attr).getType());
  argTypes.append(3 * kernel.getTensors().size(), globalPtr);
  if (kernel.getBlockSummaryAttr())
    argTypes.push_back(globalPtr);
}

void EmitterCore::appendSplitArguments(SmallVectorImpl<Type> &argTypes) {
  auto globalPtr = LLVM::LLVMPointerType::get(b.getContext(), 1);
  argTypes.append({globalPtr, globalPtr, b.getI32Type()});
}

unsigned EmitterCore::bindSizesAndInputs(ValueRange arguments, unsigned first) {
  unsigned arg = first;
  batchSize = arguments[arg++];
  headCount = arguments[arg++];
  kvHeadCount = arguments[arg++];
  queryLen = arguments[arg++];
  keyLen = arguments[arg++];
  for (Attribute attr : signature.getParams())
    params[cast<flash::ParamAttr>(attr).getName().getValue()] = arguments[arg++];
  for (Attribute attr : signature.getTensors())
    auxPointers[cast<flash::AuxTensorAttr>(attr).getName().getValue()] = arguments[arg++];
  auto kernel = dyn_cast<flash::KernelOp>(kernelOp);
  if (kernel && kernel.getBlockSummaryAttr())
    blockSummaryPtr = arguments[arg++];
  if (kernel && kernel.getPagedKvAttr()) {
    pagedTable = arguments[arg++];
    pagedLengths = arguments[arg++];
    pagedTableStride = arguments[arg++];
    pagedPages = arguments[arg++];
  }
  if (flash::VarlenAttr varlen = kernel ? kernel.getVarlenAttr() : flash::VarlenAttr()) {
    if (!varlen.getQueries().getValue().empty()) {
      queryOffsets = arguments[arg++];
      queryRows = arguments[arg++];
    }
    if (!varlen.getKeys().getValue().empty()) {
      keyOffsets = arguments[arg++];
      keyRows = arguments[arg++];
    }
  }
  return arg;
}

void EmitterCore::bindSequenceLengths(Value batch) {
  Type i32Type = b.getI32Type();
  auto loadEntry = [&](Value array, Value index) -> Value {
    return LLVM::LoadOp::create(b, loc, i32Type, gepElements(array, toI64(index), i32Type), 4,
                                /*isVolatile=*/false, /*isNonTemporal=*/false,
                                /*isInvariant=*/true);
  };
  // The launch's lengths are kept from the first call: a persistent kernel
  // binds each tile's sequence.
  if (pagedLengths) {
    Value length = arith::MaxSIOp::create(b, loc, loadEntry(pagedLengths, batch), i32(0));
    if (!launchKeyLen)
      launchKeyLen = keyLen;
    keyLen = arith::MinSIOp::create(b, loc, length, launchKeyLen);
  }
  // A packed side: rows offsets[b] .. offsets[b + 1] - 1, both clamped into
  // [0, rows] so that no offsets reach outside the tensors, and at most the
  // launch's length.
  auto bindPacked = [&](Value offsets, Value rows, Value &length, Value &launchLength,
                        Value &rowStart) {
    auto clampTo = [&](Value value, Value low) {
      return arith::MinSIOp::create(b, loc, arith::MaxSIOp::create(b, loc, value, low), rows)
          .getResult();
    };
    Value first = clampTo(loadEntry(offsets, batch), i32(0));
    Value next = clampTo(loadEntry(offsets, add(batch, i32(1))), first);
    if (!launchLength)
      launchLength = length;
    length = arith::MinSIOp::create(b, loc, arith::SubIOp::create(b, loc, next, first),
                                    launchLength);
    rowStart = toI64(first);
  };
  if (queryOffsets)
    bindPacked(queryOffsets, queryRows, queryLen, launchQueryLen, queryRowStart);
  if (keyOffsets)
    bindPacked(keyOffsets, keyRows, keyLen, launchKeyLen, keyRowStart);
}

void EmitterCore::issuePagedTileCopy(const CopyThreads &threads, Value base,
                                     const Value *strides, Value batch, Value kvHead,
                                     Value keyTile, Value dst) {
  auto kernel = cast<flash::KernelOp>(kernelOp);
  int64_t page = kernel.getPagedKvAttr().getPage();
  Type i32Type = b.getI32Type();
  Value tableRow = gepElements(pagedTable, mul(toI64(batch), toI64(pagedTableStride)), i32Type);
  Value headOffset = mul(toI64(kvHead), strides[1]);
  Value firstKey = mul(keyTile, i32(config.bc));
  // The page of table entry `entry` of the sequence, as an element offset
  // (0 for an entry outside the cache, so even an unread source stays
  // inside k or v), and whether it is inside.
  auto pageAt = [&](Value entry) -> std::pair<Value, Value> {
    Value index = LLVM::LoadOp::create(b, loc, i32Type, gepElements(tableRow, toI64(entry), i32Type),
                                       4, /*isVolatile=*/false, /*isNonTemporal=*/false,
                                       /*isInvariant=*/true);
    Value inCache = cmpI(arith::CmpIPredicate::ult, index, pagedPages);
    return {mul(toI64(select(inCache, index, i32(0))), strides[0]), inCache};
  };
  if (page % config.bc == 0) {
    // The block lies in one page: one table entry, then the dense copy of
    // its rows, which stops at the sequence's end (`length`).
    // A block past the sequence (a prologue copy of an empty key range)
    // reads entry 0 and copies nothing.
    Value inSequence = cmpI(arith::CmpIPredicate::slt, firstKey, keyLen);
    auto [pageOffset, inCache] =
        pageAt(select(inSequence, arith::DivUIOp::create(b, loc, firstKey, i32(page)), i32(0)));
    Value rowInPage = arith::RemUIOp::create(b, loc, firstKey, i32(page));
    Value offset = add(add(pageOffset, headOffset), mul(toI64(rowInPage), strides[2]));
    Value length = select(inCache, arith::SubIOp::create(b, loc, keyLen, firstKey), i32(0));
    issueTileCopy(threads, base, offset, strides[2], i32(0), config.bc, length, dst);
    return;
  }
  int64_t chunksPerRow = config.headDim / 8;
  Type halfStorage = b.getI16Type();
  int64_t threadsPerPage =
      config.bc % page == 0 && threads.count * page % config.bc == 0
          ? threads.count * page / config.bc
          : 0;
  if (threadsPerPage && threadsPerPage % chunksPerRow == 0 &&
      config.bc * chunksPerRow % threads.count == 0) {
    // Whole pages per block, and enough threads per page that each keeps
    // one chunk column of one page: thread t copies page entry t / T of
    // the block (T threads per page), so it loads one table entry per
    // block and each copy moves its source a fixed number of rows on.
    int64_t pageRowsPerStep = threadsPerPage / chunksPerRow;
    int64_t perThread = page / pageRowsPerStep;
    Value slot = arith::DivUIOp::create(b, loc, threads.index, i32(threadsPerPage));
    Value local = arith::RemUIOp::create(b, loc, threads.index, i32(threadsPerPage));
    Value chunk = arith::RemUIOp::create(b, loc, local, i32(chunksPerRow));
    Value pageRow = arith::DivUIOp::create(b, loc, local, i32(chunksPerRow));
    Value firstBlockRow = add(mul(slot, i32(page)), pageRow);
    // An entry past the sequence is never copied from: read entry 0.
    Value used = cmpI(arith::CmpIPredicate::slt, add(firstKey, mul(slot, i32(page))), keyLen);
    Value entry = add(arith::DivUIOp::create(b, loc, firstKey, i32(page)), slot);
    auto [pageOffset, inCache] = pageAt(select(used, entry, i32(0)));
    Value chunkOffset = add(headOffset, toI64(mul(chunk, i32(8))));
    Value safe = gepElements(base, chunkOffset, halfStorage);
    Value src = gepElements(
        base, add(add(pageOffset, chunkOffset), mul(toI64(pageRow), strides[2])), halfStorage);
    Value step = mul(strides[2], i64(pageRowsPerStep));
    // Rows left from this thread's first: copy `it` is valid iff it·S < left.
    Value left = arith::SubIOp::create(b, loc, keyLen, add(firstKey, firstBlockRow));
    for (int64_t it = 0; it < perThread; ++it) {
      if (it > 0)
        src = gepElements(src, step, halfStorage);
      Value valid = arith::AndIOp::create(
          b, loc, cmpI(arith::CmpIPredicate::sgt, left, i32(it * pageRowsPerStep)), inCache);
      Value row = add(firstBlockRow, i32(it * pageRowsPerStep));
      NVVM::CpAsyncOp::create(b, loc, gepBytes(dst, sharedChunkOffset(row, chunk, config.bc)),
                              select(valid, src, safe), 16, NVVM::LoadCacheModifierKind::CG,
                              select(valid, i32(16), i32(0)));
    }
    NVVM::CpAsyncCommitGroupOp::create(b, loc);
    return;
  }
  issueRowwiseTileCopy(threads, base, config.bc, dst, [&](Value row) -> std::pair<Value, Value> {
    Value key = add(firstKey, row);
    Value inSequence = cmpI(arith::CmpIPredicate::slt, key, keyLen);
    // Past the sequence: entry 0, which every sequence with a key block has.
    Value entry = select(inSequence, arith::DivUIOp::create(b, loc, key, i32(page)), i32(0));
    auto [pageOffset, inCache] = pageAt(entry);
    Value valid = arith::AndIOp::create(b, loc, inSequence, inCache);
    Value rowInPage = select(valid, arith::RemUIOp::create(b, loc, key, i32(page)), i32(0));
    return {add(add(pageOffset, headOffset), mul(toI64(rowInPage), strides[2])), valid};
  });
}
