//===- IRGen.h - Lower checked .flash variants to flash IR ------*- C++ -*-===//
#ifndef FLASHC_IRGEN_IRGEN_H
#define FLASHC_IRGEN_IRGEN_H

#include "flashc/Config/KernelRules.h"
#include "flashc/Frontend/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <functional>
#include <optional>
#include <utility>

namespace flashc::frontend {

/// Compile-time choices that the source leaves open. IRGen chooses no tile
/// itself: the tools take it from the resolver (flashc/Config/KernelConfig.h,
/// which also knows the rules), a test or the tuning key names one.
struct KernelOptions {
  /// The tile of every variant, when `tileFor` is not set.
  int64_t blockRows = 0, blockCols = 0;
  /// The tile of each variant at its head dim (called once per variant).
  std::function<std::pair<int64_t, int64_t>(const Variant &, int64_t headDim)> tileFor;
  /// The head dim for variants whose D is symbolic (kDefaultHeadDim when
  /// unset); a fixed D in the source must agree with it when both are given.
  std::optional<int64_t> headDim;
  /// Emit each variant's `flash.backward_kernel` (the gradients) instead of
  /// its forward `flash.kernel`.
  bool backward = false;
  /// A forward kernel whose mask reads aux tensors reads a run-time block
  /// summary (`#flash.block_summary`): its empty tiles are skipped and its
  /// full ones unmasked, which interval analysis cannot prove.
  bool blockSummary = true;
  /// The same for a backward kernel: its main kernel skips the query tiles
  /// the summary of its own tiling empties and unmasks the full ones
  /// (flashc --bwd-block-summary, on by default).
  bool backwardBlockSummary = true;
  /// Backward: how a variant's kernel adds dQ where determinism was not
  /// asked for (AnyOrder: unmarked; Writer: `query_grad_writer`;
  /// KeyBlockOrder: `ordered_query_grads`); unset: AnyOrder.
  std::function<config::QueryGradAdds(const Variant &, int64_t headDim)> queryGradAddsFor;
  /// Forward kernels whose key range may be split at run time
  /// (`split_keys`, flash-decoding): partial O and LSE per split, merged by
  /// a combine step.
  bool splitKeys = false;
  /// Forward kernels that pack the query heads of one KV group into the
  /// rows of a tile (`packed_heads`, packed GQA): K and V are read once per
  /// group instead of once per query head. For decoding, where N is small.
  bool packHeads = false;
  /// With packHeads: also pack the variants whose mask reads aux tensors,
  /// which then lose their block summary. Left off (the default rule),
  /// they keep it: skipping the key blocks past ragged lengths or of other
  /// documents is worth more than reading K and V once per group.
  bool packSummarizedMasks = false;
  /// The page, in keys, of the variants with a `paged` item that give none
  /// (`--paged PAGE`); one that gives a page must agree with it.
  std::optional<int64_t> pageSize;
};

constexpr int64_t kDefaultHeadDim = 64;

/// Builds one `flash.kernel` (or, with options.backward, one
/// `flash.backward_kernel`) per variant (or only `onlyVariant` when set)
/// into a new module. Errors (an unknown variant, no head dim, a head dim
/// that contradicts the source) go through `sourceMgr` like parse errors and
/// give a null module. The returned module has passed the verifier.
mlir::OwningOpRef<mlir::ModuleOp>
emitFlashIR(mlir::MLIRContext &context, const Module &module,
            const KernelOptions &options, llvm::SourceMgr &sourceMgr,
            llvm::StringRef onlyVariant = {});

/// The head dim a variant compiles with under `options`, or nullopt when
/// the source fixes one that contradicts `options.headDim`.
std::optional<int64_t> resolveHeadDim(const Variant &variant,
                                      const KernelOptions &options);

/// The scale as a number: the variant's constant expression or 1/sqrt(D).
double evaluateScale(const Variant &variant, int64_t headDim);

} // namespace flashc::frontend

#endif // FLASHC_IRGEN_IRGEN_H
