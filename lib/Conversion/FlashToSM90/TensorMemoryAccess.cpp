//===- TensorMemoryAccess.cpp - K and V blocks by TMA ----------------------===//
//
// With hopper.kvTensorMaps, one thread moves each K/V block with
// `cp.async.bulk.tensor.4d` (one box of 64 columns x Bc rows per panel,
// written in the 128-byte swizzle by the copy engine; rows past M come back
// as zeros) and arms the buffer's mbarrier with the byte count. The tensor
// maps (dims D, M, HKV, B; the strides of k and v) are encoded on the host
// and passed as grid-constant parameters after the aux tensors.
//
// A paged cache (flash.paged_kv, config::pagedBoxesFit): the tensor maps
// are the caches' (dims D, page, HKV, pages), and a block is one box per
// page it spans (each page's table entry, rows 0..page-1) or its rows of
// the one page that holds it. An entry outside the cache becomes the page
// past the last, which TMA fills with zeros. The block a sequence ends in
// would bring the stale rows past the end of its last page (maybe NaN, and
// 0 * NaN poisons P·V):
// - a one-warpgroup kernel (zeroesPagedTail) copies it by boxes like any
//   other (warp 0, a box per lane; pages past the sequence come as zeros),
//   and after the wait for it every thread zeroes its share of the rows
//   past the sequence (zeroPagedTail);
// - a warp-specialized one gathers it by cp.async with zero fill in the
//   producer warpgroup (EmitterCore::issuePagedTileCopy), as does every
//   thread of a one-warpgroup kernel that defers P·V (--overlap-softmax,
//   whose waits have no CTA barrier to publish zeroed rows); each copying
//   thread arrives on the block's full barrier by
//   `cp.async.mbarrier.arrive.noinc` once its copies have landed, so those
//   full barriers expect one arrival per copying thread
//   (fullBarrierArrivals; the copy thread of a box copy or a skipped
//   block makes the others' in one counted arrive).
// Readers of a paged block fence the generic proxy's writes before wgmma
// reads them (async proxy).
//
// Phases: K's barrier completes once per key block of the loop (the
// prologue copies K(first); iteration kt copies K(kt+1)); V's completes once
// per iteration too, by the copy of V(kt) or, in a skipped iteration, by a
// plain arrive. So the phase of iteration kt has parity (kt - first) mod 2
// for both. Before a copy overwrites a buffer the CTA synchronizes, so every
// thread has finished both its reads and its wait on the previous phase (a
// barrier two phases ahead would look complete to a late waiter).
//
//===----------------------------------------------------------------------===//

#include "InlineAsm.h"
#include "SM90Emitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;

void SM90Emitter::appendTargetArguments(SmallVectorImpl<Type> &types) {
  types.append(hopper.tensorMaps(), LLVM::LLVMPointerType::get(b.getContext()));
  if (hopper.persistent)
    types.push_back(LLVM::LLVMPointerType::get(b.getContext(), 1));
}

void SM90Emitter::annotateTargetArguments(unsigned first) {
  // A CUtensorMap (128 bytes, 64-byte aligned) by value, left in the
  // parameter space: TMA reads it through its generic address.
  for (unsigned i = first; i < first + hopper.tensorMaps(); ++i) {
    func.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(),
                    TypeAttr::get(LLVM::LLVMArrayType::get(b.getI8Type(), 128)));
    func.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(), b.getI64IntegerAttr(64));
    func.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(), b.getUnitAttr());
  }
  // The tile counter: read and written by atomics only.
  if (hopper.persistent)
    func.setArgAttr(first + hopper.tensorMaps(), LLVM::LLVMDialect::getNoAliasAttrName(),
                    b.getUnitAttr());
}

void SM90Emitter::bindTargetArguments(ValueRange arguments) {
  if (!hopper.kvTensorMaps)
    return;
  unsigned arg = 0;
  if (hopper.persistent)
    qTensorMap = arguments[arg++];
  kTensorMap = arguments[arg++];
  vTensorMap = arguments[arg++];
  if (hopper.persistent)
    tileCounter = arguments[arg++];
}

int64_t SM90Emitter::assignBarriers(Value sharedBase, int64_t *fullCount) {
  Value base = arith::TruncIOp::create(b, loc, b.getI32Type(),
                                       add(sharedBase, i64(hopper.barrierSmemOffset())));
  // Full barriers (one arrival: the copy's expect_tx; one per thread in a
  // paged kernel: fullBarrierArrivals), K then V, then
  // (warp-specialized) the empty ones (one arrival per consumer thread).
  int64_t next = 0;
  auto allocate = [&] { return add(base, i32(8 * next++)); };
  // A second buffer's barrier follows its first one (kvSlot).
  keyBarrier = allocate();
  if (hopper.keyBuffers() == 2)
    allocate();
  valueBarrier = allocate();
  if (hopper.valueBuffers() == 2)
    allocate();
  if (hopper.persistent)
    queryFull = allocate();
  if (fullCount)
    *fullCount = next;
  if (hopper.warpSpecialized) {
    keyEmpty = allocate();
    allocate();
    valueEmpty = allocate();
    allocate();
  }
  if (hopper.persistent)
    queryEmpty = allocate();
  return next;
}

void SM90Emitter::initializeBarriers(Value sharedBase) {
  int64_t fullCount = 0;
  int64_t count = assignBarriers(sharedBase, &fullCount);
  Value base = keyBarrier; // the first of them
  isCopyThread = cmpI(arith::CmpIPredicate::eq, tid, i32(0));
  auto init = scf::IfOp::create(b, loc, isCopyThread, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(init.thenBlock()->getTerminator());
    for (int64_t i = 0; i < count; ++i) {
      AsmCall call;
      call.addInput(add(base, i32(8 * i)));
      call.addInput(i32(i < fullCount ? fullBarrierArrivals() : hopper.consumerThreads()));
      call.emit(b, loc, "mbarrier.init.shared::cta.b64 [$0], $1;");
    }
    AsmCall().emit(b, loc, "fence.mbarrier_init.release.cluster;");
  }
  NVVM::Barrier0Op::create(b, loc);
}

void SM90Emitter::issueKVCopy(flash::LoadKVOp op, Value position, Value block) {
  if (!hopper.kvTensorMaps)
    return KernelEmitter::issueKVCopy(op, position, block);
  // Warp-specialized: the producer issues every copy (emitProducerLoop).
  if (hopper.warpSpecialized)
    return;
  Slot slot = deferredOp ? kvSlot(op.getOperand(), blockOrdinal(position))
                         : kvSlot(op.getOperand(), i32(0));
  // No copy past the loop's last block: a CTA must not exit with one in
  // flight (the prologue's K(first) when the range is empty).
  Value inLoop = cmpI(arith::CmpIPredicate::slt, position, keyLoopEnd);
  // The paged boxes of a one-warpgroup kernel: warp 0, a box per lane
  // (issuePagedBoxCopies).
  Value copiers =
      zeroesPagedTail() ? cmpI(arith::CmpIPredicate::eq, warp, i32(0)) : isCopyThread;
  Value issue = arith::AndIOp::create(b, loc, copiers, inLoop);
  if (kernel.getPagedKvAttr() && !zeroesPagedTail()) {
    // Uniform over the CTA (the block and the sequence's length are).
    Value lastOfSequence = endsSequence(block);
    Value gather = arith::AndIOp::create(b, loc, inLoop, lastOfSequence);
    auto gathered = scf::IfOp::create(b, loc, gather, /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(gathered.thenBlock()->getTerminator());
      gatherLastPagedBlock(op, block, slot);
    }
    Value boxed = arith::XOrIOp::create(b, loc, lastOfSequence,
                                        arith::ConstantIntOp::create(b, loc, 1, 1));
    issue = arith::AndIOp::create(b, loc, issue, boxed);
  }
  auto branch = scf::IfOp::create(b, loc, issue, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(branch.thenBlock()->getTerminator());
  issueTensorCopy(op, block, slot.address, slot.full);
}

Value SM90Emitter::endsSequence(Value block) {
  Value blockEnd = mul(add(block, i32(1)), i32(config.bc));
  return cmpI(arith::CmpIPredicate::sgt, blockEnd, keyLen);
}

void SM90Emitter::gatherLastPagedBlock(flash::LoadKVOp op, Value block, const Slot &slot) {
  bool isKey = op.getOperand() == flash::KVOperand::Key;
  auto sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), 3);
  // Warp-specialized: the producer warpgroup (after the consumers) copies.
  CopyThreads threads = allThreads();
  if (hopper.warpSpecialized)
    threads = {arith::SubIOp::create(b, loc, tid, i32(hopper.consumerThreads())),
               fullBarrierArrivals()};
  issuePagedTileCopy(threads, isKey ? kPtr : vPtr, isKey ? kStrides : vStrides,
                     lookupScalar(op.getBatch()), lookupScalar(op.getKvHead()), block,
                     LLVM::IntToPtrOp::create(b, loc, sharedPtr, slot.address));
  AsmCall arrive;
  arrive.addInput(slot.full);
  arrive.emit(b, loc, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];");
}

int64_t SM90Emitter::fullBarrierArrivals() const {
  if (!flash::KernelOp(kernel).getPagedKvAttr() || zeroesPagedTail())
    return 1;
  return hopper.warpSpecialized ? kPagedProducerThreads : hopper.numThreads;
}

void SM90Emitter::arriveForEveryThread(Value barrier) {
  if (fullBarrierArrivals() == 1)
    return;
  AsmCall arrive;
  arrive.addInput(barrier);
  arrive.addInput(i32(fullBarrierArrivals() - 1));
  arrive.emit(b, loc, "mbarrier.arrive.shared::cta.b64 _, [$0], $1;");
}

void SM90Emitter::issuePagedBoxCopies(Value map, Value keyTile, Value head, Value batch,
                                      Value address, Value barrier) {
  int64_t page = kernel.getPagedKvAttr().getPage();
  int64_t boxRows = std::min(page, config.bc);
  Type i32Type = b.getI32Type();
  Value tensorMap = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), map);
  Value destination = arith::TruncIOp::create(b, loc, i32Type, address);
  Value tableRow = gepElements(pagedTable, mul(toI64(batch), toI64(pagedTableStride)), i32Type);
  Value firstKey = mul(keyTile, i32(config.bc));
  int64_t panelBytes = config.bc * 128;
  if (zeroesPagedTail())
    return issuePagedBoxesByLane(tensorMap, destination, tableRow, firstKey, head, barrier);
  armForBytes(barrier, hopper.panels() * panelBytes);
  // Warp-specialized, every producer thread arrives itself
  // (issueProducerCopy).
  if (!hopper.warpSpecialized)
    arriveForEveryThread(barrier);
  // Every entry first, so that their loads overlap. (The block is inside
  // the sequence: the block it ends in is gathered.)
  SmallVector<Value> pages;
  for (int64_t box = 0; box < config.bc / boxRows; ++box) {
    Value entry = arith::DivUIOp::create(b, loc, add(firstKey, i32(box * boxRows)), i32(page));
    pages.push_back(pageIndexAt(tableRow, entry, Value()));
  }
  Value rowInPage = page > config.bc ? arith::RemUIOp::create(b, loc, firstKey, i32(page))
                                     : i32(0);
  for (auto [box, pageIndex] : llvm::enumerate(pages))
    for (int64_t panel = 0; panel < hopper.panels(); ++panel)
      copyBox(tensorMap, add(destination, i32(panel * panelBytes + box * boxRows * 128)),
              {i32(panel * 64), rowInPage, head, pageIndex}, barrier);
}

void SM90Emitter::issuePagedBoxesByLane(Value tensorMap, Value destination, Value tableRow,
                                        Value firstKey, Value head, Value barrier) {
  int64_t page = kernel.getPagedKvAttr().getPage();
  int64_t boxRows = std::min(page, config.bc);
  int64_t boxes = config.bc / boxRows;
  int64_t panelBytes = config.bc * 128;
  // Lane 0 arms the barrier (its one arrival) before any box can complete.
  auto arm = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::eq, lane, i32(0)),
                               /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(arm.thenBlock()->getTerminator());
    armForBytes(barrier, hopper.panels() * panelBytes);
  }
  AsmCall().emit(b, loc, "bar.warp.sync -1;");
  // Lane l copies box l: one table entry per lane, not all of them in one
  // thread's registers across the key loop. A box past the sequence (in
  // the block it ends in) reads entry 0, which every sequence with a
  // block has, and copies the page past the last, which TMA fills with
  // zeros; its last page's stale rows are zeroed after the wait
  // (zeroPagedTail).
  auto copy = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, lane, i32(boxes)),
                                /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(copy.thenBlock()->getTerminator());
  Value boxKey = add(firstKey, mul(lane, i32(boxRows)));
  Value used = cmpI(arith::CmpIPredicate::slt, boxKey, keyLen);
  Value entry = select(used, arith::DivUIOp::create(b, loc, boxKey, i32(page)), i32(0));
  Value pageIndex = pageIndexAt(tableRow, entry, used);
  Value rowInPage = page > config.bc ? arith::RemUIOp::create(b, loc, firstKey, i32(page))
                                     : i32(0);
  Value boxDestination = add(destination, mul(lane, i32(boxRows * 128)));
  for (int64_t panel = 0; panel < hopper.panels(); ++panel)
    copyBox(tensorMap, add(boxDestination, i32(panel * panelBytes)),
            {i32(panel * 64), rowInPage, head, pageIndex}, barrier);
}

Value SM90Emitter::pageIndexAt(Value tableRow, Value entry, Value used) {
  Type i32Type = b.getI32Type();
  Value index =
      LLVM::LoadOp::create(b, loc, i32Type, gepElements(tableRow, toI64(entry), i32Type), 4,
                           /*isVolatile=*/false, /*isNonTemporal=*/false,
                           /*isInvariant=*/true);
  Value inCache = cmpI(arith::CmpIPredicate::ult, index, pagedPages);
  if (used)
    inCache = arith::AndIOp::create(b, loc, used, inCache);
  return select(inCache, index, pagedPages);
}

void SM90Emitter::armForBytes(Value barrier, int64_t bytes) {
  AsmCall arm;
  arm.addInput(barrier);
  arm.emit(b, loc,
           llvm::formatv("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {0};", bytes).str());
}

void SM90Emitter::copyBox(Value tensorMap, Value destination, ArrayRef<Value> coordinates,
                          Value barrier) {
  AsmCall copy;
  copy.addInput(destination);
  copy.addInput(tensorMap);
  for (Value coordinate : coordinates)
    copy.addInput(coordinate);
  copy.addInput(barrier);
  copy.emit(b, loc,
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
            "[$0], [$1, {$2, $3, $4, $5}], [$6];");
}

void SM90Emitter::issueTensorCopy(flash::LoadKVOp op, Value keyTile, Value address,
                                  Value barrier) {
  bool isKey = op.getOperand() == flash::KVOperand::Key;
  if (kernel.getPagedKvAttr())
    return issuePagedBoxCopies(isKey ? kTensorMap : vTensorMap, keyTile,
                               lookupScalar(op.getKvHead()), lookupScalar(op.getBatch()),
                               address, barrier);
  auto [firstRow, batch] =
      boxRowAndBatch(mul(keyTile, i32(config.bc)), lookupScalar(op.getBatch()), keyRowStart);
  issueBoxCopy(isKey ? kTensorMap : vTensorMap, firstRow, lookupScalar(op.getKvHead()), batch,
               config.bc, address, barrier);
}

std::pair<Value, Value> SM90Emitter::boxRowAndBatch(Value firstRow, Value batch,
                                                    Value rowStart) {
  // Packed varlen rows: one [rows, heads, D] tensor (batch extent 1), the
  // sequence's rows from rowStart.
  if (!rowStart)
    return {firstRow, batch};
  return {add(arith::TruncIOp::create(b, loc, b.getI32Type(), rowStart), firstRow), i32(0)};
}

void SM90Emitter::issueBoxCopy(Value map, Value firstRow, Value head, Value batch, int64_t rows,
                               Value address, Value barrier) {
  Value tensorMap = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), map);
  Value destination = arith::TruncIOp::create(b, loc, b.getI32Type(), address);
  int64_t panelBytes = rows * 128;
  armForBytes(barrier, hopper.panels() * panelBytes);
  for (int64_t panel = 0; panel < hopper.panels(); ++panel)
    copyBox(tensorMap, add(destination, i32(panel * panelBytes)),
            {i32(panel * 64), firstRow, head, batch}, barrier);
}

Value SM90Emitter::blockOrdinal(Value position) {
  Value ordinal = arith::SubIOp::create(b, loc, position, keyLoopBegin);
  return ordinalBase ? add(ordinal, ordinalBase) : ordinal;
}

SM90Emitter::Slot SM90Emitter::kvSlot(flash::KVOperand operand, Value ordinal) {
  bool isKey = operand == flash::KVOperand::Key;
  Value address = isKey ? keyAddress : valueAddress;
  Value full = isKey ? keyBarrier : valueBarrier;
  if ((isKey ? hopper.keyBuffers() : hopper.valueBuffers()) == 1)
    return {address, full, Value(), arith::AndIOp::create(b, loc, ordinal, i32(1))};
  // Offsets from the first buffer and barrier (the second of each pair
  // follows it) rather than a choice between two: fewer values live across
  // the loops, which matters in the producer's few registers.
  Value second = arith::AndIOp::create(b, loc, ordinal, i32(1));
  Value barrierStep = mul(second, i32(8));
  int64_t bufferBytes = isKey ? config.bc * hopper.tileRowBytes() : hopper.valueBufferBytes();
  Slot slot;
  slot.address = add(address, toI64(mul(second, i32(bufferBytes))));
  slot.full = add(full, barrierStep);
  if (hopper.warpSpecialized)
    slot.empty = add(isKey ? keyEmpty : valueEmpty, barrierStep);
  slot.parity =
      arith::AndIOp::create(b, loc, arith::ShRSIOp::create(b, loc, ordinal, i32(1)), i32(1));
  return slot;
}

void SM90Emitter::arriveOn(Value barrier) {
  AsmCall call;
  call.addInput(barrier);
  call.emit(b, loc, "mbarrier.arrive.shared::cta.b64 _, [$0];");
}

void SM90Emitter::waitForPhase(Value barrier) {
  Value blocks = arith::DivUIOp::create(
      b, loc, arith::SubIOp::create(b, loc, pipeline->inductionVar, pipeline->lowerBound),
      pipeline->step);
  waitForPhase(barrier, arith::AndIOp::create(b, loc, blocks, i32(1)));
}

void SM90Emitter::waitForPhase(Value barrier, Value parity) {
  AsmCall wait;
  wait.addInput(barrier);
  wait.addInput(parity);
  // Labels are local to the braces, so every inlined copy may reuse them.
  wait.emit(b, loc,
            "{\n.reg .pred done;\nwait:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
            "@!done bra wait;\n}");
}

void SM90Emitter::fenceGatheredBlock() {
  // A paged block may have come by cp.async (gatherLastPagedBlock). (Rows
  // zeroed by zeroPagedTail are fenced there, in the one block they are.)
  if (kernel.getPagedKvAttr() && !zeroesPagedTail())
    AsmCall().emit(b, loc, "fence.proxy.async.shared::cta;");
}

bool SM90Emitter::zeroesPagedTail() const {
  return hopper.pagedLastBlockByTma && hopper.kvTensorMaps && !hopper.warpSpecialized &&
         !hopper.deferPV;
}

void SM90Emitter::zeroPagedTail(flash::KVOperand operand, Value block) {
  auto tail = scf::IfOp::create(b, loc, endsSequence(block), /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(tail.thenBlock()->getTerminator());
  // Rows keep their 128 bytes per panel under the swizzle, which only
  // permutes the 16-byte chunks inside a row: a row past the end is
  // zeroed whole, chunk c of the block's chunks by thread c mod threads.
  Value rowsInSequence = arith::SubIOp::create(b, loc, keyLen, mul(block, i32(config.bc)));
  // Computed here from an opaque thread index: values derived from tid
  // alone would be hoisted out of the key loop and held in registers.
  Value thread = opaqueValue(tid);
  Value buffer = arith::TruncIOp::create(
      b, loc, b.getI32Type(),
      operand == flash::KVOperand::Key ? keyAddress : valueAddress);
  Value threadChunk = add(buffer, mul(thread, i32(16)));
  int64_t chunks = hopper.panels() * config.bc * 8;
  for (int64_t first = 0; first < chunks; first += config.numThreads) {
    OpBuilder::InsertionGuard inner(b);
    // Chunk c lies at byte 16·c: panel c / (8·Bc), row (c / 8) mod Bc.
    Value chunk = add(thread, i32(first));
    Value row = arith::RemUIOp::create(b, loc, arith::DivUIOp::create(b, loc, chunk, i32(8)),
                                       i32(config.bc));
    Value past = cmpI(arith::CmpIPredicate::sge, row, rowsInSequence);
    if (first + config.numThreads > chunks)
      past = arith::AndIOp::create(b, loc, past,
                                   cmpI(arith::CmpIPredicate::ult, chunk, i32(chunks)));
    auto zero = scf::IfOp::create(b, loc, past, /*withElseRegion=*/false);
    b.setInsertionPoint(zero.thenBlock()->getTerminator());
    AsmCall store;
    store.addInput(threadChunk);
    store.emit(b, loc,
               llvm::formatv("st.shared.v4.b32 [$0+{0}], {{0, 0, 0, 0};", first * 16).str());
  }
  // Generic-proxy writes, read next by wgmma (async proxy).
  AsmCall().emit(b, loc, "fence.proxy.async.shared::cta;");
}

void SM90Emitter::waitForKVBlock(flash::KVOperand operand) {
  if (!hopper.kvTensorMaps)
    return KernelEmitter::waitForKVBlock(operand);
  waitForPhase(operand == flash::KVOperand::Key ? keyBarrier : valueBarrier);
  if (zeroesPagedTail())
    zeroPagedTail(operand, pipeline->block);
  fenceGatheredBlock();
  // Every thread past its wait and done with the other buffer's last reads.
  NVVM::Barrier0Op::create(b, loc);
}

void SM90Emitter::skipKVBlock(Value next, Value upper) {
  if (!hopper.kvTensorMaps)
    return KernelEmitter::skipKVBlock(next, upper);
  waitForPhase(keyBarrier);
  // V's phase for this block completes without a copy.
  auto arrive = scf::IfOp::create(b, loc, isCopyThread, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(arrive.thenBlock()->getTerminator());
    arriveOn(valueBarrier);
    arriveForEveryThread(valueBarrier);
  }
  NVVM::Barrier0Op::create(b, loc);
  auto more = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, next, upper),
                                /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(more.thenBlock()->getTerminator());
  issueKVCopy(pipeline->keyLoad, next, next);
}
