//===- KernelConfig.cpp - Which kernel a compilation gets, and why --------===//

#include "flashc/Config/KernelConfig.h"

#include "flashc/Tuning/Tuning.h"

#include "llvm/ADT/STLExtras.h"

using namespace flashc;
using namespace flashc::config;

namespace {

/// Whether `expr` contains a node of kind `kind`.
bool mentions(const frontend::Expr *expr, frontend::ExprKind kind) {
  if (!expr)
    return false;
  return expr->kind == kind ||
         llvm::any_of(expr->operands, [&](const std::unique_ptr<frontend::Expr> &operand) {
           return mentions(operand.get(), kind);
         });
}

bool readsKey(const frontend::Expr *expr) { return mentions(expr, frontend::ExprKind::Key); }

/// The coefficient c of j in `expr` = c * j + (terms without j), where j
/// enters through +, - and products with integer literals; std::nullopt
/// otherwise.
std::optional<int64_t> keyCoefficient(const frontend::Expr *expr) {
  using frontend::ExprKind;
  if (!readsKey(expr))
    return 0;
  if (expr->kind == ExprKind::Key)
    return 1;
  if (expr->kind == ExprKind::Unary && expr->unaryOp == frontend::UnaryOp::Neg) {
    std::optional<int64_t> inner = keyCoefficient(expr->operands[0].get());
    return inner ? std::optional<int64_t>(-*inner) : std::nullopt;
  }
  if (expr->kind == ExprKind::Binary && expr->binaryOp == frontend::BinaryOp::Mul) {
    // j times a literal.
    for (int side = 0; side < 2; ++side) {
      const frontend::Expr *factor = expr->operands[side].get();
      if (factor->kind != ExprKind::IntLiteral)
        continue;
      std::optional<int64_t> inner = keyCoefficient(expr->operands[1 - side].get());
      return inner ? std::optional<int64_t>(*inner * factor->intValue) : std::nullopt;
    }
    return std::nullopt;
  }
  if (expr->kind == ExprKind::Binary && (expr->binaryOp == frontend::BinaryOp::Add ||
                                         expr->binaryOp == frontend::BinaryOp::Sub)) {
    std::optional<int64_t> lhs = keyCoefficient(expr->operands[0].get());
    std::optional<int64_t> rhs = keyCoefficient(expr->operands[1].get());
    if (!lhs || !rhs)
      return std::nullopt;
    return expr->binaryOp == frontend::BinaryOp::Add ? *lhs + *rhs : *lhs - *rhs;
  }
  return std::nullopt;
}

KeySet keySetOf(const frontend::Expr *expr) {
  using frontend::BinaryOp;
  using frontend::ExprKind;
  if (!readsKey(expr))
    return KeySet::Row;
  if (expr->kind == ExprKind::Unary && expr->unaryOp == frontend::UnaryOp::Not)
    return negateKeySet(keySetOf(expr->operands[0].get()));
  if (expr->kind == ExprKind::Binary) {
    const frontend::Expr *lhs = expr->operands[0].get(), *rhs = expr->operands[1].get();
    switch (expr->binaryOp) {
    case BinaryOp::And:
      return intersectKeySets(keySetOf(lhs), keySetOf(rhs));
    case BinaryOp::Or:
      return uniteKeySets(keySetOf(lhs), keySetOf(rhs));
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge: {
      bool below = expr->binaryOp == BinaryOp::Lt || expr->binaryOp == BinaryOp::Le;
      return comparisonKeySet(keyCoefficient(lhs), keyCoefficient(rhs), below, !below);
    }
    default:
      return KeySet::Interval; // ==, != and tensor predicates
    }
  }
  if (expr->kind == ExprKind::Call && expr->builtin == frontend::Builtin::Select &&
      expr->type == frontend::ScalarType::Bool)
    return KeySet::Pieces;
  return KeySet::Interval;
}

} // namespace

/// Whether the set of keys a mask admits may be a union of pieces (`||` of
/// two windows, a sink beside a window), so that whole key blocks inside
/// the visible range can be empty: j < prefix || j <= i is one prefix.
static bool mayLeaveHoles(const frontend::Expr *expr) {
  return expr && keySetOf(expr) == KeySet::Pieces;
}

/// Whether every aux tensor element `expr` reads is indexed without i or j.
static bool readsUniformTensors(const frontend::Expr *expr) {
  if (!expr)
    return true;
  if (expr->kind == frontend::ExprKind::Index &&
      llvm::any_of(expr->operands, [](const std::unique_ptr<frontend::Expr> &e) {
        return mentions(e.get(), frontend::ExprKind::Query) ||
               mentions(e.get(), frontend::ExprKind::Key);
      }))
    return false;
  return llvm::all_of(expr->operands, [](const std::unique_ptr<frontend::Expr> &e) {
    return readsUniformTensors(e.get());
  });
}

/// s, s + f, f + s or s - f (recursively), f free of s.
static bool isBiasOfScore(const frontend::Expr *expr) {
  using frontend::BinaryOp, frontend::ExprKind;
  if (expr->kind == ExprKind::Score)
    return true;
  if (expr->kind != ExprKind::Binary || expr->operands.size() != 2)
    return false;
  const frontend::Expr *lhs = expr->operands[0].get(), *rhs = expr->operands[1].get();
  if (expr->binaryOp == BinaryOp::Add)
    return (isBiasOfScore(lhs) && !mentions(rhs, ExprKind::Score)) ||
           (isBiasOfScore(rhs) && !mentions(lhs, ExprKind::Score));
  if (expr->binaryOp == BinaryOp::Sub)
    return isBiasOfScore(lhs) && !mentions(rhs, ExprKind::Score);
  return false;
}

VariantTraits config::traitsOf(const frontend::Variant &variant) {
  VariantTraits traits;
  traits.masked = bool(variant.mask);
  traits.scored = bool(variant.score);
  traits.readsTensors = !variant.tensors.empty();
  traits.maskMayLeaveHoles = mayLeaveHoles(variant.mask.get());
  traits.maskKeys = variant.mask ? keySetOf(variant.mask.get()) : KeySet::Row;
  traits.tensorReadsAreUniform = readsUniformTensors(variant.score.get()) &&
                                 readsUniformTensors(variant.mask.get()) &&
                                 readsUniformTensors(variant.scale.get());
  traits.scoreIsBias = variant.score && isBiasOfScore(variant.score.get());
  return traits;
}

/// A variant over packed ragged sequences (cu_seqlens for queries or keys).
static bool varlen(const frontend::Variant &variant) {
  return variant.varlenQueries || variant.varlenKeys;
}

/// The page size of a paged variant (its own, else the caller's), 0 if
/// not paged or not known.
static int64_t pageOf(const frontend::Variant &variant, std::optional<int64_t> pageSize) {
  if (!variant.paged)
    return 0;
  return variant.paged->pageSize ? variant.paged->pageSize : pageSize.value_or(0);
}

bool KernelConfig::warpSpecializedTilesFor(const frontend::Variant &variant,
                                           int64_t headDim) const {
  if (!warpSpecializedTiles || !variant.paged)
    return warpSpecializedTiles;
  // A paged cache whose page is not known yet keeps the one-warpgroup tile.
  int64_t page = pageOf(variant, pageSize);
  TileChoice specialized =
      defaultTile(traitsOf(variant), headDim, gemmKind, /*warpSpecializedTiles=*/true,
                  queryLength);
  return page > 0 && warpSpecializationApplies(page, targetOptions.kvCopy, headDim,
                                               specialized.blockCols);
}

TileChoice KernelConfig::tileFor(const frontend::Variant &variant, int64_t headDim) const {
  if (blockRows && blockCols)
    return {*blockRows, *blockCols, sourceText};
  TileChoice rule = defaultTile(traitsOf(variant), headDim, gemmKind,
                                warpSpecializedTilesFor(variant, headDim), queryLength);
  if (blockRows)
    return {*blockRows, rule.blockCols, "Br from the " + sourceText + ", Bc: " + rule.why};
  if (blockCols)
    return {rule.blockRows, *blockCols, "Bc from the " + sourceText + ", Br: " + rule.why};
  return rule;
}

frontend::KernelOptions KernelConfig::kernelOptions(std::optional<int64_t> headDim) const {
  frontend::KernelOptions options;
  options.headDim = headDim;
  options.splitKeys = splitKeys;
  options.packHeads = packHeads;
  options.packSummarizedMasks = packAsked;
  options.pageSize = pageSize;
  options.tileFor = [config = *this](const frontend::Variant &variant, int64_t d) {
    TileChoice tile = config.tileFor(variant, d);
    return std::make_pair(tile.blockRows, tile.blockCols);
  };
  return options;
}

TileChoice KernelConfig::backwardTileFor(const frontend::Variant &variant,
                                         int64_t headDim) const {
  TileChoice rule =
      defaultBackwardTile(headDim, gemmKind, traitsOf(variant), deterministicBackward, queryLength,
                          queryGradAddsByDefault);
  if (backwardBlockRows || backwardBlockCols) {
    rule.blockRows = backwardBlockRows.value_or(rule.blockRows);
    rule.blockCols = backwardBlockCols.value_or(rule.blockCols);
    rule.why = "from the command line (--bwd-tile)";
    return rule;
  }
  bool asked = sourceText == "command line";
  // Tuned tiles were measured in the default mode.
  if (!asked && tunedBackward && !deterministicBackward)
    return *tunedBackward;
  if (asked && blockRows)
    rule.blockRows = *blockRows;
  if (asked && blockCols)
    rule.blockCols = *blockCols;
  if (asked && (blockRows || blockCols))
    rule.why = "from the command line";
  return rule;
}

frontend::KernelOptions KernelConfig::backwardKernelOptions(std::optional<int64_t> headDim) const {
  frontend::KernelOptions options;
  options.headDim = headDim;
  options.backward = true;
  options.backwardBlockSummary = backwardBlockSummary;
  options.tileFor = [config = *this](const frontend::Variant &variant, int64_t d) {
    TileChoice tile = config.backwardTileFor(variant, d);
    return std::make_pair(tile.blockRows, tile.blockCols);
  };
  options.queryGradAddsFor = [config = *this](const frontend::Variant &variant, int64_t d) {
    return config.queryGradAddsFor(variant, d);
  };
  return options;
}

QueryGradAdds KernelConfig::queryGradAddsFor(const frontend::Variant &variant,
                                             int64_t headDim) const {
  if (!queryGradAddsByDefault || deterministicBackward)
    return QueryGradAdds::AnyOrder;
  return defaultQueryGradAdds(headDim, gemmKind, traitsOf(variant), queryLength);
}

std::vector<std::string> KernelConfig::why(const frontend::Variant &variant,
                                           int64_t headDim) const {
  TileChoice tile = tileFor(variant, headDim);
  std::vector<std::string> lines = {"tile Br=" + std::to_string(tile.blockRows) +
                                    " Bc=" + std::to_string(tile.blockCols) + ": " + tile.why};
  // The GEMM line, then the grid line only where the tile is warp-specialized
  // (the grid applies to nothing else): by default from Br = 128, with
  // --warp-specialize=on any tile.
  bool specialized = warpSpecializedTilesFor(variant, headDim) &&
                     (tile.blockRows >= 128 || targetOptions.warpSpecialize == "on");
  for (const std::string &reason : targetReasons)
    lines.push_back(reason);
  if (variant.paged && gemmKind == "wgmma") {
    int64_t page = pageOf(variant, pageSize);
    // (Whether P·V is deferred, which keeps the gather, flash-to-sm90
    // decides from shared memory.)
    bool lastBlockByTma = !specialized && targetOptions.pagedLastBlock == "tma";
    if (page > 0 && kvCopiesByTma(targetOptions.kvCopy, page, tile.blockCols) && lastBlockByTma)
      lines.push_back(std::string("K/V from the paged cache by TMA, a box per page (a lane "
                                  "each); the block a sequence ends in too, its rows past the "
                                  "end zeroed in shared memory") +
                      (targetOptions.overlapSoftmax
                           ? " (gathered by cp.async where P·V is deferred)"
                           : ""));
    else if (page > 0 && kvCopiesByTma(targetOptions.kvCopy, page, tile.blockCols))
      lines.push_back(std::string("K/V from the paged cache by TMA, a box per page; the block a "
                                  "sequence ends in gathered by cp.async (zeros past its end)") +
                      (specialized ? ", by the producer warpgroup" : ""));
    else
      lines.push_back("K/V gathered from the paged cache by cp.async (TMA needs --kv-copy=tma "
                      "and pages of 8 or more keys that nest with Bc = " +
                      std::to_string(tile.blockCols) + ")");
  }
  if (variant.varlenQueries && (splitKeys || packHeads))
    lines.push_back("varlen queries: keys not split and GQA heads not packed (their rows are "
                    "laid out by the launch's N)");
  // Packing applies to GQA variants only, and by default not to masks that
  // read aux tensors (IRGen).
  if (packHeads && variant.mayGroupHeads() && !packAsked && variant.maskReadsTensors())
    lines.push_back("GQA query heads not packed: the mask reads aux tensors (its block "
                    "summary skips key blocks; --pack-gqa packs it anyway)");
  else if (!packReason.empty() && (!packHeads || variant.mayGroupHeads()))
    lines.push_back(packReason);
  if (!specialized || splitKeys || packHeads)
    return lines;
  bool persistent = persistentGridAsked(variant);
  std::string because;
  if (!persistentGridApplies(varlen(variant), bool(variant.paged), !variant.tensors.empty()))
    because = variant.paged ? "a paged cache: the persistent producer is one thread"
                            : "a varlen variant that reads aux tensors";
  else if (!gridAskedText.empty())
    because = gridAskedText;
  else if (!queryLength)
    because = "N unknown; --shape N=... gives the persistent grid";
  else if (*queryLength <= kPersistentGridMaxQueryLengthWithTensors)
    because = "N = " + std::to_string(*queryLength) +
              " <= " + std::to_string(kPersistentGridMaxQueryLengthWithTensors);
  else
    because = "N = " + std::to_string(*queryLength) + " > " +
              std::to_string(kPersistentGridMaxQueryLengthWithTensors) +
              (persistent ? " without aux tensors" : " and the variant reads aux tensors");
  lines.push_back("grid of warp-specialized tiles: " +
                  std::string(persistent ? "persistent" : "one CTA per tile") + " (" + because +
                  ")");
  if (persistent && !persistentGridFits(headDim, tile.blockCols))
    lines.push_back("grid: one CTA per tile after all: at D = " + std::to_string(headDim) +
                    " only Bc <= 64 fits the persistent grid");
  return lines;
}

bool KernelConfig::persistentGridAsked(const frontend::Variant &variant) const {
  if (!config::persistentGridApplies(varlen(variant), bool(variant.paged),
                                     !variant.tensors.empty()))
    return false;
  return config::persistentGridAsked(targetOptions.persistent,
                                     targetOptions.persistentWithTensors,
                                     !variant.tensors.empty());
}

tuning::TileConfig KernelConfig::asTileConfig(const frontend::Variant &variant,
                                              int64_t headDim) const {
  TileChoice tile = tileFor(variant, headDim);
  tuning::TileConfig config{tile.blockRows, tile.blockCols, gemmKind,
                            gemmKind == "wgmma" ? targetOptions.kvCopy : "cp.async",
                            targetOptions.rowsPerWarp};
  config.overlapSoftmax = targetOptions.overlapSoftmax;
  // Warp-specialized tiles name their grid, as the tuner's space does.
  if (gemmKind == "wgmma" && tile.blockRows >= 128)
    config.persistent =
        persistentGridAsked(variant) && persistentGridFits(headDim, tile.blockCols);
  return config;
}

/// The tuned winner of `variant`'s forward (or backward) kernel, or why
/// there is none (`source`).
static std::optional<tuning::TuningEntry>
lookUpTuned(const TuningSource &tuning, const frontend::Module &ast,
            const frontend::Variant &variant, const KnownSizes &sizes, bool backward,
            std::string &source, std::string &warnings,
            std::optional<int64_t> pageSize = std::nullopt) {
  frontend::KernelOptions options;
  options.headDim = sizes.headDim;
  std::optional<int64_t> headDim = frontend::resolveHeadDim(variant, options);
  if (!headDim)
    return std::nullopt; // the compilation reports the contradiction
  std::optional<tuning::TuningKey> key =
      tuning::makeKey(*tuning.context, ast, *tuning.sourceMgr, variant.name, *headDim,
                      tuning.queryLength, tuning.keyLength, tuning.gpu,
                      tuning.computeCapability, backward, pageSize);
  if (!key)
    return std::nullopt; // the variant does not build: its compilation says why
  tuning::TuningCache cache(tuning.cachePath);
  std::optional<tuning::TuningEntry> entry = cache.lookup(*key, warnings);
  if (!entry) {
    source = "default tile (no " + std::string(backward ? "backward " : "") +
             "tuning cache entry for " + tuning.gpu + ", " + key->shapeBucket + ", variant " +
             key->variant + ")";
    return std::nullopt;
  }
  source = "tuned for " + tuning.gpu + " (" + cache.path() + "): " + entry->config.str();
  return entry;
}

llvm::Expected<KernelConfig> config::resolveKernelConfig(const ResolveOptions &options,
                                                         const frontend::Module &ast,
                                                         llvm::StringRef onlyVariant) {
  KernelConfig result;
  ConfigRequest request = options.request;
  bool tuned = false;
  // The variant whose tuned winners apply (the backward's is looked up
  // once the GEMM is known).
  const frontend::Variant *tunedVariant = nullptr;
  if (!request.empty()) {
    result.sourceText = "command line";
  } else if (!options.tuning) {
    result.sourceText = options.noTuningReason.empty()
                            ? std::string("default tile")
                            : "default tile (" + options.noTuningReason + ")";
  } else {
    const frontend::Variant *variant = !onlyVariant.empty() ? ast.lookup(onlyVariant)
                                       : ast.variants.size() == 1 ? &ast.variants.front()
                                                                  : nullptr;
    result.sourceText = "default tile";
    if (!variant) {
      result.sourceText =
          "default tile (the tuning cache applies to one variant: use --variant)";
    } else if (std::optional<tuning::TuningEntry> winner =
                   lookUpTuned(*options.tuning, ast, *variant, options.sizes,
                               /*backward=*/false, result.sourceText, result.warningText,
                               options.request.pageSize)) {
      llvm::Expected<std::string> runnable = selectGemm(options.chip, winner->config.gemm);
      if (!runnable) {
        llvm::consumeError(runnable.takeError());
        result.sourceText = "default tile (the tuning cache's winner for " +
                            options.tuning->gpu + " is a " + winner->config.gemm +
                            " kernel, which " + options.chip + " cannot run)";
      } else {
        request = winner->config.request();
        tuned = true;
      }
    }
    tunedVariant = variant;
  }

  nvptx::TargetOptions &target = result.targetOptions;
  target.chip = options.chip;
  target.gemm = request.gemm.value_or("auto");
  target.kvCopy = request.kvCopy.value_or("tma");
  target.overlapSoftmax = request.overlapSoftmax.value_or(false);
  target.warpSpecialize = request.warpSpecialize.value_or("auto");
  target.pingPong = request.pingPong.value_or(true);
  target.pagedLastBlock = request.pagedLastBlock.value_or("gather");
  target.rowsPerWarp = request.rowsPerWarp.value_or(0);
  target.persistent = request.persistent.value_or(
      persistentGridPays(options.sizes.queryLength, /*readsTensors=*/false));
  target.persistentWithTensors = request.persistent.value_or(
      persistentGridPays(options.sizes.queryLength, /*readsTensors=*/true));
  // A kernel that splits its keys runs a CTA per (query tile, split).
  result.splitKeys = request.splitKeys.value_or(splitKeysPays(options.sizes.queryLength));
  result.packHeads = request.packHeads.value_or(packHeadsPays(options.sizes.queryLength));
  result.packAsked = request.packHeads.value_or(false);
  result.pageSize = options.request.pageSize; // the caller's cache, tuned or not
  // (A packed kernel is never persistent either: flash-to-sm90 sees to
  // that per kernel, so the MHA variants of a module keep their grid.)
  if (result.splitKeys)
    target.persistent = target.persistentWithTensors = false;

  llvm::Expected<std::string> gemm = selectGemm(target.chip, target.gemm);
  if (!gemm)
    return gemm.takeError();
  result.gemmKind = *gemm;
  result.warpSpecializedTiles =
      usesWarpSpecializedTiles(result.gemmKind, target.kvCopy, target.warpSpecialize);
  result.queryLength = options.sizes.queryLength;
  if (request.blockRows && *request.blockRows > 0)
    result.blockRows = request.blockRows;
  if (request.blockCols && *request.blockCols > 0)
    result.blockCols = request.blockCols;
  // The backward's knobs are the caller's even where a tuned forward
  // winner replaced the request (it knows nothing of them).
  const ConfigRequest &callerRequest = options.request;
  result.backwardBlockRows = callerRequest.backwardBlockRows;
  result.backwardBlockCols = callerRequest.backwardBlockCols;
  result.backwardBlockSummary = callerRequest.backwardBlockSummary;
  result.deterministicBackward = callerRequest.deterministicBackward;
  result.queryGradAddsByDefault = callerRequest.queryGradAddsByDefault;
  result.backwardSourceText = result.sourceText == "command line"
                                  ? std::string("command line")
                                  : std::string("default tile");
  if (callerRequest.backwardBlockRows || callerRequest.backwardBlockCols) {
    result.backwardSourceText = "command line";
  } else if (tunedVariant) {
    std::string source;
    if (std::optional<tuning::TuningEntry> winner =
            lookUpTuned(*options.tuning, ast, *tunedVariant, options.sizes, /*backward=*/true,
                        source, result.warningText)) {
      if (winner->config.gemm != result.gemmKind) {
        source = "default tile (the tuned backward winner is a " + winner->config.gemm +
                 " kernel; this compilation uses " + result.gemmKind + ")";
      } else {
        result.tunedBackward = TileChoice{winner->config.blockRows, winner->config.blockCols,
                                          source};
      }
    }
    result.backwardSourceText = source;
  }

  // The target-level decisions, for --verbose.
  std::string asked = tuned ? "tuned" : "asked for";
  result.targetReasons.push_back(
      "GEMM " + result.gemmKind +
      (request.gemm && *request.gemm != "auto" ? " (" + asked + ")"
                                               : ": the default on " + target.chip));
  if (request.persistent)
    result.gridAskedText = asked;
  if (result.splitKeys)
    result.targetReasons.push_back(
        request.splitKeys ? "keys split at launch (" + asked + ")"
                          : "keys split at launch: decode (N = " +
                                std::to_string(*options.sizes.queryLength) + " <= " +
                                std::to_string(kDecodeMaxQueryLength) + ")");
  else if (request.splitKeys)
    result.targetReasons.push_back("keys not split (" + asked + ")");
  if (result.packHeads)
    result.packReason =
        request.packHeads ? "GQA query heads packed per KV group (" + asked + ")"
                          : "GQA query heads packed per KV group: decode (N = " +
                                std::to_string(*options.sizes.queryLength) + " <= " +
                                std::to_string(kDecodeMaxQueryLength) + ")";
  else if (request.packHeads)
    result.packReason = "GQA query heads not packed (" + asked + ")";
  return result;
}
