//===- Wgmma.h - wgmma.mma_async and its descriptors ------------*- C++ -*-===//
//
// The wgmma instructions as the forward (Wgmma.cpp) and the backward
// (BackwardWgmma.cpp) issue them. A warpgroup issues them together;
// accumulators and register operands are tied through `wgmma.fence` and
// `wgmma.wait_group` (inline-asm operands), so LLVM orders every write to
// them before the fence and every read after the wait, which is the
// contract of the asynchronous instruction.
//
// Descriptors (64 bit): start address >> 4 (bits 0-13), leading byte
// offset >> 4 (16-29), stride byte offset >> 4 (32-45), layout type 1 =
// 128-byte swizzle (62-63). On tiles stored as 64-column panels of
// 128-byte rows (SharedMemory.cpp):
//   K-major (the reduction dimension contiguous): LBO 16, SBO 1024 (8-row
//     groups); a k16 step moves 32 bytes inside the row, the next 64
//     columns are the next panel.
//   MN-major (M or N contiguous, "transposed"): 8 k-rows of 128 bytes, SBO
//     1024 (8-row groups), LBO the panel stride (the next 64 of M or N).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_CONVERSION_FLASHTOSM90_WGMMA_H
#define FLASHC_LIB_CONVERSION_FLASHTOSM90_WGMMA_H

#include "flashc/Conversion/FlashToNVVM/EmitterCore.h"

namespace flashc::sm90::wgmma {

/// A 128-byte-swizzle matrix descriptor for the operand at `address` (i64
/// shared address) + `offset` bytes with leading/stride byte offsets
/// `lbo`/`sbo`.
mlir::Value descriptor(lowering::EmitterCore &e, mlir::Value address,
                       int64_t offset, int64_t lbo, int64_t sbo);
/// `wgmma.fence`, with `regs` (accumulators, register A operands) passed
/// through so that every write to them is ordered before it.
llvm::SmallVector<mlir::Value> fence(lowering::EmitterCore &e,
                                     llvm::ArrayRef<mlir::Value> regs);

/// The operands of one wgmma.mma_async: A from shared memory (`aDescriptor`,
/// MN-major when `transposeA`) or from four registers (`aRegs`, 16-bit
/// pairs); B from shared memory (MN-major when `transposeB`).
struct MmaOperands {
  mlir::Value aDescriptor;
  llvm::ArrayRef<mlir::Value> aRegs;
  mlir::Value bDescriptor;
  bool transposeA = false, transposeB = false;
};
/// One wgmma.mma_async m64nNk16 (N = 2·|result|) into f32 accumulators:
/// `acc` empty starts from zero (scale-d = 0).
llvm::SmallVector<mlir::Value> mma(lowering::EmitterCore &e, int64_t n,
                                   llvm::ArrayRef<mlir::Value> acc,
                                   const MmaOperands &operands);
/// wgmma.commit_group: closes the group of the wgmmas issued since the
/// last one; `regs` are returned as they are (still in flight).
llvm::SmallVector<mlir::Value> commit(lowering::EmitterCore &e,
                                      llvm::ArrayRef<mlir::Value> regs);
/// wgmma.wait_group `pending`: returns `regs` tied through the wait,
/// readable or reusable from here on when their group is no longer among
/// the `pending` most recent.
llvm::SmallVector<mlir::Value> wait(lowering::EmitterCore &e, int64_t pending,
                                    llvm::ArrayRef<mlir::Value> regs);

/// A·Bᵀ over the head dim, both operands K-major panels of rows x D: A the
/// 64 rows at `a` (i64 shared address) of a tile of `aRows` rows, B the `n`
/// rows at `b` of a tile of `bRows` rows. Fenced, issued and committed: the
/// m64nN accumulators in flight.
llvm::SmallVector<mlir::Value> productOverHeadDim(lowering::EmitterCore &e, mlir::Value a,
                                                  int64_t aRows, mlir::Value b,
                                                  int64_t bRows, int64_t n);

/// Byte offset of 16-byte chunk `chunk` (of the row's D/8) of row `row` of a
/// tile of `rows` rows stored as 64-column panels of 128-byte rows, chunk c
/// at c xor (row mod 8) (SharedMemory.cpp).
mlir::Value panelChunkOffset(lowering::EmitterCore &e, mlir::Value row,
                             mlir::Value chunk, int64_t rows);
/// The byte step of `rowStep` rows in that layout, when it is one constant
/// (the swizzle phase, row mod 8, must not change).
std::optional<int64_t> panelRowStepBytes(int64_t rowStep);

} // namespace flashc::sm90::wgmma

#endif // FLASHC_LIB_CONVERSION_FLASHTOSM90_WGMMA_H
