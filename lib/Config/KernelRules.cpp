//===- KernelRules.cpp - Every rule that picks a kernel's configuration ---===//
//
// The measurements behind each rule are in the bench/results/ folder its
// comment names (tables with the peers of the same run).
//
//===----------------------------------------------------------------------===//

#include "flashc/Config/KernelRules.h"

using namespace flashc;
using namespace flashc::config;

llvm::Expected<std::string> config::selectGemm(llvm::StringRef chip, llvm::StringRef requested) {
  bool hasWgmma = chip == "sm_90a";
  if (requested == "auto")
    return std::string(hasWgmma ? "wgmma" : "mma.sync");
  if (requested == "mma.sync")
    return requested.str();
  if (requested == "wgmma") {
    if (!hasWgmma)
      return llvm::createStringError("wgmma needs --arch=sm_90a, not " + chip);
    return requested.str();
  }
  return llvm::createStringError("unknown GEMM kind '" + requested +
                                 "' (expected auto, mma.sync or wgmma)");
}

bool config::usesWarpSpecializedTiles(llvm::StringRef gemm, llvm::StringRef kvCopy,
                                      llvm::StringRef warpSpecialize) {
  return gemm == "wgmma" && kvCopy == "tma" && warpSpecialize != "off";
}

TileChoice config::defaultTile(const VariantTraits &variant, int64_t headDim,
                               llvm::StringRef gemm, bool warpSpecializedTiles,
                               std::optional<int64_t> queryLength) {
  if (gemm == "wgmma") {
    // Decode (a few query rows, the keys split over many CTAs): the
    // smallest wgmma tile, Br = 64, and one warpgroup; the K/V stream, not
    // the GEMMs, bounds the kernel.
    if (queryLength && *queryLength <= kDecodeMaxQueryLength)
      return {64, headDim <= 128 ? 128 : 64,
              "decode tile (N <= " + std::to_string(kDecodeMaxQueryLength) +
                  "): one warpgroup of 64 rows"};
    // Above D = 64, two consumer warpgroups and a producer
    // (bench/results/2026-11-29-h200-ws). Up to D = 128, short masked
    // queries (N <= 512) stay with several 64-row CTAs per SM, whose
    // prologues and epilogues overlap; elsewhere the persistent grid
    // overlaps them (bench/results/2026-11-29-h200-persistent).
    bool shortMaskedQueries =
        queryLength && *queryLength <= 512 && variant.masked && headDim <= 128;
    // Masks whose keys come in pieces walk their visible blocks in every
    // kernel, the warp-specialized one included (KernelEmitter::walk). Up
    // to D = 128 the one-warpgroup 64 x 64 walk is the fastest on sink +
    // window: 1.53-1.88x the warp-specialized 128 x 128 at D = 128 and
    // 1.11-1.21x the 64 x 128 at D = 64, N = 8k-32k: a narrow band of
    // visible keys computes fewer empty elements in smaller tiles
    // (bench/results/2026-12-02-h200-walk/sink-tiles.csv).
    if (variant.maskMayLeaveHoles && headDim <= 128)
      return {64, 64, "one-warpgroup wgmma tile: the mask's keys may come in pieces (the 64 x 64 "
                      "walk over visible blocks was fastest on sink + window)"};
    if (warpSpecializedTiles && headDim > 64 && !shortMaskedQueries) {
      // Reads of aux tensors in a mask or score mod need registers of their
      // own: a narrower Bc keeps them free of spills.
      if (headDim > 128) {
        if (variant.readsTensors)
          return {128, 32, "warp-specialized wgmma tile at D = 256; Bc = 32 because the "
                           "variant reads aux tensors (no spills)"};
        // The walk over visible blocks (keys in pieces) needs registers of
        // its own: Bc = 80 spills 32 bytes there (ptxas -v), 64 none.
        if (variant.maskMayLeaveHoles)
          return {128, 64, "warp-specialized wgmma tile at D = 256; Bc = 64 because the mask's "
                           "keys may come in pieces (the walk over visible blocks, no spills)"};
        // N <= 1024: Bc = 64, the widest tile whose consumers still fit the
        // persistent grid's tile loop in 240 registers; the grid's overlap
        // of one tile's epilogue with the next tile's loads matters most
        // for short queries.
        if (queryLength && *queryLength <= 1024)
          return {128, 64, "warp-specialized wgmma tile at D = 256 with N <= 1024: Bc = 64 "
                           "fits the persistent grid"};
        return {128, 80, "warp-specialized wgmma tile at D = 256"};
      }
      if (variant.readsTensors)
        return {128, 96, "warp-specialized wgmma tile above D = 64; Bc = 96 because the "
                         "variant reads aux tensors (no spills)"};
      return {128, 128, "warp-specialized wgmma tile above D = 64"};
    }
    // Otherwise one warpgroup per CTA and several CTAs per SM, whose GEMMs
    // and softmax interleave (bench/results/2026-11-29-h200-sm90); at
    // D = 64 also ahead of the warp-specialized 128x128.
    std::string why = "one-warpgroup wgmma tile";
    if (headDim <= 64)
      return {64, 128, why + " up to D = 64"};
    if (!warpSpecializedTiles)
      why += " (warp specialization off, K/V not by TMA, or a paged cache of pages that do "
            "not nest with the key blocks or D > 128)";
    else
      why += " (masked, N <= 512)";
    return {64, 64, why};
  }
  // mma.sync (bench/results/2026-11-29-h200/tile-sweep-n4096.csv).
  if (headDim <= 64)
    return {128, 64, "mma.sync tile up to D = 64"};
  if (headDim <= 128) {
    // Masks and score mods need registers of their own; reads of aux
    // tensors need more still, and go to 16 rows per warp with Bc = 64.
    if (!variant.masked && !variant.scored)
      return {128, 64, "mma.sync tile up to D = 128 without a mask or score mod"};
    if (variant.readsTensors)
      return {128, 64, "mma.sync tile up to D = 128 reading aux tensors"};
    return {128, 32, "mma.sync tile up to D = 128 with a mask or score mod (no spills)"};
  }
  return {64, 64, "mma.sync tile above D = 128"};
}

bool config::splitKeysPays(std::optional<int64_t> queryLength) {
  return queryLength && *queryLength <= kDecodeMaxQueryLength;
}

bool config::packHeadsPays(std::optional<int64_t> queryLength) {
  return queryLength && *queryLength <= kDecodeMaxQueryLength;
}

bool config::persistentGridPays(std::optional<int64_t> queryLength, bool readsTensors) {
  return queryLength && (*queryLength <= kPersistentGridMaxQueryLengthWithTensors || !readsTensors);
}

bool config::persistentGridAsked(bool persistent, bool persistentWithTensors, bool readsTensors) {
  return persistent && (persistentWithTensors || !readsTensors);
}

bool config::pagedBoxesFit(int64_t page, int64_t blockCols) {
  if (page < 8 || blockCols < 8)
    return false;
  return page % blockCols == 0 || (blockCols % page == 0 && page % 8 == 0);
}

bool config::kvCopiesByTma(llvm::StringRef kvCopy, int64_t page, int64_t blockCols) {
  return kvCopy == "tma" && (page == 0 || pagedBoxesFit(page, blockCols));
}

bool config::persistentGridFits(int64_t headDim, int64_t blockCols) {
  return headDim <= 128 || blockCols <= 64;
}

bool config::warpSpecializationApplies(int64_t page, llvm::StringRef kvCopy, int64_t headDim,
                                       int64_t blockCols) {
  return page == 0 || (headDim <= 128 && kvCopiesByTma(kvCopy, page, blockCols));
}

bool config::persistentGridApplies(bool varlen, bool pagedKV, bool readsTensors) {
  return !(varlen && readsTensors) && !pagedKV;
}

bool config::warpSpecializesByDefault(int64_t blockRows) { return blockRows >= 128; }

bool config::pingPongApplies(int64_t blockRows) { return blockRows >= 128; }

int64_t config::defaultRowsPerWarp(int64_t blockRows, int64_t blockCols, int64_t headDim,
                                   bool plainScores) {
  // Two m16 row blocks per warp halve the ldmatrix traffic of K and V per
  // mma (FlashAttention-2's 4 warps x 32 rows). A thread then holds D + Bc
  // f32 of A and S: 32 rows while that is at most 160 (ptxas spills at
  // D = 128, Bc = 64 with a mask and at D = 64, Bc = 128) and Br keeps at
  // least 4 warps. Without a mask or score mod, D = 128 with Bc = 64 fits
  // too (bench/results/2026-11-29-h200).
  bool fits = headDim + blockCols <= 160 || (plainScores && headDim + blockCols <= 192);
  return blockRows % 128 == 0 && fits ? 32 : 16;
}

bool config::keepsQueryInRegisters(int64_t rowBlocks, int64_t headDim) {
  return rowBlocks * headDim <= 128;
}

int64_t config::backwardColumnSlices(int64_t headDim) {
  return headDim > 128 ? (headDim + 127) / 128 : 1;
}

int64_t config::defaultBackwardBarrierMerge(int64_t headDim) {
  // H100, same run (bench/results/2026-12-07m-*, L = 2 | 3 | 3 | 2): with
  // its dSᵀ barrier, level 3 took 0.6-2.5% off level 2 at D = 64 (full
  // 1k/4k/16k, causal 4k/16k) and added 1-2% at D = 128, where warpgroup 1
  // shares the dQ product and the third stage only moves a barrier. Level
  // 2 took 0.4-1% off level 0 at D >= 128 (2026-12-07l).
  return headDim <= 64 ? 3 : 2;
}

TileChoice config::defaultBackwardTile(int64_t headDim, llvm::StringRef gemmKind,
                                       const VariantTraits &variant, bool deterministic,
                                       std::optional<int64_t> queryLength,
                                       bool queryGradAddsByDefault) {
  // wgmma (a warpgroup per 64 keys): dK and dV take D/2 f32 registers each,
  // Sᵀ, P, dPᵀ and dS Br/2 each. At D >= 96, Br = 64 fits 255 registers
  // without spills (ptxas -v) only without a score mod or tensor reads
  // (the index math and the unmodified score of their derivatives); Br =
  // 32 fits every example. Br = 64 is 19% faster at D = 128 (H200,
  // bench/results/2026-12-01-h200-backward-wgmma; flashc-tune --bwd kept it
  // with the pipelined query loop, -pipelined/tune.txt).
  // A mask whose keys come in pieces (sink + window) has more index math:
  // Br = 64 spills 4 bytes there (ptxas -v, D = 128).
  // Above D = 128 each CTA keeps 128 columns of dK and dV
  // (backwardColumnSlices), so its registers are D = 128's; shared memory
  // still holds K, V, Q and dO at full D: on wgmma 2 x 128 keys and two
  // stages of 32 queries are 218 KB with the staged dQ tile, on mma.sync 64
  // keys keep two stages within sm_80's 163 KB. On mma.sync, Br = 32
  // spills with tensor reads (documents 20 bytes, relative_bias 72; ptxas
  // -v, sm_80): Br = 16 fits every example.
  if (headDim > 128 && gemmKind == "wgmma")
    return {32, 128, "the wgmma backward's tile above D = 128 (2 warpgroups of 64 keys, 32 "
                     "queries per step, 128 columns of dK and dV per CTA)"};
  if (headDim > 128 && variant.readsTensors)
    return {16, 64, "the backward's tile above D = 128 with tensor reads (4 warps of 16 keys, 16 "
                    "queries per step, 128 columns of dK and dV per CTA)"};
  if (headDim > 128)
    return {32, 64, "the backward's tile above D = 128 (4 warps of 16 keys, 32 queries per step, "
                    "128 columns of dK and dV per CTA)"};
  if (gemmKind == "wgmma" && headDim >= 96 &&
      (variant.scored || variant.readsTensors || variant.maskMayLeaveHoles))
    return {32, 128, "the wgmma backward's tile at D >= 96 with a score mod, tensor reads or "
                     "keys in pieces (2 warpgroups of 64 keys, 32 queries per step)"};
  // At D <= 64 FlashAttention-3's 128 x 128 (two warpgroups of 64 keys,
  // 128 queries per step: Sᵀ and dPᵀ take 64 registers each, dK and dV 32)
  // fits without spills (ptxas -v) where the score element's work is the
  // plain one's: no score mod but a bias (ALiBi), tensor reads only per
  // (b, h) (slopes[h], kv_len[b]); keys in pieces too. Against one
  // warpgroup of 64 keys with 32 queries per step (several CTAs per SM),
  // H100, same runs (bench/results/2026-12-06f-h100-bwd-tiles): full /
  // causal 1.25x / 1.23x faster at N = 16384, 1.15x / 1.19x at 8192, 1.02x
  // / 1.13x at 4096, 0.93x / 1.04x at 2048 and 0.84-0.95x at N <= 1024
  // (with the writer in key-block order, defaultQueryGradAdds: 1.04-
  // 1.18x without it at 4096 and 16384); an attention sink beside a window
  // 1.58x (16384) and 1.09x (4096), key padding 1.20x and 1.08x. So the
  // one warpgroup stayed up to N = 1024, and up to 2048 without a mask.
  // Without a mask, score mod or tensor reads the 128 x 128 tile now adds
  // dQ by the writer in any order (defaultQueryGradAdds) and took 0.94x /
  // 0.93x the one warpgroup's time at N = 1024 / 2048 (H100, same runs,
  // bench/results/2026-12-07e-h100-bwd-grid-short-tiles): there the one
  // warpgroup stays up to N = 512 only (N = 512 itself not measured;
  // where the caller chose how dQ is added, up to 2048 as before).
  // ALiBi at 128 x 128 ran 1.87x (16384) but sits at 255 registers (196
  // bytes of spills with --bwd-rotate-tiles' few more): a bias score takes
  // 64 x 128 (210 registers), 1.71x (16384) and 1.52x (4096) faster than
  // the one warpgroup. Per-element tensor reads spill at 128 (documents:
  // 36 bytes; relative_bias 664) or a score mod's derivative (softcap: 108
  // bytes, and 64 x 128 ran 0.82x): those keep the one warpgroup, or two
  // with Br = 32 in deterministic mode (the dQ writer needs two), where
  // the writer's 240 registers leave room at 128 x 128 only without a
  // score mod or tensor reads (ALiBi spills 56 bytes there).
  if (gemmKind == "wgmma" && headDim <= 64) {
    bool plain = !variant.scored && !variant.readsTensors;
    bool plainElements = (!variant.scored || variant.scoreIsBias) &&
                         (!variant.readsTensors || variant.tensorReadsAreUniform);
    // 512 where the 128 x 128 kernel's writer adds dQ in any order.
    bool writerInAnyOrder = !deterministic && queryGradAddsByDefault &&
                            defaultQueryGradAdds(headDim, gemmKind, variant, queryLength) ==
                                QueryGradAdds::Writer;
    int64_t oneWarpgroupUpTo = variant.masked ? 1024 : writerInAnyOrder ? 512 : 2048;
    bool shortQueries = queryLength && *queryLength <= oneWarpgroupUpTo;
    if (!shortQueries && (deterministic ? plain : plainElements && !variant.scored))
      return {128, 128, "the wgmma backward's tile at D <= 64 (2 warpgroups of 64 keys, 128 "
                        "queries per step)"};
    if (!shortQueries && !deterministic && plainElements)
      return {64, 128, "the wgmma backward's tile at D <= 64 with a bias score (2 warpgroups of "
                       "64 keys, 64 queries per step)"};
    if (deterministic && plain && !variant.maskMayLeaveHoles)
      return {64, 128, "the deterministic wgmma backward's tile at D <= 64 and short N (2 "
                       "warpgroups of 64 keys for the dQ writer, 64 queries per step)"};
    if (deterministic)
      return {32, 128, "the deterministic wgmma backward's tile at D <= 64 with a score mod, "
                       "tensor reads or keys in pieces (2 warpgroups of 64 keys for the dQ "
                       "writer, 32 queries per step)"};
    return {32, 64, plainElements ? "the wgmma backward's tile at D <= 64 and N <= 1024 (without "
                                    "a mask: 512, or 2048 with a bias score or tensor reads) (1 "
                                    "warpgroup of 64 keys, 32 queries per step)"
                                  : "the wgmma backward's tile at D <= 64 with a score mod or "
                                    "tensor reads per element (1 warpgroup of 64 keys, 32 "
                                    "queries per step)"};
  }
  if (gemmKind == "wgmma")
    return {64, 128, "the wgmma backward's tile (2 warpgroups of 64 keys, 64 queries per step)"};
  // mma.sync: the same per thread; at D >= 96 only Br = 32 stays within 255
  // registers without spills.
  if (headDim >= 96)
    return {32, 128, "the backward's tile at D >= 96 (8 warps of 16 keys, 32 queries per step)"};
  return {64, 128, "the backward's tile at D <= 64 (8 warps of 16 keys, 64 queries per step)"};
}

QueryGradAdds config::defaultQueryGradAdds(int64_t headDim, llvm::StringRef gemmKind,
                                           const VariantTraits &variant,
                                           std::optional<int64_t> queryLength) {
  // With dq_accum's own layout, the deterministic mode's order (each key
  // block's dQ adds into a query tile wait for the previous block's, the
  // dQ writer taking the waits off the body) ran at 0.93-0.97x the time of
  // adding in any order at D = 128 (full and causal, N = 4096 and 16384;
  // 1.03x / 0.97x at N = 1024; 0.97-0.99x full at 1024 and 0.90-0.96x at
  // N = 512 in a later build, -07e) and 0.96x / 0.99x at D = 256 (N = 4096);
  // H100, bench/results/2026-12-06d-h100-ordered-dq. At D <= 64 on the
  // 128 x 128 tile it ran at 0.89x (full) and 0.95x (causal) the time of
  // the writer alone at N = 16384, 1.06x / 0.93x at 4096 (-06f); on the
  // one warpgroup of N <= 1024 it does not apply (no writer). The CTAs of
  // a head then no longer add into the same dQ tile at once. Not taken
  // where it was slower or not measured: D = 96, masks with a lower bound
  // or pieces (a 1024-key window ran at 1.27x), tensor reads (documents:
  // 1.21-1.28x; aux gradients would go fixed point), score mods, mma.sync.
  // Unmasked at D <= 64 the order lost below N = 16384 on the 128 x 128
  // tile: the writer adding in any order took 0.87x / 0.91x / 0.98x its
  // time at N = 2048 / 4096 / 8192 (0.89x the other way at 16384), while
  // causal kept the order (0.90-0.91x the writer's time at 2048-8192;
  // H100, same runs, bench/results/2026-12-07c-h100-bwd-d256-split; the
  // new default: 1.09x / 1.02x faster at 4096 / 8192, -07d). Where N is
  // unknown the order stays.
  bool prefixOfKeys = variant.maskKeys == KeySet::Row || variant.maskKeys == KeySet::Prefix;
  if (gemmKind != "wgmma" || !(headDim >= 128 || headDim <= 64) || !prefixOfKeys ||
      variant.scored || variant.readsTensors)
    return QueryGradAdds::AnyOrder;
  if (headDim <= 64 && !variant.masked && queryLength && *queryLength <= 8192)
    return QueryGradAdds::Writer;
  return QueryGradAdds::KeyBlockOrder;
}

KeySet config::intersectKeySets(KeySet x, KeySet y) {
  if (x == KeySet::Pieces || y == KeySet::Pieces)
    return KeySet::Pieces;
  if (x == KeySet::Row || x == y)
    return y;
  if (y == KeySet::Row)
    return x;
  return KeySet::Interval; // a prefix and a suffix, or an interval and either
}

KeySet config::uniteKeySets(KeySet x, KeySet y) {
  // Row: every key or none, so the union is the other set or all keys.
  if (x == KeySet::Row)
    return y;
  if (y == KeySet::Row)
    return x;
  // Two prefixes (or suffixes) nest; two intervals may lie apart.
  return x == y && x != KeySet::Interval ? x : KeySet::Pieces;
}

KeySet config::negateKeySet(KeySet x) {
  if (x == KeySet::Prefix)
    return KeySet::Suffix;
  if (x == KeySet::Suffix)
    return KeySet::Prefix;
  return x == KeySet::Row ? KeySet::Row : KeySet::Pieces;
}

KeySet config::comparisonKeySet(std::optional<int64_t> lhsCoefficient,
                                std::optional<int64_t> rhsCoefficient, bool below, bool above) {
  if (!(below || above) || !lhsCoefficient || !rhsCoefficient ||
      *lhsCoefficient == *rhsCoefficient)
    return KeySet::Interval;
  // c > 0 bounds j from above under < and <=.
  return (*lhsCoefficient - *rhsCoefficient > 0) == below ? KeySet::Prefix : KeySet::Suffix;
}
