//===- Passes.h - flash to sm90 (wgmma) lowering ----------------*- C++ -*-===//
#ifndef FLASHC_CONVERSION_FLASHTOSM90_PASSES_H
#define FLASHC_CONVERSION_FLASHTOSM90_PASSES_H

#include "flashc/Conversion/FlashToSM80/Passes.h"

#include <cstdint>

namespace flashc {

/// Whether a warp-specialized tile with `blockCols` key columns at head dim
/// `headDim` can run on a persistent grid: at D = 256 the consumers'
/// registers (240, 128 of them the accumulator) leave room for the tile
/// loop only up to Bc = 64; above, the pass builds one CTA per tile.
inline bool persistentGridFits(int64_t headDim, int64_t blockCols) {
  return headDim <= 128 || blockCols <= 64;
}

#define GEN_PASS_DECL
#include "flashc/Conversion/FlashToSM90/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashc/Conversion/FlashToSM90/Passes.h.inc"

} // namespace flashc

#endif // FLASHC_CONVERSION_FLASHTOSM90_PASSES_H
