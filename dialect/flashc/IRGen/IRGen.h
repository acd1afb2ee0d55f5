//===- IRGen.h - Lower checked .flash variants to flash IR ------*- C++ -*-===//
#ifndef FLASHC_IRGEN_IRGEN_H
#define FLASHC_IRGEN_IRGEN_H

#include "flashc/Frontend/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>

namespace flashc::frontend {

/// Compile-time choices that the source leaves open.
struct KernelOptions {
  int64_t blockRows = 0; // Br; 0 = defaultTile()
  int64_t blockCols = 0; // Bc; 0 = defaultTile()
  /// The head dim for variants whose D is symbolic (kDefaultHeadDim when
  /// unset); a fixed D in the source must agree with it when both are given.
  std::optional<int64_t> headDim;
  /// Default tiles for the wgmma (sm_90a) kernel instead of mma.sync's.
  bool wgmmaTiles = false;
  /// With wgmmaTiles: tiles for the warp-specialized kernel (two consumer
  /// warpgroups) where it is the faster one (D > 64).
  bool warpSpecializedTiles = false;
  /// The query length N the kernel is built for, when the tool knows it
  /// (--shape N=): short sequences keep the one-warpgroup tile.
  std::optional<int64_t> queryLength;
};

constexpr int64_t kDefaultHeadDim = 64;

/// Builds one `flash.kernel` per variant (or only `onlyVariant` when set)
/// into a new module. Errors (an unknown variant, no head dim, a head dim
/// that contradicts the source) go through `sourceMgr` like parse errors and
/// give a null module. The returned module has passed the verifier.
mlir::OwningOpRef<mlir::ModuleOp>
emitFlashIR(mlir::MLIRContext &context, const Module &module,
            const KernelOptions &options, llvm::SourceMgr &sourceMgr,
            llvm::StringRef onlyVariant = {});

/// The tile a variant gets when none is asked for: the fastest shipped
/// configuration of the mma.sync kernel per head dim, measured on an H200
/// (bench/results/2026-11-29-h200/tile-sweep-n4096.csv): Br = 128 with
/// Bc = 64 up to D = 128 (Bc = 32 when a mask or score mod needs registers
/// at D > 64, to stay free of spills; Bc = 64 with 16 rows per warp when it
/// also reads aux tensors), Br = Bc = 64 above. With `wgmma`, the tile of
/// the sm_90a kernel: 64x128 up to D = 64 (one warpgroup); above, 128x128
/// (128x80 at D = 256, 128x64 there when `queryLength` <= 1024) for the
/// warp-specialized kernel (`warpSpecialized`; up to D = 128 not for masked
/// variants with `queryLength` <= 512), else 64x64.
std::pair<int64_t, int64_t> defaultTile(const Variant &variant, int64_t headDim,
                                        bool wgmma = false, bool warpSpecialized = false,
                                        std::optional<int64_t> queryLength = std::nullopt);

/// The head dim a variant compiles with under `options`, or nullopt when
/// the source fixes one that contradicts `options.headDim`.
std::optional<int64_t> resolveHeadDim(const Variant &variant,
                                      const KernelOptions &options);

/// The scale as a number: the variant's constant expression or 1/sqrt(D).
double evaluateScale(const Variant &variant, int64_t headDim);

} // namespace flashc::frontend

#endif // FLASHC_IRGEN_IRGEN_H
