//===- Emitter.cpp - Kernel skeleton, scalars and scf.for ------------------===//
//
// The llvm.func signature (the kernel ABI; a backend may append arguments),
// thread coordinates, the walk over the flash.kernel body and scalar ops.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

KernelEmitter::KernelEmitter(flash::KernelOp kernel, const KernelConfig &config,
                         gpu::GPUModuleOp gpuModule)
    : EmitterCore(kernel, config, gpuModule), kernel(kernel) {}

Value KernelEmitter::fragmentRow(int64_t mb, int64_t e) {
  Value row = add(mul(warp, i32(config.rowsPerWarp)), groupId);
  int64_t offset = 16 * mb + (e >= 2 ? 8 : 0);
  return offset ? add(row, i32(offset)) : row;
}

Value KernelEmitter::fragmentCol(int64_t nt, int64_t e) {
  return add(mul(threadInGroup, i32(2)), i32(8 * nt + (e & 1)));
}

KernelEmitter::QueryRow KernelEmitter::queryRow(Value head, Value queryTile, int64_t mb,
                                                int64_t e) {
  if (kernel.getPackedHeads()) {
    assert(!packedRows.empty() && "packed rows are mapped before the body");
    return packedRows[2 * mb + (e >= 2 ? 1 : 0)];
  }
  Value position = add(mul(queryTile, i32(config.br)), fragmentRow(mb, e));
  return {head, position, cmpI(arith::CmpIPredicate::slt, position, queryLen)};
}

SmallVector<KernelEmitter::QueryRow> KernelEmitter::packRows(Value group, Value kvHead,
                                                             Value queryTile) {
  Value packedLen = mul(queryLen, group);
  Value firstRow = mul(queryTile, i32(config.br));
  Value firstHead = mul(kvHead, group);
  SmallVector<QueryRow> rows;
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t half = 0; half < 2; ++half) {
      Value row = add(firstRow, fragmentRow(mb, 2 * half));
      Value member = arith::RemUIOp::create(b, loc, row, group);
      // Unsigned: the last tile's padding rows may pass 2^31 when G·N is near it.
      rows.push_back({add(firstHead, member), arith::DivUIOp::create(b, loc, row, group),
                      cmpI(arith::CmpIPredicate::ult, row, packedLen)});
    }
  return rows;
}

void KernelEmitter::mapPackedRows() {
  groupSize = arith::DivUIOp::create(b, loc, headCount, kvHeadCount);
  packedRows = packRows(groupSize, lookupScalar(kernel.getHead()),
                        lookupScalar(kernel.getQueryTile()));
}

SmallVector<KernelEmitter::QueryRow> KernelEmitter::storedRows(Value head, Value queryTile) {
  // A packed tile maps its rows again from opaque copies of its
  // coordinates: LLVM cannot reuse the mapping the key loop used, which
  // would otherwise stay live across the loop (spills at D = 256).
  if (kernel.getPackedHeads())
    return packRows(arith::DivUIOp::create(b, loc, opaqueValue(headCount), kvHeadCount),
                    opaqueValue(head), opaqueValue(queryTile));
  SmallVector<QueryRow> rows;
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t half = 0; half < 2; ++half)
      rows.push_back(queryRow(head, queryTile, mb, 2 * half));
  return rows;
}

//===----------------------------------------------------------------------===//
// Kernel skeleton
//===----------------------------------------------------------------------===//

LogicalResult KernelEmitter::emit() {
  MLIRContext *ctx = kernel.getContext();
  auto globalPtr = LLVM::LLVMPointerType::get(ctx, 1);

  SmallVector<Type> argTypes;
  if (failed(appendForwardArguments(argTypes)))
    return failure();
  unsigned firstSplitArgument = argTypes.size();
  if (kernel.getSplitKeys())
    appendSplitArguments(argTypes);
  unsigned firstTargetArgument = argTypes.size();
  appendTargetArguments(argTypes);

  // An llvm.func rather than a gpu.func: convert-gpu-to-nvvm would turn
  // llvm.intr.sqrt/fabs/copysign into libdevice calls.
  b.setInsertionPointToEnd(gpuModule.getBody());
  func = LLVM::LLVMFuncOp::create(
      b, loc, kernel.getSymName(),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  func->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func->setAttr(NVVM::NVVMDialect::getReqntidAttrName(),
                b.getDenseI32ArrayAttr({static_cast<int32_t>(config.numThreads), 1, 1}));
  if (std::optional<int64_t> cap = registerCap())
    func->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(), b.getI32IntegerAttr(*cap));
  // Every pointer is distinct from the others; all but o and lse are
  // read-only. The backend annotates its own arguments.
  for (unsigned i = 0; i < firstTargetArgument; ++i) {
    if (argTypes[i] != globalPtr)
      continue;
    func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
    if (i != 3 && i != 4 && i < firstSplitArgument)
      func.setArgAttr(i, LLVM::LLVMDialect::getReadonlyAttrName(), b.getUnitAttr());
  }

  annotateTargetArguments(firstTargetArgument);

  Block &entry = *func.addEntryBlock(b);
  b.setInsertionPointToStart(&entry);
  unsigned arg = 0;
  qPtr = entry.getArgument(arg++);
  kPtr = entry.getArgument(arg++);
  vPtr = entry.getArgument(arg++);
  oPtr = entry.getArgument(arg++);
  lsePtr = entry.getArgument(arg++);
  for (Value *strides : {qStrides, kStrides, vStrides, oStrides})
    for (int i = 0; i < 3; ++i)
      strides[i] = entry.getArgument(arg++);
  arg = bindSizesAndInputs(entry.getArguments(), arg);
  if (kernel.getSplitKeys()) {
    splitOutPtr = entry.getArgument(arg++);
    splitLsePtr = entry.getArgument(arg++);
    splitCount = entry.getArgument(arg++);
  }
  bindTargetArguments(entry.getArguments().drop_front(arg));

  bindThreadCoordinates();
  emitSharedMemoryLayout();
  return emitKernelBody();
}

bool KernelEmitter::visitsLongestFirst() {
  return kernel.walk([](flash::MaskOp) { return WalkResult::interrupt(); }).wasInterrupted();
}

bool KernelEmitter::readsTileOrder() {
  return kernel.getBlockSummaryAttr() && blockSummaryPtr;
}

void KernelEmitter::mapTileInSummaryOrder(Value position) {
  assert(readsTileOrder() && "the kernel reads no tile order");
  flash::BlockSummaryAttr summary = kernel.getBlockSummaryAttr();
  // Entry e of the order covers positions [e·copies, (e+1)·copies): the
  // heads (and batch entries) one summary row stands for.
  Value rowHeads = summary.getPerHead() ? headCount : i32(1);
  Value copyHeads = summary.getPerHead() ? i32(1) : headCount;
  Value copies = mul(summary.getPerBatch() ? i32(1) : batchSize, copyHeads);
  Value entry = arith::DivUIOp::create(b, loc, position, copies);
  Value copy = arith::RemUIOp::create(b, loc, position, copies);
  Value ordered = LLVM::LoadOp::create(
      b, loc, b.getI32Type(), gepElements(blockSummaryOrder(summary), toI64(entry), b.getI32Type()),
      4, /*isVolatile=*/false, /*isNonTemporal=*/false, /*isInvariant=*/true);
  Value tiles = ceilDiv(queryLen, config.br);
  // An order that does not fit these sizes (a summary of other inputs, the
  // caller's contract) must not send the CTA outside the problem.
  Value entries = mul(blockSummaryRows(summary), tiles);
  ordered = arith::MinUIOp::create(b, loc, ordered, arith::SubIOp::create(b, loc, entries, i32(1)));
  Value row = arith::DivUIOp::create(b, loc, ordered, tiles);
  scalars.map(kernel.getQueryTile(), arith::RemUIOp::create(b, loc, ordered, tiles));
  scalars.map(kernel.getBatch(), summary.getPerBatch()
                                     ? arith::DivUIOp::create(b, loc, row, rowHeads)
                                     : arith::DivUIOp::create(b, loc, copy, copyHeads));
  scalars.map(kernel.getHead(), summary.getPerHead()
                                    ? arith::RemUIOp::create(b, loc, row, headCount)
                                    : arith::RemUIOp::create(b, loc, copy, headCount));
}

LogicalResult KernelEmitter::emitKernelBody() {
  // Grid (ceil(N / Br), H, B). With a mask (causal, windows) the cost of a
  // query tile varies; the last tiles, the heaviest under a causal mask, get
  // the first CTAs (blockIdx.x = 0 runs tile ceil(N/Br) - 1) so that the
  // long ones do not start last. Under a block summary (documents) the
  // summary kernel sorted the tiles by their visible blocks: the hardware
  // starts CTAs in launch order, so the longest start first and the short
  // ones fill the end. Only the CTA-to-tile mapping changes.
  // A split_keys kernel runs S CTAs per query tile, side by side in x
  // (grid.x = ceil(N / Br) · S): the splits of one tile start together.
  Type i32Type = b.getI32Type();
  Value blockX = NVVM::BlockIdXOp::create(b, loc, i32Type);
  // The query tiles of the grid (grid.x / S), read only where needed.
  auto gridX = [&]() -> Value {
    Value x = NVVM::GridDimXOp::create(b, loc, i32Type);
    return kernel.getSplitKeys() ? Value(arith::DivUIOp::create(b, loc, x, splitCount)) : x;
  };
  if (kernel.getSplitKeys()) {
    scalars.map(kernel.getSplit(), arith::RemUIOp::create(b, loc, blockX, splitCount));
    blockX = arith::DivUIOp::create(b, loc, blockX, splitCount);
  }
  if (readsTileOrder()) {
    mapTileInSummaryOrder(add(blockX, mul(gridX(), add(NVVM::BlockIdYOp::create(b, loc, i32Type),
                                                     mul(NVVM::GridDimYOp::create(b, loc, i32Type),
                                                         NVVM::BlockIdZOp::create(b, loc, i32Type))))));
  } else {
    Value queryTile = blockX;
    if (visitsLongestFirst())
      queryTile = arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, gridX(), i32(1)),
                                        queryTile);
    scalars.map(kernel.getQueryTile(), queryTile);
    scalars.map(kernel.getHead(), NVVM::BlockIdYOp::create(b, loc, i32Type));
    scalars.map(kernel.getBatch(), NVVM::BlockIdZOp::create(b, loc, i32Type));
  }
  // A paged cache or a varlen batch: M (and N) are the CTA's own
  // sequence's from here on (the key loop, its bounds and the masks read
  // them).
  if (kernel.getPagedKvAttr() || kernel.getVarlenAttr())
    bindSequenceLengths(lookupScalar(kernel.getBatch()));
  // A varlen sequence shorter than the longest: its CTAs past its queries
  // have nothing to do (uniform per CTA, before any barrier).
  if (queryRowStart) {
    Value outside = cmpI(arith::CmpIPredicate::sge,
                         mul(lookupScalar(kernel.getQueryTile()), i32(config.br)), queryLen);
    Region *body = b.getInsertionBlock()->getParent();
    auto *exit = new Block(), *work = new Block();
    body->push_back(exit);
    body->push_back(work);
    LLVM::CondBrOp::create(b, loc, outside, exit, ValueRange{}, work, ValueRange{});
    b.setInsertionPointToStart(exit);
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    b.setInsertionPointToStart(work);
  }
  // packed_heads: blockIdx.y is the KV head and x runs over the group's
  // ceil(G·N / Br) tiles of packed rows.
  if (kernel.getPackedHeads())
    mapPackedRows();
  if (failed(lowerBlock(kernel.getEntryBlock())))
    return failure();
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return success();
}

//===----------------------------------------------------------------------===//
// The walk
//===----------------------------------------------------------------------===//

LogicalResult KernelEmitter::lowerBlock(Block &block) {
  for (Operation &op : block.without_terminator())
    if (!loweredAhead.contains(&op) && failed(lowerOp(&op)))
      return failure();
  Operation *terminator = block.getTerminator();
  if (!isa<flash::ReturnOp, scf::YieldOp>(terminator))
    return error(terminator, "unexpected terminator");
  return success();
}

LogicalResult KernelEmitter::lowerOp(Operation *op) {
  loc = op->getLoc();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](scf::ForOp loop) { return lowerFor(loop); })
      .Case([&](flash::LoadQOp load) { return lowerLoadQ(load); })
      .Case([&](flash::LoadKVOp load) { return lowerLoadKV(load); })
      .Case([&](flash::StoreOp store) { return lowerStore(store); })
      .Case([&](flash::SplitKeyRangeOp range) { return lowerSplitKeyRange(range); })
      .Case([&](flash::QKDotOp dot) { return lowerQKDot(dot); })
      .Case([&](flash::ScoreModOp mod) { return lowerElementRegion(mod, /*isMask=*/false); })
      .Case([&](flash::MaskOp mask) { return lowerElementRegion(mask, /*isMask=*/true); })
      .Case([&](flash::MaskKeyBoundsOp bounds) { return lowerMaskKeyBounds(bounds); })
      .Case([&](flash::OnlineSoftmaxOp softmax) { return lowerOnlineSoftmax(softmax); })
      .Case([&](flash::RescaleOp rescale) { return lowerRescale(rescale); })
      .Case([&](flash::PVAccumulateOp pv) {
        return lowerAccumulate(pv, pv.getAcc(), Value(), pv.getProbs(), pv.getValue());
      })
      .Case([&](flash::RescaleAccumulateOp fused) {
        return lowerAccumulate(fused, fused.getAcc(), fused.getAlpha(), fused.getProbs(),
                               fused.getValue());
      })
      .Case([&](flash::FinalizeOp finalize) { return lowerFinalize(finalize); })
      .Case([&](arith::ConstantOp constant) -> LogicalResult {
        if (!isa<ShapedType>(constant.getType()))
          return lowerScalarOp(constant);
        FailureOr<TileValue> tile = constantTile(constant);
        if (failed(tile))
          return failure();
        tiles[constant.getResult()] = std::move(*tile);
        return success();
      })
      .Default([&](Operation *other) { return lowerScalarOp(other); });
}

FailureOr<TileValue> KernelEmitter::constantTile(arith::ConstantOp op) {
  auto type = dyn_cast<RankedTensorType>(op.getType());
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!type || !dense || !dense.isSplat() || !type.getElementType().isF32())
    return error(op, "only splat f32 tile and row-vector constants are supported");
  Value splat = f32(dense.getSplatValue<APFloat>().convertToFloat());
  TileValue tile;
  if (type.getRank() == 1) {
    if (type.getDimSize(0) != config.br)
      return error(op, "row vectors must have Br entries");
    tile.kind = TileValue::Kind::Row;
    tile.regs.assign(2 * config.rowBlocks(), splat);
    return tile;
  }
  if (type.getRank() != 2 || type.getDimSize(0) != config.br || type.getDimSize(1) % 8)
    return error(op, "f32 tiles must be Br x (multiple of 8)");
  tile.kind = TileValue::Kind::Accum;
  tile.cols = type.getDimSize(1);
  tile.regs.assign(config.rowBlocks() * (tile.cols / 8) * 4, splat);
  return tile;
}

void KernelEmitter::flatten(const TileValue &tile, SmallVectorImpl<Value> &out) {
  out.append(tile.regs.begin(), tile.regs.end());
}

FailureOr<TileValue> KernelEmitter::unflatten(Operation *user, Type type, ValueRange &values) {
  auto tensor = cast<RankedTensorType>(type);
  TileValue tile;
  size_t count;
  if (tensor.getRank() == 1) {
    tile.kind = TileValue::Kind::Row;
    count = 2 * config.rowBlocks();
  } else {
    tile.kind = TileValue::Kind::Accum;
    tile.cols = tensor.getDimSize(1);
    count = config.rowBlocks() * (tile.cols / 8) * 4;
  }
  if (values.size() < count)
    return error(user, "internal error: too few values for a tile");
  tile.regs.assign(values.begin(), values.begin() + count);
  values = values.drop_front(count);
  return tile;
}

LogicalResult KernelEmitter::mapFlattened(Operation *user, ValueRange originals,
                                        ValueRange lowered) {
  for (Value original : originals) {
    if (isa<RankedTensorType>(original.getType())) {
      FailureOr<TileValue> tile = unflatten(user, original.getType(), lowered);
      if (failed(tile))
        return failure();
      tiles[original] = std::move(*tile);
    } else {
      scalars.map(original, lowered.front());
      lowered = lowered.drop_front();
    }
  }
  return success();
}
