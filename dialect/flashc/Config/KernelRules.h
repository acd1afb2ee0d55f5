//===- KernelRules.h - Every rule that picks a kernel's configuration -*- C++ -*-===//
//
// The one place that says which kernel a variant gets when nobody asked for
// a particular one: the GEMM kind for a chip, the default tile, whether the
// wgmma kernel is warp-specialized, whether its grid is persistent, the
// mma.sync kernel's rows per warp and Q registers. The resolver
// (KernelConfig.h) applies them for the tools; the GPU lowerings apply the
// ones they decide from the IR (warp specialization, the persistent grid's
// fit, rows per warp). Each rule that a measurement set names its results
// folder under bench/results/; the numbers live there, not here.
//
// No MLIR: the rules see numbers and a summary of the variant.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONFIG_KERNELRULES_H
#define FLASHC_CONFIG_KERNELRULES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace flashc::config {

/// For one query row, the shape of the set of keys a boolean admits: the
/// same for every key (all or none), a prefix (j < e), a suffix (j > e),
/// an interval, or a union of pieces. The lattice both analyses of a mask
/// use: config::traitsOf on the AST and flash::keysMayComeInPieces on IR.
enum class KeySet { Row, Prefix, Suffix, Interval, Pieces };
KeySet intersectKeySets(KeySet x, KeySet y);
KeySet uniteKeySets(KeySet x, KeySet y);
KeySet negateKeySet(KeySet x);
/// `lhs - rhs` = c * j + r compared with 0 by < / <= (`below`) or > / >=
/// (`above`), c = lhsCoefficient - rhsCoefficient; other comparisons and
/// terms not linear in j (std::nullopt) are taken as one interval
/// (predicates on tensor elements at j: sorted document ids, key lengths).
KeySet comparisonKeySet(std::optional<int64_t> lhsCoefficient,
                        std::optional<int64_t> rhsCoefficient, bool below, bool above);

/// What the default-tile rules look at in a variant.
struct VariantTraits {
  bool masked = false;       // it has a mask
  bool scored = false;       // it has a score modification
  bool readsTensors = false; // it declares aux tensors
  /// The keys its mask admits may come in pieces (KeySet::Pieces), so whole
  /// key blocks inside the visible range can be empty.
  bool maskMayLeaveHoles = false;
  /// For one query row, the keys its mask admits (Row when unmasked).
  KeySet maskKeys = KeySet::Row;
  /// Every aux tensor element it reads is indexed by neither i nor j (a
  /// per-(b, h) value such as ALiBi's slopes[h] or kv_len[b]): one value
  /// per CTA, not one per score element.
  bool tensorReadsAreUniform = true;
  /// Its score modification adds a term free of s to s (s + f, s - f:
  /// ALiBi, a bias), so its derivative in s is 1.
  bool scoreIsBias = false;
};

/// A tile and why it was chosen (one phrase, for --verbose).
struct TileChoice {
  int64_t blockRows = 0, blockCols = 0;
  std::string why;
};

/// The GEMM kind ("mma.sync" or "wgmma") of `requested` ("auto",
/// "mma.sync" or "wgmma") on `chip`: auto is wgmma on sm_90a, mma.sync
/// elsewhere; wgmma needs sm_90a.
llvm::Expected<std::string> selectGemm(llvm::StringRef chip, llvm::StringRef requested);

/// Whether the default tile is the warp-specialized wgmma kernel's: wgmma,
/// K/V by TMA and warp specialization not off.
bool usesWarpSpecializedTiles(llvm::StringRef gemm, llvm::StringRef kvCopy,
                              llvm::StringRef warpSpecialize);

/// The backward kernel's tile for `gemmKind` ("wgmma" or "mma.sync"): Br
/// query rows per step of its inner loop, Bc keys per CTA (dK and dV of the
/// keys in registers: a warp per 16 keys, a warpgroup per 64 with wgmma),
/// in the default or the `deterministic` mode, for N = `queryLength` where
/// known; `queryGradAddsByDefault`: dQ is added as defaultQueryGradAdds
/// says (false where the caller chose how: --dq-writer either way,
/// --bwd-rotate-tiles, --defer-turns).
TileChoice defaultBackwardTile(int64_t headDim, llvm::StringRef gemmKind,
                               const VariantTraits &variant, bool deterministic = false,
                               std::optional<int64_t> queryLength = std::nullopt,
                               bool queryGradAddsByDefault = true);

/// How the backward adds dQ by default, where neither determinism nor an
/// order was asked for.
enum class QueryGradAdds {
  /// In any order, by the body's threads.
  AnyOrder,
  /// In any order, by the dQ writer warpgroup where it serves the tile
  /// (`query_grad_writer`).
  Writer,
  /// In the deterministic mode's key-block order, by the writer
  /// (`ordered_query_grads`).
  KeyBlockOrder,
};
/// The default for a variant at head dim `headDim`, for N = `queryLength`
/// where known: whichever measured fastest.
QueryGradAdds defaultQueryGradAdds(int64_t headDim, llvm::StringRef gemmKind,
                                   const VariantTraits &variant,
                                   std::optional<int64_t> queryLength = std::nullopt);

/// The column ranges of D the backward's main kernel splits dK, dV and dQ
/// into, one CTA each: 1 up to D = 128; above, dK and dV of a warp's keys
/// (2 · D/2 f32 registers on wgmma, 2 · D/4 on mma.sync, per 64 or 16 keys)
/// do not fit beside Sᵀ and dPᵀ, so each CTA keeps 128 columns of them and
/// recomputes Sᵀ and dPᵀ over the whole of D.
int64_t backwardColumnSlices(int64_t headDim);

/// How many of the wgmma backward's per-tile body barriers merge
/// (--bwd-merge-barriers) when none is asked for: level 3 (three Q/dO
/// stages, no barrier at a tile's start) at head dim <= 64, where it was
/// measured 0.6-2.5% faster than level 2 (H100, 2026-12-07m); level 2
/// above, where level 3 was 1-2% slower.
int64_t defaultBackwardBarrierMerge(int64_t headDim);

/// The tile a variant gets at head dim `headDim` when none is asked for.
/// `queryLength` is N when the tool knows it.
TileChoice defaultTile(const VariantTraits &variant, int64_t headDim, llvm::StringRef gemm,
                       bool warpSpecializedTiles, std::optional<int64_t> queryLength);

/// Query lengths up to this are decode steps (one token, or a few for
/// speculative decoding): the default kernel splits its keys and takes the
/// decode tile.
constexpr int64_t kDecodeMaxQueryLength = 16;
/// Whether the forward kernel splits its key range by default (split keys,
/// flash-decoding): for decode (N known, at most kDecodeMaxQueryLength),
/// where B·H query tiles leave most of the GPU idle.
bool splitKeysPays(std::optional<int64_t> queryLength);
/// Whether forward kernels of GQA variants pack the query heads of a KV
/// group into a tile's rows by default (packed GQA): for decode, where a
/// query head's few rows would leave the tile nearly empty and every head
/// of the group would read the same K and V again.
bool packHeadsPays(std::optional<int64_t> queryLength);

/// Whether a persistent grid is the default for query length N. Up to
/// N = 8192 for every variant (bench/results/2026-11-29-h200-persistent);
/// above, with the dynamic tile scheduler, for variants without aux tensors
/// (causal 16k 1.007x, unmasked 16k 0.99-1.09x one CTA per tile:
/// bench/results/2026-12-03b-h200-late-draw), not for those reading them
/// (packed documents at D = 128 were slower persistent: 0.4805 vs 0.4521 ms
/// at 16k). Unknown N keeps one CTA per tile.
bool persistentGridPays(std::optional<int64_t> queryLength, bool readsTensors);
/// The longest N at which variants with aux tensors take the persistent
/// grid by default (persistentGridPays).
constexpr int64_t kPersistentGridMaxQueryLengthWithTensors = 8192;
/// Whether a kernel gets the persistent grid the target asks for:
/// `persistent` for every kernel, `persistentWithTensors` too for one that
/// reads aux tensors (the resolver's why() and flash-to-sm90 alike).
bool persistentGridAsked(bool persistent, bool persistentWithTensors, bool readsTensors);
/// Whether a warp-specialized tile of `blockCols` key columns at head dim
/// `headDim` can run on a persistent grid: at D = 256 the consumers'
/// registers (240, 128 of them the accumulator) leave room for the tile
/// loop only up to Bc = 64.
bool persistentGridFits(int64_t headDim, int64_t blockCols);
/// Whether the wgmma kernel moves K/V blocks of `blockCols` keys out of a
/// paged cache of `page`-key pages by TMA: one box per page of the block
/// (or the block's rows of one page), which needs whole pages per block or
/// whole blocks per page, and pages of 8 rows or more (a box must start on
/// the 128-byte swizzle's 8-row period). Otherwise every thread gathers the
/// block by cp.async.
bool pagedBoxesFit(int64_t page, int64_t blockCols);
/// Whether the wgmma kernel's K/V copies (`kvCopy`: "tma" or "cp.async")
/// are TMA boxes: always for a dense or varlen kernel with kv-copy=tma, for
/// a paged one (`page` > 0) only where pagedBoxesFit.
bool kvCopiesByTma(llvm::StringRef kvCopy, int64_t page, int64_t blockCols);
/// Whether a variant's default tile may be the warp-specialized kernel's
/// (of `blockCols` keys per block): over a paged cache of `page` keys per
/// page (0: not paged) only where its blocks come by TMA boxes
/// (kvCopiesByTma; the producer warpgroup gathers the block a sequence
/// ends in) and D <= 128 (at D = 256 ptxas spills in the producer with
/// 16-key pages, and Bc = 80 nests with few pages). Paged prefill at
/// D = 128 measured 1.06-1.10x the dense kernel's time this way against
/// 1.32-1.47x with one warpgroup (H100, bench/results/2026-12-08-paged-ws).
bool warpSpecializationApplies(int64_t page, llvm::StringRef kvCopy, int64_t headDim,
                               int64_t blockCols);
/// Whether a warp-specialized kernel may run on the persistent grid at all:
/// not a varlen one that reads aux tensors (bound per tile there, it
/// spills: ptxas, D = 128), and not one over a paged cache (its whole
/// producer warpgroup gathers; the persistent grid's producer is one
/// thread). The resolver's why() and flash-to-sm90 alike.
bool persistentGridApplies(bool varlen, bool pagedKV, bool readsTensors);
/// The wgmma kernel's `warp-specialize=auto`: for tiles of two or more
/// consumer warpgroups (Br >= 128); one warpgroup of 64 rows keeps several
/// CTAs per SM without a producer (bench/results/2026-11-29-h200-ws). Over
/// a paged cache flash-to-sm90 also asks warpSpecializationApplies.
bool warpSpecializesByDefault(int64_t blockRows);
/// Ping-pong needs two or more consumer warpgroups.
bool pingPongApplies(int64_t blockRows);

/// The mma.sync kernel's rows per warp when none is asked for (16 or 32),
/// for a Br x Bc tile at head dim D; `plainScores`: no mask or score mod.
int64_t defaultRowsPerWarp(int64_t blockRows, int64_t blockCols, int64_t headDim,
                           bool plainScores);
/// The mma.sync kernel's q-in-registers=auto: keep the Q fragments when a
/// warp's share (rowBlocks m16 blocks of D columns) is small enough.
bool keepsQueryInRegisters(int64_t rowBlocks, int64_t headDim);

} // namespace flashc::config

#endif // FLASHC_CONFIG_KERNELRULES_H
