//===- SM90Emitter.h - The Hopper (wgmma) kernel emitter --------*- C++ -*-===//
//
// flash-to-sm90 reuses flash-to-sm80's per-thread walk (SM80Emitter: the
// kernel skeleton, scalars, regions, softmax, the K/V copy schedule, the
// stores) and overrides the parts Hopper does differently: the shared-memory
// layout (128-byte swizzled panels) and the two GEMMs (wgmma.mma_async).
//
// A warpgroup (4 warps, 128 threads) owns 64 query rows; warp i of it owns
// rows 16i..16i+15 exactly as with 16 rows per warp on sm80, because the
// m64nNk16 accumulator of wgmma is, per warp, the m16n8 mma.sync layout
// repeated over N: register 4·nt + e holds row g + 8·(e >= 2), column
// 8·nt + 2t + e%2 (g = lane/4, t = lane%4).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_CONVERSION_FLASHTOSM90_SM90EMITTER_H
#define FLASHC_LIB_CONVERSION_FLASHTOSM90_SM90EMITTER_H

#include "../FlashToSM80/SM80Emitter.h"

namespace flashc::sm90 {

class SM90Emitter : public sm80::SM80Emitter {
public:
  using SM80Emitter::SM80Emitter;

  llvm::StringRef passName() const override { return "flash-to-sm90"; }

  // SharedMemory.cpp
  void emitSharedMemoryLayout() override;
  mlir::Value sharedChunkOffset(mlir::Value row, mlir::Value chunk, int64_t rows) override;
  std::optional<int64_t> sharedRowStepBytes(int64_t rowStep) override;
  void waitForCopies(int64_t pendingGroups) override;

  // TensorMemoryAccess.cpp (K and V by TMA when config.kvTensorMaps).
  void issueKVCopy(flash::LoadKVOp op, mlir::Value keyTile) override;
  void waitForKVBlock(flash::KVOperand operand) override;
  void skipKVBlock(mlir::Value next, mlir::Value upper) override;
  bool acquireQueryBeforeLoop() override {
    return config.kvTensorMaps || SM80Emitter::acquireQueryBeforeLoop();
  }

  // Wgmma.cpp
  mlir::LogicalResult lowerQKDot(flash::QKDotOp op) override;
  mlir::LogicalResult lowerAccumulate(mlir::Operation *op, mlir::Value acc, mlir::Value alpha,
                                      mlir::Value probs, mlir::Value value) override;

private:
  /// Shared-space byte addresses (i64) of the Q tile of this thread's
  /// warpgroup, of the K and of the V buffer.
  mlir::Value queryAddress, keyAddress, valueAddress;
  /// With kvTensorMaps: the mbarriers the K and V copies complete on
  /// (32-bit shared addresses) and "this thread issues the copies".
  mlir::Value keyBarrier, valueBarrier, isCopyThread;

  /// Thread 0 initializes both mbarriers (one arrival per phase); the CTA
  /// synchronizes before anyone waits on them.
  void initializeBarriers(mlir::Value sharedBase);
  /// Waits until the phase of `barrier` for the current key block is
  /// complete (parity: key blocks since the loop's first, mod 2).
  void waitForPhase(mlir::Value barrier);

  /// A 128-byte-swizzle matrix descriptor for the operand at `address` +
  /// `offset` bytes with leading/stride byte offsets `lbo`/`sbo`.
  mlir::Value descriptor(mlir::Value address, int64_t offset, int64_t lbo, int64_t sbo);
  /// `wgmma.fence`, with `regs` (accumulators, register A operands) passed
  /// through so that every write to them is ordered before it.
  llvm::SmallVector<mlir::Value> fence(llvm::ArrayRef<mlir::Value> regs);
  /// One wgmma.mma_async m64nNk16 (N = 2·|result|) into f32 accumulators:
  /// `acc` empty starts from zero (scale-d = 0). A from shared memory
  /// (`aDescriptor`) or from four registers (`aRegs`).
  llvm::SmallVector<mlir::Value> mmaAsync(int64_t n, llvm::ArrayRef<mlir::Value> acc,
                                          mlir::Value aDescriptor,
                                          llvm::ArrayRef<mlir::Value> aRegs,
                                          mlir::Value bDescriptor, bool transposeB);
  /// wgmma.commit_group + wgmma.wait_group 0; returns the accumulators,
  /// readable from here on.
  llvm::SmallVector<mlir::Value> commitAndWait(llvm::ArrayRef<mlir::Value> acc);
};

} // namespace flashc::sm90

#endif // FLASHC_LIB_CONVERSION_FLASHTOSM90_SM90EMITTER_H
