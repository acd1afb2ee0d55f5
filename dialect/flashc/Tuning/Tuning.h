//===- Tuning.h - Tile configurations, their space and their cache -*- C++ -*-===//
//
// The knobs flashc-tune searches: the tile (Br, Bc), the GEMM kind (wgmma
// or mma.sync), how the wgmma kernel moves K/V (TMA or cp.async), whether
// it overlaps the softmax with the previous block's P·V (TMA only), whether
// its warp-specialized tiles run on a persistent grid, and the rows per warp
// of the mma.sync kernel. Warps follow from Br (one warpgroup
// per 64 rows on wgmma, Br / rows-per-warp on mma.sync) and the copy
// pipeline has a fixed depth, so neither is a separate knob.
//
// The tuning cache is one JSON file of winners keyed by what makes a winner
// valid: the variant (its flash IR with the tile left out), element type,
// head dim, shape bucket, GPU name and compute capability, flashc version.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_TUNING_TUNING_H
#define FLASHC_TUNING_TUNING_H

#include "flashc/Config/ConfigRequest.h"
#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "flashc/Frontend/AST.h"
#include "flashc/IRGen/IRGen.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>
#include <string>
#include <vector>

namespace flashc::tuning {

struct TileConfig {
  int64_t blockRows = 0, blockCols = 0;
  std::string gemm = "wgmma";   // "wgmma" or "mma.sync"
  std::string kvCopy = "tma";   // wgmma: "tma" or "cp.async"
  int64_t rowsPerWarp = 0;      // mma.sync: 16, 32 or 0 (auto)
  bool overlapSoftmax = false;  // wgmma with TMA
  /// wgmma with TMA, Br >= 128 (warp-specialized): a persistent grid or one
  /// CTA per tile; unset: the rule (config::persistentGridPays).
  std::optional<bool> persistent;
  /// A backward tile: only Br, Bc and the GEMM are knobs (the backward
  /// copies with cp.async and has one grid).
  bool backward = false;

  /// "Br=64 Bc=128 wgmma tma" / "Br=64 Bc=64 wgmma tma overlap" /
  /// "Br=128 Bc=128 wgmma tma persistent" / "Br=128 Bc=128 wgmma tma
  /// per-tile" / "Br=128 Bc=64 mma.sync rpw=32"; backward: "Br=64 Bc=128
  /// wgmma".
  std::string str() const;
  /// This configuration as a request to the resolver (flashc/Config): every
  /// knob set but the grid when `persistent` is unset (the rule decides).
  config::ConfigRequest request() const;
  bool operator==(const TileConfig &other) const;
};

/// Lists of values per knob; the space is their product.
struct SearchSpace {
  std::vector<int64_t> blockRows = {64, 128};
  std::vector<int64_t> blockCols = {32, 64, 128};
  std::vector<std::string> gemm = {"wgmma"};
  std::vector<std::string> kvCopy = {"tma"};
  std::vector<int64_t> rowsPerWarp = {0};
  std::vector<bool> overlapSoftmax = {false, true};
  std::vector<bool> persistent = {true, false};

  /// Parses "Br=64,128 Bc=32,64 gemm=wgmma,mma.sync kv=tma,cp.async
  /// overlap=on,off persistent=on,off rpw=16,32"
  /// (any subset, in any order; the rest keeps its default). Errors name
  /// the item.
  static llvm::Expected<SearchSpace> parse(llvm::ArrayRef<std::string> items);
  /// The backward's space: Br=32,64,128 Bc=64,128 gemm=wgmma unless
  /// `items` say otherwise; the forward's knobs (kv, overlap, persistent,
  /// rpw) are errors.
  static llvm::Expected<SearchSpace> parseBackward(llvm::ArrayRef<std::string> items);
  /// Every combination, without combinations that mean the same kernel
  /// (kv-copy and rows-per-warp apply to one GEMM kind each, overlap to
  /// 64-row tiles with TMA: larger ones are warp-specialized and always
  /// overlap; persistent to those larger ones only).
  std::vector<TileConfig> enumerate() const;
  /// Backward tiles: Br x Bc x gemm.
  std::vector<TileConfig> enumerateBackward() const;

private:
  /// `items` over `defaults` (the knobs they leave alone keep its values).
  static llvm::Expected<SearchSpace> parseOnto(llvm::ArrayRef<std::string> items,
                                               SearchSpace defaults);
};

/// "N<=4096,M<=4096": both lengths rounded up to a power of two.
std::string shapeBucket(int64_t queryLen, int64_t keyLen);

/// The tile a variant is built with to name it in the cache: its flash IR
/// at this tile (and its head dim) identifies the variant whatever tile it
/// runs with.
constexpr int64_t kKeyTileRows = 64, kKeyTileCols = 64;

struct TuningKey {
  std::string variant, elementType;
  int64_t headDim = 0;
  std::string shapeBucket, gpu;
  int computeCapability = 0;
  std::string flashcVersion;
  /// "forward" or "backward": each pass has its own winner.
  std::string pass = "forward";
};

/// The key of a run of `variant` of `ast` (parsed from `sourceMgr`) at head
/// dim `headDim` and lengths N = `queryLen`, M = `keyLen` on `gpu`: the
/// variant is named by the variantHash of its flash IR at the key tile (of
/// its backward kernel for `backward`). Null when the variant does not
/// build (its diagnostics are dropped).
std::optional<TuningKey> makeKey(mlir::MLIRContext &context, const frontend::Module &ast,
                                 llvm::SourceMgr &sourceMgr, llvm::StringRef variant,
                                 int64_t headDim, int64_t queryLen, int64_t keyLen,
                                 llvm::StringRef gpu, int computeCapability,
                                 bool backward = false,
                                 std::optional<int64_t> pageSize = std::nullopt);

struct TuningEntry {
  TuningKey key;
  TileConfig config;
  double tflops = 0;
};

/// The JSON file of winners. Readers never trust a bad file: a corrupt file
/// or a malformed entry is ignored with a warning, an entry of another
/// flashc version is reported as stale. Writers lock `<path>.lock`, reread,
/// replace the entry with the same key (keeping every other one as written,
/// even those they cannot read) and write a temporary file renamed over the
/// cache, so concurrent writers neither lose nor tear entries. A file that
/// is not JSON is moved to `<path>.corrupt` first; a file of another format
/// is never overwritten.
class TuningCache {
public:
  explicit TuningCache(std::string path) : file(std::move(path)) {}
  /// <compile cache directory>/tuning.json (FLASHC_CACHE_DIR overrides).
  static std::string defaultPath();
  const std::string &path() const { return file; }

  std::optional<TuningEntry> lookup(const TuningKey &key, std::string &warnings) const;
  llvm::Error record(const TuningEntry &entry, std::string &warnings) const;
  /// Every well-formed entry (bad ones reported in `warnings`).
  std::vector<TuningEntry> entries(std::string &warnings) const;

private:
  std::string file;
};

} // namespace flashc::tuning

#endif // FLASHC_TUNING_TUNING_H
