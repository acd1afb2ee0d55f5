//===- Package.h - A compiled kernel and what launching it needs -*- C++ -*-===//
//
// A kernel package is one text file: a manifest of `key value...` lines,
// then the PTX. `flashc --emit=package` writes it; the launch API and AOT
// programs read it with no compiler present.
//
//   flashc-package 1
//   flashc-version 0.1.0
//   kernel sliding_window
//   arch sm_90a
//   variant-hash 5d0c7a4f1e2b3c89
//   element-type bf16
//   head-dim 128
//   block-rows 64
//   block-cols 64
//   threads 128
//   dynamic-shared-bytes 49152
//   grid ceil(N/block-rows) H B         (or: grid persistent tile-counter;
//                                        packed heads: see below)
//   static-sizes -1 -1 -1 -1 -1 128     (B H HKV N M D; -1 = free)
//   dim-classes 0 1 2 3 4 5             (role tied to the smallest equal role)
//   param window i32 128                (one line per parameter, ABI order)
//   tensor doc i32 batch query_len      (one line per aux tensor, ABI order)
//   ptx 31337                           (byte count; the PTX follows the newline)
//
// A backward package (`flashc --bwd --emit=package`) holds the three kernels
// of a variant's backward pass in one PTX module: the manifest's kernel,
// threads and shared bytes are the main kernel's, which runs over
//   grid ceil(M/block-cols) HKV B
// and two more entries run over (ceil(N/block-rows), H, B):
//   kind backward
//   entry preprocess causal_bwd_preprocess 64 0   (role, name, threads, shared bytes)
//   entry convert causal_bwd_convert 128 0
//   deterministic                  (built with --deterministic: dQ in key-block
//                                   order, aux gradients in fixed point)
// and, built with --bwd-block-summary for a mask that reads aux tensors, the
// kernel of the summary of the backward's own tiling (no tile order),
// launched first (flashc/Target/NVPTX/EmitPTX.h):
//   block-summary 1 0
//   entry summary document_bwd_summary 128 0
//
// A forward package whose mask reads aux tensors also holds the kernel that
// computes its block summary (one byte per (b, h, query tile, key block):
// 0 empty, 1 partial, 2 full; dense over [B or 1, H or 1, ceil(N/block-rows),
// ceil(M/block-cols)]; then, 4-aligned, the tile order: a u32 per summary
// row and query tile), launched first over (CTAs per query tile,
// ceil(N/block-rows), batches x heads of the summary):
//   block-summary 1 0                   (per batch entry, per head: 1 or 0)
//   entry summary document_summary 128 528
//
// A forward package built with split keys (flash-decoding: `flashc
// --split-keys`) runs S CTAs per query tile, S chosen at launch, over
// (ceil(N/block-rows)·S, H, B), then, when S > 1, its combine kernel over
// (ceil(B·H·N / 4), 1, 1):
//   split-keys
//   entry combine decode_combine 128 0
//
// A forward package built with packed heads (packed GQA: `flashc
// --pack-gqa`) puts the G = H/HKV query heads of a KV group into the rows
// of one tile: its grid is (ceil(G·N/block-rows) (·S), HKV, B):
//   grid ceil(G*N/block-rows) HKV B     (instead of the line above)
//   packed-heads
//
// A forward package whose K and V live in a paged cache (a `paged` item)
// names the page (keys), the block table and the key lengths; the kernel
// takes them after the block summary's place (table, lengths pointers, the
// table's entries per sequence and the page count, i32 each), k and v are
// [pages, page, HKV, D] with their strides between pages, heads and rows:
//   paged-kv 16 block_table kv_len
//
// A forward package over a packed batch of ragged sequences (`varlen`
// items) names the offsets of its packed queries and keys ('-' for a side
// that is not packed); the kernel takes, after the paged cache's place, per
// packed side the offsets pointer (i32 [B + 1]) and the packed tensors' row
// count (i32). Packed q, o (k, v) are token-major [rows, heads, D] and LSE is
// f32 [H, rows]:
//   varlen cu_seqlens_q cu_seqlens_k
//
// The kernel ABI is documented in flashc/Target/NVPTX/EmitPTX.h.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHRT_PACKAGE_H
#define FLASHRT_PACKAGE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashrt {

struct PackageParam {
  std::string name;
  std::string type; // "i32" or "f32"
  double defaultValue = 0;
};

struct PackageTensor {
  std::string name;
  std::string elementType;          // "i32", "f32", "bf16", "f16"
  std::vector<std::string> extents; // role names ("batch") or sizes ("8")
};

/// One more kernel of a multi-kernel package (the backward's preprocess and
/// dQ conversion, a block summary, the forward's split combine).
struct PackageEntry {
  std::string role; // "preprocess", "convert", "summary" or "combine"
  std::string name;
  int64_t threadsPerBlock = 0;
  int64_t dynamicSharedBytes = 0;
};

struct KernelPackage {
  static constexpr int kFormatVersion = 1;

  std::string flashcVersion;
  std::string kernelName;
  std::string arch;
  std::string variantHash;
  std::string elementType; // "bf16" or "f16"
  int64_t headDim = 0;
  int64_t blockRows = 0;
  int64_t blockCols = 0;
  int64_t threadsPerBlock = 0;
  int64_t dynamicSharedBytes = 0;
  std::vector<int64_t> staticSizes; // 6 entries, -1 = free
  std::vector<int64_t> dimClasses;  // 6 entries
  std::vector<PackageParam> params;
  std::vector<PackageTensor> tensors;
  /// The kernel takes CUtensorMaps of k and v (TMA) after the aux tensors:
  /// dims {D, M, HKV, B}, box {64, blockCols, 1, 1}, 128-byte swizzle; of
  /// a paged cache (pageSize) dims {D, page, HKV, pages}, box {64,
  /// min(page, blockCols), 1, 1}.
  bool kvTensorMaps = false;
  /// `grid persistent tile-counter`: the grid is (min(tiles, CTAs resident
  /// at once), 1, 1) with tiles = ceil(N/block-rows)·H·B, each CTA drawing
  /// tiles from a counter; the kernel also takes q's CUtensorMap (dims {D,
  /// N, H, B}, box {64, blockRows, 1, 1}) before k's, and after the tensor
  /// maps the counter: two u32 in device memory, zero before the first
  /// launch (each launch leaves them zero), one per stream that launches it.
  bool persistent = false;
  /// A backward package: the main kernel over (ceil(M / block-cols) ·
  /// columnSlices, HKV, B), `entries` holding its preprocess and convert
  /// kernels (and, with a block summary, its summary kernel).
  bool backward = false;
  /// `column-slices S` (a backward package above D = 128): CTA x of the
  /// main kernel owns key block x / S and columns of D slice x mod S; the
  /// workspace holds a dQ semaphore per query tile and slice.
  int64_t columnSlices = 1;
  /// A backward package built with --deterministic: its workspace also
  /// holds an i64 fixed-point accumulator per aux tensor gradient.
  bool deterministic = false;
  /// A package with a `summary` entry: its mask reads a block summary,
  /// kept per batch entry and/or per head (else one serves all); a
  /// backward package's is of its own tiling, without the tile order.
  bool blockSummary = false;
  bool summaryPerBatch = false, summaryPerHead = false;
  /// A forward package with `split-keys`: the key range of a query tile
  /// may be split over S CTAs (S at launch: the kernel takes the partial
  /// states' buffers and S after the block summary), merged by its
  /// `combine` entry when S > 1.
  bool splitKeys = false;
  /// A forward package with `packed-heads`: a tile's rows are the packed
  /// (position, query head) rows of one KV group, so the grid runs over
  /// ceil(G·N / block-rows) tiles per (KV head, batch entry).
  bool packedHeads = false;
  /// A forward package with `paged-kv`: the page (keys, 0: dense K and V)
  /// and the names of the block table and key lengths inputs.
  int64_t pageSize = 0;
  std::string pageTable, pageLengths;
  /// A forward package with `varlen`: the names of the offsets of its packed
  /// queries and keys (empty: that side is not packed).
  std::string varlenQueries, varlenKeys;
  bool packsQueries() const { return !varlenQueries.empty(); }
  bool packsKeys() const { return !varlenKeys.empty(); }
  std::vector<PackageEntry> entries;
  std::string ptx;

  /// Query tiles per (head, batch entry) of the grid at H, HKV and N: of
  /// the N rows of a query head, or of the G·N packed rows of a KV group.
  int64_t queryTiles(int64_t heads, int64_t kvHeads, int64_t queryLen) const {
    int64_t rows = packedHeads && kvHeads > 0 ? queryLen * (heads / kvHeads) : queryLen;
    return (rows + blockRows - 1) / blockRows;
  }
  /// The grid's heads (y): H, or HKV with packed heads.
  int64_t gridHeads(int64_t heads, int64_t kvHeads) const {
    return packedHeads ? kvHeads : heads;
  }

  /// The entry of `role`, or null.
  const PackageEntry *entry(const std::string &role) const {
    for (const PackageEntry &e : entries)
      if (e.role == role)
        return &e;
    return nullptr;
  }

  std::string serialize() const;
  /// Throws Error(InvalidArgument) naming the line that is wrong.
  static KernelPackage parse(std::string_view text);
  static KernelPackage load(const std::string &path);
  void save(const std::string &path) const;
};

} // namespace flashrt

#endif // FLASHRT_PACKAGE_H
