//===- SM80Emitter.h - The mma.sync kernel emitter --------------*- C++ -*-===//
//
// flash-to-sm80 on the shared core (KernelEmitter): Br/R warps of R = 16 or
// 32 query rows; the Q tile and K/V blocks in shared memory rows padded by
// 16 bytes so that the 8 row addresses of an ldmatrix fall into 8 distinct
// groups of 4 banks (SharedMemory.cpp); both GEMMs on mma.sync.m16n8k16
// with fragments from ldmatrix, P from registers (MMA.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_CONVERSION_FLASHTOSM80_SM80EMITTER_H
#define FLASHC_LIB_CONVERSION_FLASHTOSM80_SM80EMITTER_H

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

namespace flashc::sm80 {

/// ldmatrix.sync.aligned.m8n8.x4(.trans).b16 at `smemAddress` (this lane's
/// row address): four i32 registers.
std::array<mlir::Value, 4> ldmatrixX4(lowering::EmitterCore &emitter, mlir::Value smemAddress,
                                      bool transpose);
/// mma.sync.aligned.m16n8k16.row.col.f32 of the emitter's element type:
/// A four i32, B two i32, C four f32 (layouts in MMA.cpp).
std::array<mlir::Value, 4> mmaSync(lowering::EmitterCore &emitter, llvm::ArrayRef<mlir::Value> a,
                                   llvm::ArrayRef<mlir::Value> bFrag,
                                   llvm::ArrayRef<mlir::Value> c);

/// The padded shared-memory layout: Q, then K, then V, rows of D + 8
/// elements.
struct PaddedLayout {
  explicit PaddedLayout(const lowering::KernelConfig &config) : config(config) {}
  int64_t rowBytes() const { return (config.headDim + 8) * 2; }
  int64_t qOffset() const { return 0; }
  int64_t kOffset() const { return config.br * rowBytes(); }
  int64_t vOffset() const { return kOffset() + config.bc * rowBytes(); }
  int64_t sharedBytes() const { return vOffset() + config.bc * rowBytes(); }

  const lowering::KernelConfig &config;
};

class SM80Emitter : public lowering::KernelEmitter {
public:
  using KernelEmitter::KernelEmitter;

  llvm::StringRef passName() const override { return "flash-to-sm80"; }
  int64_t dynamicSharedBytes() const override { return PaddedLayout(config).sharedBytes(); }
  /// Two copies of the score loop spill (document at D = 64 on sm_80,
  /// key_padding at D = 64 on sm_90a, ptxas -v): summary-full tiles keep
  /// the predicate, summary-empty ones are still skipped.
  bool unmasksSummaryFullTiles() const override { return false; }
  bool predicatesMaskKeyLoads() const override { return false; }

  // SharedMemory.cpp
  void emitSharedMemoryLayout() override;
  mlir::Value sharedChunkOffset(mlir::Value row, mlir::Value chunk, int64_t rows) override;
  std::optional<int64_t> sharedRowStepBytes(int64_t rowStep) override;
  void loadQueryRegisters() override;

  // MMA.cpp
  mlir::LogicalResult lowerQKDot(flash::QKDotOp op) override;
  mlir::LogicalResult lowerAccumulate(mlir::Operation *op, mlir::Value acc, mlir::Value alpha,
                                      mlir::Value probs, mlir::Value value) override;

private:
  /// Q fragment of row block mb at k-step kStep: from registers, or by
  /// ldmatrix at `qBase` (smemQ + qLdOffset).
  std::array<mlir::Value, 4> queryFragment(mlir::Value qBase, int64_t mb, int64_t kStep);

  /// Per-lane byte offsets of ldmatrix row addresses.
  mlir::Value qLdOffset, kLdOffset, vLdOffset;
  /// With q-in-registers, once acquired: the Q fragments
  /// ([rowBlocks][D/16][4] i32, flattened row block major).
  llvm::SmallVector<std::array<mlir::Value, 4>> queryFragments;
};

} // namespace flashc::sm80

#endif // FLASHC_LIB_CONVERSION_FLASHTOSM80_SM80EMITTER_H
