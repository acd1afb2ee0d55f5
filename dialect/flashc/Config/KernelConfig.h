//===- KernelConfig.h - Which kernel a compilation gets, and why -*- C++ -*-===//
//
// The one entry point that decides a compilation's kernel configuration:
// what was asked for (the command line, or a tuner candidate), else a
// winner of flashc-tune from the tuning cache, else the rules
// (KernelRules.h), for every knob separately. flashc, flash-run and
// flashc-tune call it and nothing else; its `why` is what --verbose prints.
//
//   ConfigRequest (flags)  --+
//   tuning cache (winner)  --+--> resolveKernelConfig --> KernelConfig:
//   KernelRules (defaults) --+        target options, the tile of each
//                                     variant, and why
//
// Later kernel families (backward, decode) add their own knobs to
// ConfigRequest and their own rules to KernelRules.h, and resolve here.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONFIG_KERNELCONFIG_H
#define FLASHC_CONFIG_KERNELCONFIG_H

#include "flashc/Config/ConfigRequest.h"
#include "flashc/Config/KernelRules.h"
#include "flashc/Frontend/AST.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/Target/NVPTX/EmitPTX.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>
#include <string>
#include <vector>

namespace flashc::tuning {
struct TileConfig;
}

namespace flashc::config {

/// Sizes the tool knows when it compiles (from --shape); unknown ones stay
/// unset and the rules assume nothing about them.
struct KnownSizes {
  std::optional<int64_t> headDim;
  std::optional<int64_t> queryLength;
};

/// Where a tuned winner may come from: the tuning cache at `cachePath`,
/// for `gpu` (its name and compute capability as a number, e.g. 90), for a
/// problem of `queryLength` x `keyLength` (the cache's shape bucket). The
/// variant is named in the cache by its flash IR, which needs the context
/// and the parsed source.
struct TuningSource {
  std::string cachePath;
  std::string gpu;
  int computeCapability = 0;
  int64_t queryLength = 0, keyLength = 0;
  mlir::MLIRContext *context = nullptr;
  llvm::SourceMgr *sourceMgr = nullptr;
};

struct ResolveOptions {
  /// The GPU target: sm_80, sm_86, sm_89, sm_90 or sm_90a.
  std::string chip = "sm_90a";
  /// What was asked for; every set knob wins over tuned winners and rules.
  ConfigRequest request;
  KnownSizes sizes;
  /// Where to look for a tuned winner when `request` is empty; unset: no
  /// lookup, and `noTuningReason` says why (shown by --verbose).
  std::optional<TuningSource> tuning;
  std::string noTuningReason;
};

/// The configuration of one compilation: target options shared by all its
/// kernels, the tile of each variant, and where each came from.
class KernelConfig {
public:
  /// Options for flashc/Target/NVPTX (lowering and PTX emission).
  const nvptx::TargetOptions &target() const { return targetOptions; }
  /// "wgmma" or "mma.sync".
  llvm::StringRef gemm() const { return gemmKind; }
  /// Where the configuration came from: "command line", "tuned for <GPU>
  /// (<cache>)" or "default tile (<why no tuned winner>)".
  llvm::StringRef source() const { return sourceText; }
  /// Warnings of the tuning-cache lookup (a stale or corrupt entry), for
  /// the tool to print; empty when there were none.
  llvm::StringRef warnings() const { return warningText; }
  /// Whether `variant`'s default tile is the warp-specialized kernel's
  /// (config::warpSpecializationApplies for a paged cache).
  bool warpSpecializedTilesFor(const frontend::Variant &variant, int64_t headDim) const;
  /// The tile `variant` gets at head dim `headDim`, and why.
  TileChoice tileFor(const frontend::Variant &variant, int64_t headDim) const;
  /// IRGen options that give every variant tileFor's tile.
  frontend::KernelOptions kernelOptions(std::optional<int64_t> headDim) const;
  /// The tile of `variant`'s backward kernel: the asked-for one, else the
  /// tuned backward winner, else the backward rule.
  TileChoice backwardTileFor(const frontend::Variant &variant, int64_t headDim) const;
  /// How the variant's backward adds dQ without --deterministic
  /// (config::defaultQueryGradAdds; AnyOrder where the caller chose).
  QueryGradAdds queryGradAddsFor(const frontend::Variant &variant, int64_t headDim) const;
  /// Where the backward tile came from (as source() for the forward).
  llvm::StringRef backwardSource() const { return backwardSourceText; }
  /// IRGen options for the backward kernels (options.backward set).
  frontend::KernelOptions backwardKernelOptions(std::optional<int64_t> headDim) const;
  /// Why the kernel of `variant` at `headDim` gets its tile, GEMM and grid:
  /// one line per decision, for --verbose.
  std::vector<std::string> why(const frontend::Variant &variant, int64_t headDim) const;
  /// This configuration as a flashc-tune candidate (how the tuner names
  /// the default it times beside its search space).
  tuning::TileConfig asTileConfig(const frontend::Variant &variant, int64_t headDim) const;
  /// Whether the target asks for the persistent grid for `variant` (the
  /// lowering still keeps tiles it does not fit on one CTA per tile:
  /// persistentGridFits).
  bool persistentGridAsked(const frontend::Variant &variant) const;
  /// Whether forward kernels split their key range at launch (flash.kernel's
  /// split_keys).
  bool splitsKeys() const { return splitKeys; }
  /// Whether forward kernels of GQA variants pack the query heads of a KV
  /// group into a tile (flash.kernel's packed_heads).
  bool packsHeads() const { return packHeads; }
  /// --paged: the page of paged K/V caches whose variants give none.
  std::optional<int64_t> pagedPageSize() const { return pageSize; }

private:
  friend llvm::Expected<KernelConfig> resolveKernelConfig(const ResolveOptions &,
                                                          const frontend::Module &,
                                                          llvm::StringRef);
  nvptx::TargetOptions targetOptions;
  std::string gemmKind;
  std::string sourceText;
  std::string warningText;
  /// The tile asked for or tuned (either side may be unset: the rule fills
  /// it in).
  std::optional<int64_t> blockRows, blockCols;
  /// The backward's own tile from --bwd-tile (either side may be unset).
  std::optional<int64_t> backwardBlockRows, backwardBlockCols;
  /// --bwd-block-summary (frontend::KernelOptions::backwardBlockSummary).
  bool backwardBlockSummary = true;
  /// --deterministic (ConfigRequest::deterministicBackward).
  bool deterministicBackward = false;
  /// ConfigRequest::queryGradAddsByDefault.
  bool queryGradAddsByDefault = true;
  /// The tuning cache's backward winner (for this GEMM kind) and its source.
  std::optional<TileChoice> tunedBackward;
  std::string backwardSourceText = "default tile";
  bool warpSpecializedTiles = false;
  bool splitKeys = false;
  bool packHeads = false;
  /// --pack-gqa given (packs masks that read aux tensors too).
  bool packAsked = false;
  std::optional<int64_t> pageSize;
  /// Why GQA heads are packed or not, for why() (empty: nothing to say).
  std::string packReason;
  std::optional<int64_t> queryLength;
  /// One line per target-level decision (the GEMM), for why().
  std::vector<std::string> targetReasons;
  /// "asked for" or "tuned" when the request set the grid; empty when the
  /// rule (persistentGridPays) did.
  std::string gridAskedText;
};

/// What the tile rules see of `variant`.
VariantTraits traitsOf(const frontend::Variant &variant);

/// Resolves the configuration of compiling `ast` (all its variants, or only
/// `onlyVariant`): a tuned winner applies only to one variant. Errors: an
/// unknown GEMM kind, wgmma on a chip without it (the message names the
/// flag).
llvm::Expected<KernelConfig> resolveKernelConfig(const ResolveOptions &options,
                                                 const frontend::Module &ast,
                                                 llvm::StringRef onlyVariant = {});

} // namespace flashc::config

#endif // FLASHC_CONFIG_KERNELCONFIG_H
