//===- WarpSpecialization.cpp - A producer warpgroup for K/V ---------------===//
//
// With hopper.warpSpecialized the CTA is Br/64 consumer warpgroups plus one
// producer warpgroup (the last). Every thread runs the kernel's prologue (Q
// copied and published, barriers initialized); at the key loop the CTA
// splits (on a persistent grid it splits once, before its loop over tiles,
// and the producer loops over every tile's key range: PersistentGrid.cpp):
//
//   producer:  setmaxnreg.dec 24 (40); one thread loops over the key range:
//                wait K slot empty, arm + TMA K(j); wait V slot empty,
//                arm + TMA V(j); then the warpgroup exits.
//   consumers: setmaxnreg.inc R; the deferred loop of DeferredAccumulate.cpp,
//              which waits on the slots' full barriers and releases each
//              slot (one arrival per consumer thread) once its GEMM is done:
//              K(j) after S(j) is waited for, V(j) after P·V(j).
//
// K and V each have two slots; slot o mod 2 holds block ordinal o, and the
// producer waits for the phase (o / 2 - 1) of its empty barrier, i.e. parity
// (o / 2 mod 2) xor 1, which a fresh barrier reports complete for o < 2.
// Nothing else is shared after the split, so the consumers need no CTA
// barrier inside the loop.
//
// Ping-pong (two or three consumer warpgroups): warpgroup w issues Q·Kᵀ and
// P·V only after warpgroup w - 1 has issued its own (bar.sync 1 + w, with
// w - 1's bar.arrive), so the tensor cores take the warpgroups' GEMMs in
// turn and one's softmax runs under the others' GEMMs. On a persistent
// grid the turns run on across tiles: warpgroup 0 starts the next tile's
// GEMMs as soon as the last warpgroup has issued its last ones, under that
// warpgroup's final P·V, finalize and store.
//
// Registers: the kernel starts capped at 64K / threads (nvvm.maxnreg, which
// setmaxnreg needs) and launches with cap x threads registers; the producer
// gives all but 24 back (40 for a persistent grid's tile loop up to D = 128)
// and the consumers take what that frees, at most 240 each (240 after 24,
// 232 after 40; with one consumer warpgroup the cap is already 248 and the
// consumers keep it). setmaxnreg.inc draws on the registers the CTA was
// launched with, not the whole file: asking for more blocks for ever.
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

namespace {
constexpr int64_t kRegisterFile = 64 * 1024;
// The producer's registers: 24 for one tile's K/V loop; the persistent
// producer's tile loop (decode, Q copy, key-range scan) needs more.
constexpr int64_t kProducerRegisters = 24;
constexpr int64_t kPersistentProducerRegisters = 40;
// A paged cache's producer warpgroup gathers the block a sequence ends in
// by cp.async: below 56 ptxas spills there (page 16, D = 128).
constexpr int64_t kPagedProducerRegisters = 56;
constexpr int64_t kMaxConsumerRegisters = 240;
} // namespace

static void setMaxRegisters(OpBuilder &b, Location loc, StringRef direction, int64_t count) {
  AsmCall().emit(b, loc,
                 llvm::formatv("setmaxnreg.{0}.sync.aligned.u32 {1};", direction, count).str());
}

LogicalResult SM90Emitter::enterKeyLoop(scf::ForOp loop, const lowering::KVPipeline &state) {
  if (!hopper.warpSpecialized)
    return success();
  if (queryLoad && !queryAcquired)
    return error(loop, "a warp-specialized kernel must load Q before its key loop");
  // Persistent: the CTA split before its loop over tiles (PersistentGrid.cpp).
  if (!hopper.persistent) {
    // Everything shared by all threads (Q above all) must be done before
    // the producer leaves.
    if (b.getInsertionBlock()->getParentOp() != func.getOperation())
      return error(loop, "a warp-specialized key loop must be at the kernel's top level");
    splitWarpgroups([&] { emitProducerLoop(state); });
  }
  if (hopper.pingPong) {
    consumerWarpgroup = arith::DivUIOp::create(b, loc, tid, i32(128));
    // Persistent: the turns run on from tile to tile (opened once, before
    // the first: openGemmTurns).
    if (hopper.persistent)
      return success();
    // Warpgroup 0 goes first: the last one opens its barrier.
    int64_t last = hopper.consumerThreads() / 128 - 1;
    Value opens = arith::AndIOp::create(
        b, loc, cmpI(arith::CmpIPredicate::eq, consumerWarpgroup, i32(last)),
        cmpI(arith::CmpIPredicate::slt, keyLoopBegin, keyLoopEnd));
    auto branch = scf::IfOp::create(b, loc, opens, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(branch.thenBlock()->getTerminator());
    arriveAtTurnBarrier(i32(1));
  }
  return success();
}

int64_t SM90Emitter::producerRegisters() const {
  // A paged cache's producer warpgroup gathers a block by cp.async.
  if (flash::KernelOp(kernel).getPagedKvAttr())
    return kPagedProducerRegisters;
  // At D = 256 the consumers need all 240 (their accumulator alone is 128).
  if (!hopper.persistent || config.headDim > 128)
    return kProducerRegisters;
  return kPersistentProducerRegisters;
}

void SM90Emitter::splitWarpgroups(function_ref<void()> producerWork) {
  sm90::splitWarpgroups(b, loc, func, tid, config.numThreads, hopper.consumerThreads(),
                        producerRegisters(), producerWork);
}

void sm90::splitWarpgroups(OpBuilder &b, Location loc, LLVM::LLVMFuncOp func, Value tid,
                           int64_t threads, int64_t consumerThreads, int64_t producerRegisters,
                           function_ref<void()> producerWork) {
  int64_t entryRegisters = std::min<int64_t>(kRegisterFile / threads, 255) / 8 * 8;
  // setmaxnreg.inc takes registers from what the CTA was launched with
  // (entry cap x threads), not from the whole register file: asking for
  // more than the producer gave back blocks the consumers for ever.
  int64_t consumerRegisters =
      std::min(kMaxConsumerRegisters,
               (entryRegisters * threads - producerRegisters * (threads - consumerThreads)) /
                   consumerThreads / 8 * 8);
  func->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(), b.getI32IntegerAttr(entryRegisters));

  Region *body = b.getInsertionBlock()->getParent();
  auto *producer = new Block(), *consumer = new Block();
  body->push_back(producer);
  body->push_back(consumer);
  Value isProducer = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, tid,
                                           arith::ConstantIntOp::create(b, loc, consumerThreads, 32));
  LLVM::CondBrOp::create(b, loc, isProducer, producer, ValueRange{}, consumer, ValueRange{});

  b.setInsertionPointToStart(producer);
  setMaxRegisters(b, loc, "dec", producerRegisters);
  producerWork();
  LLVM::ReturnOp::create(b, loc, ValueRange{});

  b.setInsertionPointToStart(consumer);
  // .inc may only raise the count: one consumer warpgroup already starts
  // with more than the cap.
  if (consumerRegisters > entryRegisters)
    setMaxRegisters(b, loc, "inc", consumerRegisters);
}

void SM90Emitter::openGemmTurns() {
  if (!hopper.pingPong)
    return;
  int64_t last = hopper.consumerThreads() / 128 - 1;
  auto branch = scf::IfOp::create(
      b, loc,
      cmpI(arith::CmpIPredicate::eq, arith::DivUIOp::create(b, loc, tid, i32(128)), i32(last)),
      /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(branch.thenBlock()->getTerminator());
  arriveAtTurnBarrier(i32(1));
}

void SM90Emitter::waitForGemmTurn() {
  if (!hopper.pingPong)
    return;
  AsmCall sync;
  sync.addInput(add(consumerWarpgroup, i32(1)));
  sync.emit(b, loc, "bar.sync $0, 256;");
}

void SM90Emitter::passGemmTurn(Value iteration) {
  if (!hopper.pingPong)
    return;
  int64_t consumers = hopper.consumerThreads() / 128;
  Value next = add(arith::RemUIOp::create(b, loc, add(consumerWarpgroup, i32(1)), i32(consumers)),
                   i32(1));
  // Persistent: every turn is passed on, the next tile's first GEMMs take
  // the last one; the last warpgroup's final arrival is still pending when
  // the CTA exits (FA3's persistent kernels end the same way; gpu-check
  // runs such kernels with more tiles than CTAs). Otherwise every turn but the last
  // warpgroup's last, so that every barrier ends complete.
  if (hopper.persistent)
    return arriveAtTurnBarrier(next);
  Value passes = arith::OrIOp::create(
      b, loc, cmpI(arith::CmpIPredicate::ne, consumerWarpgroup, i32(consumers - 1)),
      cmpI(arith::CmpIPredicate::ne, add(iteration, i32(1)), keyLoopEnd));
  auto branch = scf::IfOp::create(b, loc, passes, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(branch.thenBlock()->getTerminator());
  arriveAtTurnBarrier(next);
}

void SM90Emitter::arriveAtTurnBarrier(Value id) {
  AsmCall arrive;
  arrive.addInput(id);
  arrive.emit(b, loc, "bar.arrive $0, 256;");
}

void SM90Emitter::emitProducerLoop(const lowering::KVPipeline &state) {
  // Over a paged cache the whole producer warpgroup loops (it gathers the
  // block a sequence ends in; fullBarrierArrivals counts it); otherwise its
  // first thread.
  Value producerThread = arith::SubIOp::create(b, loc, tid, i32(hopper.consumerThreads()));
  auto elected = scf::IfOp::create(
      b, loc, cmpI(arith::CmpIPredicate::ult, producerThread, i32(fullBarrierArrivals())),
      /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(elected.thenBlock()->getTerminator());
  emitKeyBlockCopies(state);
}

void SM90Emitter::issueProducerCopy(flash::LoadKVOp load, Value block, const Slot &slot) {
  if (!kernel.getPagedKvAttr()) {
    issueTensorCopy(load, block, slot.address, slot.full);
    return;
  }
  // The block a sequence ends in: the warpgroup gathers it (TMA boxes
  // would bring the stale rows past the end of its last page); any other:
  // the first thread's boxes (arrive.expect_tx) and every other thread's
  // own arrival, so that no phase completes before each producer thread
  // has passed its wait for the slot (a thread left a phase behind would
  // take a later completion for the one it waits for). Uniform over the
  // warpgroup: the block and the sequence's length are.
  auto lastOfSequence =
      scf::IfOp::create(b, loc, endsSequence(block), /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(lastOfSequence.thenBlock()->getTerminator());
  gatherLastPagedBlock(load, block, slot);
  b.setInsertionPoint(lastOfSequence.elseBlock()->getTerminator());
  Value isFirstThread = cmpI(arith::CmpIPredicate::eq, tid, i32(hopper.consumerThreads()));
  auto boxes = scf::IfOp::create(b, loc, isFirstThread, /*withElseRegion=*/true);
  b.setInsertionPoint(boxes.thenBlock()->getTerminator());
  issueTensorCopy(load, block, slot.address, slot.full);
  b.setInsertionPoint(boxes.elseBlock()->getTerminator());
  arriveOn(slot.full);
}

void SM90Emitter::emitKeyBlockCopies(const lowering::KVPipeline &state) {
  OpBuilder::InsertionGuard guard(b);
  // A walk carries the visible block of each position (the consumers walk
  // the same sequence).
  SmallVector<Value> carried;
  if (walk)
    carried.push_back(keyLoopFirstBlock);
  auto loop = scf::ForOp::create(b, loc, keyLoopBegin, keyLoopEnd, i32(1), carried);
  b.setInsertionPointToStart(loop.getBody());
  Value block = walk ? loop.getRegionIterArgs().front() : loop.getInductionVar();
  {
    RematerializedAddresses addresses(*this);
    Value ordinal = blockOrdinal(loop.getInductionVar());
    for (flash::LoadKVOp load : {state.keyLoad, state.valueLoad}) {
      Slot slot = kvSlot(load.getOperand(), ordinal);
      waitForPhase(slot.empty, arith::XOrIOp::create(b, loc, slot.parity, i32(1)));
      issueProducerCopy(load, block, slot);
    }
  }
  // The search for the next block runs while the copies fly (one thread:
  // block by block).
  if (walk)
    scf::YieldOp::create(
        b, loc, ValueRange{nextVisibleBlock(add(block, i32(1)), /*wholeWarp=*/false)});
}
