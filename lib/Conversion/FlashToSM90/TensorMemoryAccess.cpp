//===- TensorMemoryAccess.cpp - K and V blocks by TMA ----------------------===//
//
// With config.kvTensorMaps, one thread moves each K/V block with
// `cp.async.bulk.tensor.4d` (one box of 64 columns x Bc rows per panel,
// written in the 128-byte swizzle by the copy engine; rows past M come back
// as zeros) and arms the buffer's mbarrier with the byte count. The tensor
// maps (dims D, M, HKV, B; the strides of k and v) are encoded on the host
// and passed as grid-constant parameters.
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
using namespace flashc::sm90;

void SM90Emitter::initializeBarriers(Value sharedBase) {
  Type i32Type = b.getI32Type();
  Value base = arith::TruncIOp::create(b, loc, i32Type,
                                       add(sharedBase, i64(config.barrierSmemOffset())));
  keyBarrier = base;
  valueBarrier = add(base, i32(8));
  SmallVector<Value> barriers = {keyBarrier, valueBarrier};
  if (config.deferPV) {
    secondValueBarrier = add(base, i32(16));
    barriers.push_back(secondValueBarrier);
  }
  isCopyThread = cmpI(arith::CmpIPredicate::eq, tid, i32(0));
  auto init = scf::IfOp::create(b, loc, isCopyThread, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(init.thenBlock()->getTerminator());
    for (Value barrier : barriers) {
      AsmCall call;
      call.addInput(barrier);
      call.emit(b, loc, "mbarrier.init.shared::cta.b64 [$0], 1;");
    }
    AsmCall().emit(b, loc, "fence.mbarrier_init.release.cluster;");
  }
  NVVM::Barrier0Op::create(b, loc);
}

void SM90Emitter::issueKVCopy(flash::LoadKVOp op, Value keyTile) {
  if (!config.kvTensorMaps)
    return SM80Emitter::issueKVCopy(op, keyTile);
  bool isKey = op.getOperand() == flash::KVOperand::Key;
  Value barrier = isKey ? keyBarrier : valueBarrier;
  Value address = isKey ? keyAddress : valueAddress;
  if (!isKey && deferredOp)
    std::tie(address, barrier, std::ignore) = valueBuffer(blockOrdinal(keyTile));
  Value tensorMap = LLVM::PtrToIntOp::create(b, loc, b.getI64Type(),
                                             isKey ? kTensorMap : vTensorMap);
  Value destination = arith::TruncIOp::create(b, loc, b.getI32Type(), address);
  Value batch = lookupScalar(op.getBatch()), kvHead = lookupScalar(op.getKvHead());
  Value firstRow = mul(keyTile, i32(config.bc));
  // No copy past the loop's last block: a CTA must not exit with one in
  // flight (the prologue's K(first) when the range is empty).
  Value issue = arith::AndIOp::create(
      b, loc, isCopyThread, cmpI(arith::CmpIPredicate::slt, keyTile, keyLoopEnd));
  auto branch = scf::IfOp::create(b, loc, issue, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(branch.thenBlock()->getTerminator());
  int64_t panelBytes = config.bc * 128;
  {
    AsmCall arm;
    arm.addInput(barrier);
    arm.emit(b, loc,
             llvm::formatv("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {0};",
                           config.panels() * panelBytes)
                 .str());
  }
  for (int64_t panel = 0; panel < config.panels(); ++panel) {
    AsmCall copy;
    copy.addInput(add(destination, i32(panel * panelBytes)));
    copy.addInput(tensorMap);
    for (Value coordinate : {i32(panel * 64), firstRow, kvHead, batch})
      copy.addInput(coordinate);
    copy.addInput(barrier);
    copy.emit(b, loc,
              "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
              "[$0], [$1, {$2, $3, $4, $5}], [$6];");
  }
}

Value SM90Emitter::blockOrdinal(Value keyTile) {
  return arith::SubIOp::create(b, loc, keyTile, keyLoopBegin);
}

std::tuple<Value, Value, Value> SM90Emitter::valueBuffer(Value ordinal) {
  Value second = cmpI(arith::CmpIPredicate::ne, arith::AndIOp::create(b, loc, ordinal, i32(1)),
                      i32(0));
  Value parity =
      arith::AndIOp::create(b, loc, arith::ShRSIOp::create(b, loc, ordinal, i32(1)), i32(1));
  return {select(second, secondValueAddress, valueAddress),
          select(second, secondValueBarrier, valueBarrier), parity};
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

void SM90Emitter::waitForKVBlock(flash::KVOperand operand) {
  if (!config.kvTensorMaps)
    return SM80Emitter::waitForKVBlock(operand);
  waitForPhase(operand == flash::KVOperand::Key ? keyBarrier : valueBarrier);
  // Every thread past its wait and done with the other buffer's last reads.
  NVVM::Barrier0Op::create(b, loc);
}

void SM90Emitter::skipKVBlock(Value next, Value upper) {
  if (!config.kvTensorMaps)
    return SM80Emitter::skipKVBlock(next, upper);
  waitForPhase(keyBarrier);
  // V's phase for this block completes without a copy.
  auto arrive = scf::IfOp::create(b, loc, isCopyThread, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(arrive.thenBlock()->getTerminator());
    AsmCall call;
    call.addInput(valueBarrier);
    call.emit(b, loc, "mbarrier.arrive.shared::cta.b64 _, [$0];");
  }
  NVVM::Barrier0Op::create(b, loc);
  auto more = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::slt, next, upper),
                                /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(more.thenBlock()->getTerminator());
  issueKVCopy(pipeline->keyLoad, next);
}
