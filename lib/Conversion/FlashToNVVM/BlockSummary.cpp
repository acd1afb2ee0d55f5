//===- BlockSummary.cpp - The kernel that classifies a mask's tiles -------===//
//
// A flash.kernel with a #flash.block_summary gets a second GPU kernel,
// `<name>_summary`, launched before it over (ceil(M / Bc), ceil(N / Br),
// summary batches x heads): each CTA evaluates the mask on every element
// of its (query tile, key block) inside the problem, each thread walking
// its columns down the rows, and one bar.red.or and one bar.red.and give
// the byte the main kernel's flash.block_class reads. Tiles the interval
// analysis already decides (flash-classify-tiles' facts with the summary
// taken as partial) are written without evaluating the mask: under a
// causal document mask that is every tile above the diagonal.
//
// The ABI is the main kernel's up to and including the summary pointer
// (the main kernel appends only its target arguments after it), so one
// argument list serves both launches.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Conversion/FlashToNVVM/KernelModule.h"

#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

namespace {

constexpr int64_t kSummaryThreads = 128;

class BlockSummaryEmitter : public EmitterCore {
public:
  BlockSummaryEmitter(flash::KernelOp kernel, const KernelConfig &config,
                      gpu::GPUModuleOp gpuModule, StringRef pass)
      : EmitterCore(kernel, config, gpuModule), kernel(kernel), pass(pass.str()) {}

  LogicalResult emit();
  StringRef passName() const override { return pass; }
  // No shared-memory tiles: the copies of EmitterCore are never used.
  Value sharedChunkOffset(Value, Value, int64_t) override { return i32(0); }
  std::optional<int64_t> sharedRowStepBytes(int64_t) override { return std::nullopt; }

private:
  /// The kernel's mask, at (b, h, qt, kt) of its key loop.
  LogicalResult findMask();
  /// Lowers the scalar ops `values` depend on (outside the mask's region),
  /// with the kernel's (b, h, qt) and the loop's kt already mapped; fails
  /// silently when one is not a scalar op (a tile value).
  LogicalResult lowerDefinitions(ArrayRef<Value> values);
  /// The i1 facts the interval analysis proved (all visible, any visible)
  /// with the summary read as partial, or null values when they cannot be
  /// computed here.
  std::pair<Value, Value> intervalFacts();
  /// Evaluates the mask on this thread's elements of the tile and votes.
  Value classifyElements(Value batch, Value head, Value queryTile, Value keyTile);

  flash::KernelOp kernel;
  std::string pass;
  flash::MaskOp mask;
  scf::ForOp loop;
  /// Lowering the interval facts: flash.block_class reads as partial.
  bool blockClassIsPartial = false;
};

LogicalResult BlockSummaryEmitter::findMask() {
  kernel.walk([&](flash::MaskOp op) {
    if (!mask)
      mask = op;
  });
  loop = mask ? dyn_cast<scf::ForOp>(mask->getParentOp()) : scf::ForOp();
  if (!loop || mask.getKeyTile() != loop.getInductionVar() ||
      mask.getBatch() != kernel.getBatch() || mask.getHead() != kernel.getHead() ||
      mask.getQueryTile() != kernel.getQueryTile())
    return error(kernel, "a block summary needs the kernel's mask at (b, h, qt, kt) of its "
                         "key loop");
  return success();
}

LogicalResult BlockSummaryEmitter::lowerDefinitions(ArrayRef<Value> values) {
  llvm::SetVector<Operation *> defs;
  SmallVector<Value> work(values.begin(), values.end());
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (lookupScalar(value))
      continue;
    Operation *def = value.getDefiningOp();
    if (!def)
      return failure(); // a block argument that is not (b, h, qt, kt)
    if (!defs.insert(def))
      continue;
    if (def->getNumRegions() || def->getNumResults() != 1 ||
        isa<ShapedType>(def->getResult(0).getType()))
      return failure();
    llvm::append_range(work, def->getOperands());
  }
  // Kernel-level definitions before loop-body ones, each block in order.
  SmallVector<Operation *> ordered(defs.begin(), defs.end());
  llvm::sort(ordered, [&](Operation *x, Operation *y) {
    bool xInLoop = loop->isAncestor(x), yInLoop = loop->isAncestor(y);
    if (xInLoop != yInLoop)
      return yInLoop;
    return x->isBeforeInBlock(y);
  });
  for (Operation *op : ordered) {
    if (auto blockClass = dyn_cast<flash::BlockClassOp>(op)) {
      if (!blockClassIsPartial)
        return failure();
      scalars.map(blockClass.getResult(), i32(flash::kBlockPartial));
      continue;
    }
    if (failed(lowerScalarOp(op)))
      return failure();
  }
  return success();
}

std::pair<Value, Value> BlockSummaryEmitter::intervalFacts() {
  if (!mask.isClassified())
    return {};
  blockClassIsPartial = true;
  LogicalResult lowered = lowerDefinitions({mask.getAllVisible(), mask.getAnyVisible()});
  blockClassIsPartial = false;
  if (failed(lowered))
    return {};
  return {lookupScalar(mask.getAllVisible()), lookupScalar(mask.getAnyVisible())};
}

Value BlockSummaryEmitter::classifyElements(Value batch, Value head, Value queryTile,
                                            Value keyTile) {
  // Thread t takes columns t, t + T, ... and walks each down the tile's
  // rows inside the problem: the key side of the mask (doc[b, j], an
  // invariant load) leaves the row loop and the query side (doc[b, i]) is
  // the same address across the warp. A column at j >= M walks no rows.
  Value firstQuery = mul(queryTile, i32(config.br));
  Value firstKey = mul(keyTile, i32(config.bc));
  Value rowsInside = arith::MinSIOp::create(
      b, loc, arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, queryLen, firstQuery),
                                     i32(0)),
      i32(config.br));
  Value falseValue = arith::ConstantIntOp::create(b, loc, 0, 1);
  Value trueValue = arith::ConstantIntOp::create(b, loc, 1, 1);
  auto columnLoop = scf::ForOp::create(b, loc, tid, i32(config.bc), i32(kSummaryThreads),
                                       ValueRange{falseValue, trueValue});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(columnLoop.getBody());
    Value key = add(firstKey, columnLoop.getInductionVar());
    Value rows = select(cmpI(arith::CmpIPredicate::slt, key, keyLen), rowsInside, i32(0));
    auto rowLoop = scf::ForOp::create(b, loc, i32(0), rows, i32(1),
                                      columnLoop.getRegionIterArgs());
    b.setInsertionPointToStart(rowLoop.getBody());
    Value query = add(firstQuery, rowLoop.getInductionVar());
    FailureOr<Value> visible = emitRegionElement(mask, ValueRange(), batch, head, query, key);
    if (failed(visible))
      return {};
    Value any = rowLoop.getRegionIterArgs()[0], all = rowLoop.getRegionIterArgs()[1];
    scf::YieldOp::create(b, loc,
                         ValueRange{arith::OrIOp::create(b, loc, any, *visible),
                                    arith::AndIOp::create(b, loc, all, *visible)});
    b.setInsertionPointAfter(rowLoop);
    scf::YieldOp::create(b, loc, rowLoop.getResults());
  }
  Value anyLocal = columnLoop.getResult(0), allLocal = columnLoop.getResult(1);
  auto vote = [&](Value predicate, NVVM::BarrierReduction reduction) {
    Value word = arith::ExtUIOp::create(b, loc, b.getI32Type(), predicate);
    Value result = NVVM::BarrierOp::create(b, loc, b.getI32Type(), Value(), Value(),
                                           NVVM::BarrierReductionAttr::get(b.getContext(),
                                                                           reduction),
                                           word)
                       .getRes();
    return cmpI(arith::CmpIPredicate::ne, result, i32(0));
  };
  Value any = vote(anyLocal, NVVM::BarrierReduction::OR);
  Value all = vote(allLocal, NVVM::BarrierReduction::AND);
  return select(any, select(all, i32(flash::kBlockFull), i32(flash::kBlockPartial)),
                i32(flash::kBlockEmpty));
}

LogicalResult BlockSummaryEmitter::emit() {
  if (failed(findMask()))
    return failure();
  MLIRContext *ctx = kernel.getContext();
  SmallVector<Type> argTypes;
  if (failed(appendForwardArguments(argTypes)))
    return failure();
  b.setInsertionPointToEnd(gpuModule.getBody());
  func = LLVM::LLVMFuncOp::create(
      b, loc, blockSummaryKernelName(kernel.getSymName()),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  func->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func->setAttr(NVVM::NVVMDialect::getReqntidAttrName(),
                b.getDenseI32ArrayAttr({static_cast<int32_t>(kSummaryThreads), 1, 1}));
  // Only the aux tensors are read and only the summary is written.
  unsigned summaryArgument = argTypes.size() - 1;
  for (unsigned i = 5 + 12 + 5 + kernel.getParams().size(); i < summaryArgument; ++i) {
    func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
    func.setArgAttr(i, LLVM::LLVMDialect::getReadonlyAttrName(), b.getUnitAttr());
  }
  func.setArgAttr(summaryArgument, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());

  Block &entry = *func.addEntryBlock(b);
  b.setInsertionPointToStart(&entry);
  bindSizesAndInputs(entry.getArguments(), 5 + 12);
  bindThreadCoordinates();

  Type i32Type = b.getI32Type();
  flash::BlockSummaryAttr summary = kernel.getBlockSummaryAttr();
  Value keyTile = NVVM::BlockIdXOp::create(b, loc, i32Type);
  Value queryTile = NVVM::BlockIdYOp::create(b, loc, i32Type);
  Value row = NVVM::BlockIdZOp::create(b, loc, i32Type);
  Value heads = summary.getPerHead() ? headCount : i32(1);
  Value batch = summary.getPerBatch() ? arith::DivUIOp::create(b, loc, row, heads) : i32(0);
  Value head = summary.getPerHead() ? arith::RemUIOp::create(b, loc, row, heads) : i32(0);
  scalars.map(kernel.getBatch(), batch);
  scalars.map(kernel.getHead(), head);
  scalars.map(kernel.getQueryTile(), queryTile);
  scalars.map(loop.getInductionVar(), keyTile);

  // The region's captures (CSE may have merged its flash.dim or constants
  // into the kernel's) must exist before it is emitted.
  llvm::SetVector<Value> captured;
  getUsedValuesDefinedAbove(mask.getBody(), captured);
  if (failed(lowerDefinitions(captured.getArrayRef())))
    return error(mask, "the block summary needs a mask region that captures scalars only");

  Value offset = blockSummaryOffset(summary, batch, head, queryTile, keyTile);
  Value target = gepBytes(blockSummaryPtr, offset);
  auto store = [&](Value blockClass) {
    onFirstThread([&] {
      LLVM::StoreOp::create(b, loc, arith::TruncIOp::create(b, loc, b.getI8Type(), blockClass),
                            target);
    });
  };
  auto [allVisible, anyVisible] = intervalFacts();
  if (allVisible) {
    // Decided by the intervals (uniform over the CTA): no evaluation.
    Value empty =
        arith::XOrIOp::create(b, loc, anyVisible, arith::ConstantIntOp::create(b, loc, 1, 1));
    Value decided = arith::OrIOp::create(b, loc, allVisible, empty);
    auto ifDecided = scf::IfOp::create(b, loc, TypeRange(), decided, /*withElseRegion=*/true);
    b.setInsertionPointToStart(ifDecided.thenBlock());
    store(select(allVisible, i32(flash::kBlockFull), i32(flash::kBlockEmpty)));
    b.setInsertionPointToStart(ifDecided.elseBlock());
    Value blockClass = classifyElements(batch, head, queryTile, keyTile);
    if (!blockClass)
      return failure();
    store(blockClass);
    b.setInsertionPointAfter(ifDecided);
  } else {
    Value blockClass = classifyElements(batch, head, queryTile, keyTile);
    if (!blockClass)
      return failure();
    store(blockClass);
  }
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

} // namespace

flash::LaunchAttr lowering::emitBlockSummaryKernel(flash::KernelOp kernel,
                                                   const KernelConfig &config,
                                                   gpu::GPUModuleOp gpuModule, StringRef passName,
                                                   flash::GemmKind gemm) {
  BlockSummaryEmitter emitter(kernel, config, gpuModule, passName);
  if (failed(emitter.emit())) {
    if (emitter.func)
      emitter.func.erase();
    return {};
  }
  SmallVector<Attribute> paramNames, paramTypes, tensorNames;
  emitter.signatureNames(paramNames, paramTypes, tensorNames);
  Builder b(kernel.getContext());
  auto emitError = [&] {
    return kernel.emitOpError() << passName << ": internal error: invalid launch facts: ";
  };
  return flash::LaunchAttr::getChecked(
      emitError, kernel.getContext(), gemm, flash::GridKind::BlockSummary, kSummaryThreads,
      /*dynamic_shared_bytes=*/int64_t{0}, config.br, config.bc, config.headDim, kSummaryThreads / 32,
      config.rowsPerWarp, config.elementType, /*tensor_maps=*/int64_t{0}, b.getArrayAttr(paramNames),
      b.getArrayAttr(paramTypes), b.getArrayAttr(tensorNames));
}
