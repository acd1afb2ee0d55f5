//===- SharedMemory.cpp - Swizzled tiles for wgmma -------------------------===//
//
// A rows x D tile is stored as P = ceil(D/64) panels (columns 64p..64p+63)
// of rows x 128 bytes; 16-byte chunk c of row r sits at chunk c xor (r mod 8)
// of its row: the 128-byte swizzle (Swizzle<3,4,3>) that wgmma descriptors
// with layout type 1 read, which spreads the 8 rows of a core matrix over all
// 32 banks. Panels start on 1024-byte boundaries (the swizzle repeats every
// 8 rows), so the base is rounded up to 1024 bytes.
//
// With kvTensorMaps, K and V come by TMA instead (TensorMemoryAccess.cpp).
// cp.async writes through the generic proxy and wgmma reads through the
// async proxy: after a copy completes, `fence.proxy.async.shared::cta`
// makes it visible to the tensor cores before the CTA barrier.
//
//===----------------------------------------------------------------------===//

#include "InlineAsm.h"
#include "SM90Emitter.h"
#include "Wgmma.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;

static void inlineAsm(OpBuilder &b, Location loc, StringRef text) {
  AsmCall().emit(b, loc, text);
}

void SM90Emitter::emitSharedMemoryLayout() {
  auto sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), 3);
  Type i64Type = b.getI64Type();
  Value raw = LLVM::PtrToIntOp::create(b, loc, i64Type, sharedMemoryBase(/*alignment=*/1024));
  Value aligned = arith::AndIOp::create(b, loc, add(raw, i64(1023)), i64(~int64_t(1023)));
  Value base = LLVM::IntToPtrOp::create(b, loc, sharedPtr, aligned);
  smemQ = gepBytes(base, i32(hopper.qSmemOffset()));
  smemK = gepBytes(base, i32(hopper.kSmemOffset()));
  smemV = gepBytes(base, i32(hopper.vSmemOffset()));

  sharedBase = aligned;
  assignSharedAddresses(aligned);
  if (hopper.kvTensorMaps)
    initializeBarriers(aligned);
}

void SM90Emitter::assignSharedAddresses(Value aligned) {
  Value warpgroup = arith::ShRUIOp::create(b, loc, warp, i32(2));
  queryTileAddress = add(aligned, i64(hopper.qSmemOffset()));
  queryAddress = add(queryTileAddress, toI64(mul(warpgroup, i32(64 * 128))));
  keyAddress = add(aligned, i64(hopper.kSmemOffset()));
  valueAddress = add(aligned, i64(hopper.vSmemOffset()));
  if (hopper.kvTensorMaps)
    assignBarriers(aligned);
}

SM90Emitter::RematerializedAddresses::RematerializedAddresses(SM90Emitter &emitter)
    : emitter(emitter),
      saved{emitter.queryTileAddress, emitter.queryAddress, emitter.keyAddress,
            emitter.valueAddress,     emitter.keyBarrier,   emitter.valueBarrier,
            emitter.keyEmpty,         emitter.valueEmpty,   emitter.queryFull,
            emitter.queryEmpty} {
  AsmCall copy;
  copy.addOutputs(emitter.b.getI64Type(), 1);
  copy.addInput(emitter.sharedBase);
  emitter.assignSharedAddresses(copy.emit(emitter.b, emitter.loc, "mov.b64 $0, $1;").front());
}

SM90Emitter::RematerializedAddresses::~RematerializedAddresses() {
  std::tie(emitter.queryTileAddress, emitter.queryAddress, emitter.keyAddress,
           emitter.valueAddress, emitter.keyBarrier, emitter.valueBarrier, emitter.keyEmpty,
           emitter.valueEmpty, emitter.queryFull, emitter.queryEmpty) = saved;
}

Value wgmma::panelChunkOffset(EmitterCore &e, Value row, Value chunk, int64_t rows) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value panel = arith::ShRUIOp::create(b, loc, chunk, e.i32(3));
  Value column = arith::AndIOp::create(b, loc, chunk, e.i32(7));
  Value swizzled =
      arith::XOrIOp::create(b, loc, column, arith::AndIOp::create(b, loc, row, e.i32(7)));
  return e.add(e.add(e.mul(panel, e.i32(rows * 128)), e.mul(row, e.i32(128))),
               e.mul(swizzled, e.i32(16)));
}

std::optional<int64_t> wgmma::panelRowStepBytes(int64_t rowStep) {
  if (rowStep % 8)
    return std::nullopt;
  return rowStep * 128;
}

Value SM90Emitter::sharedChunkOffset(Value row, Value chunk, int64_t rows) {
  return wgmma::panelChunkOffset(*this, row, chunk, rows);
}

std::optional<int64_t> SM90Emitter::sharedRowStepBytes(int64_t rowStep) {
  return wgmma::panelRowStepBytes(rowStep);
}

void SM90Emitter::waitForCopies(int64_t pendingGroups) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, pendingGroups);
  inlineAsm(b, loc, "fence.proxy.async.shared::cta;");
  NVVM::Barrier0Op::create(b, loc);
}
