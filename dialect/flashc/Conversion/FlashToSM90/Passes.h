//===- Passes.h - flash to sm90 (wgmma) lowering ----------------*- C++ -*-===//
#ifndef FLASHC_CONVERSION_FLASHTOSM90_PASSES_H
#define FLASHC_CONVERSION_FLASHTOSM90_PASSES_H

#include "flashc/Conversion/FlashToNVVM/KernelModule.h"
#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/Pass.h"

#include <cstdint>

namespace flashc {

#define GEN_PASS_DECL
#include "flashc/Conversion/FlashToSM90/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashc/Conversion/FlashToSM90/Passes.h.inc"

namespace sm90 {
/// Lowers every flash.backward_kernel of `module` to its three kernels, the
/// main one on wgmma (lib/Conversion/FlashToSM90/BackwardWgmma.cpp), with
/// their #flash.launch. `deterministic`: dQ adds in key-block order;
/// `stageAuxGrads`: aux gradient adds staged per tile in shared memory;
/// `deferTurns` (with `deterministic`): a tile's dQ is added and its turn
/// passed on during the next tile; `queryGradWriter`: a warp beside the
/// body's adds the staged dQ tiles; `rotateQueryTiles` (without
/// `deterministic`): each key block's walk starts at its own query tile;
/// `overlapAccumulates`: the dKᵀ and dVᵀ products stay in flight until
/// their accumulators are read; `mergeBarriers`: which per-tile
/// barriers of the body merge (0 none, 1 dSᵀ's into the dQ writer's, 2
/// also the copies' acquire into the tile's first, 3 also three Q/dO
/// stages and no barrier at a tile's start; < 0: by head dim,
/// config::defaultBackwardBarrierMerge: 3 at D <= 64, else 2).
mlir::LogicalResult lowerBackwardKernels(mlir::ModuleOp module, bool deterministic = false,
                                         bool stageAuxGrads = false, bool deferTurns = false,
                                         bool queryGradWriter = false,
                                         bool rotateQueryTiles = false,
                                         bool overlapAccumulates = true,
                                         int64_t mergeBarriers = -1);
} // namespace sm90

} // namespace flashc

#endif // FLASHC_CONVERSION_FLASHTOSM90_PASSES_H
