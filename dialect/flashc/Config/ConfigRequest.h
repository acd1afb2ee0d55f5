//===- ConfigRequest.h - The knobs of a kernel configuration ----*- C++ -*-===//
//
// Every knob a compilation can be asked for: from the command line
// (ConfigFlags.h), from a tuned winner (flashc/Tuning/Tuning.h), from a
// tuner candidate. A knob left unset is decided by the rules
// (KernelRules.h) when the resolver (KernelConfig.h) runs.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONFIG_CONFIGREQUEST_H
#define FLASHC_CONFIG_CONFIGREQUEST_H

#include <cstdint>
#include <optional>
#include <string>

namespace flashc::config {

struct ConfigRequest {
  /// The tile: Br query rows, Bc key rows.
  std::optional<int64_t> blockRows, blockCols;
  /// "auto", "mma.sync" or "wgmma".
  std::optional<std::string> gemm;
  /// The wgmma kernel's K/V copy: "tma" or "cp.async".
  std::optional<std::string> kvCopy;
  /// The wgmma kernel: "auto", "on" or "off".
  std::optional<std::string> warpSpecialize;
  /// The one-warpgroup wgmma kernel with TMA: P·V under the next softmax.
  std::optional<bool> overlapSoftmax;
  /// Warp-specialized tiles of two or more consumer warpgroups.
  std::optional<bool> pingPong;
  /// A one-warpgroup paged kernel's last block: "gather" or "tma".
  std::optional<std::string> pagedLastBlock;
  /// Warp-specialized tiles: a persistent grid.
  std::optional<bool> persistent;
  /// The mma.sync kernel: 16, 32 or 0 (auto).
  std::optional<int64_t> rowsPerWarp;
  /// Forward kernels whose key range may be split at run time
  /// (flash-decoding; the launch picks the split count).
  std::optional<bool> splitKeys;
  /// Forward kernels of GQA variants that pack the query heads of one KV
  /// group into a tile's rows (packed GQA).
  std::optional<bool> packHeads;
  /// The page of the paged K/V caches whose variants give none (--paged).
  /// A property of the caller's cache, not a tuning knob: empty() ignores it.
  std::optional<int64_t> pageSize;
  /// The backward kernels' tile (--bwd-tile), apart from the forward's.
  /// Not a knob of the forward: it leaves the forward's tuned lookup alone.
  std::optional<int64_t> backwardBlockRows, backwardBlockCols;
  /// Backward kernels whose mask reads aux tensors read a run-time block
  /// summary of their own tiling (--bwd-block-summary, on by default). Not
  /// a tuning knob either.
  bool backwardBlockSummary = true;
  /// The backward adds dQ in a fixed order (--deterministic): its default
  /// tile at D <= 64 differs. Not a tuning knob: tuned tiles are the
  /// default mode's.
  bool deterministicBackward = false;
  /// The backward may add dQ in the deterministic order, or by the dQ
  /// writer in any order, where config::defaultQueryGradAdds says it is
  /// faster (off where the caller chose how dQ is added: --dq-writer,
  /// --defer-turns, --bwd-rotate-tiles). Not a tuning knob.
  bool queryGradAddsByDefault = true;

  /// Whether any knob is set (then no tuned winner replaces them).
  bool empty() const {
    return !blockRows && !blockCols && !gemm && !kvCopy && !warpSpecialize &&
           !overlapSoftmax && !pingPong && !pagedLastBlock && !persistent && !rowsPerWarp && !splitKeys &&
           !packHeads;
  }
};

} // namespace flashc::config

#endif // FLASHC_CONFIG_CONFIGREQUEST_H
