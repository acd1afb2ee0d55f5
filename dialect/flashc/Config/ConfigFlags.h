//===- ConfigFlags.h - The kernel configuration's command-line flags -*- C++ -*-===//
//
// --gemm, --kv-copy, --overlap-softmax, --warp-specialize, --ping-pong,
// --paged-last-block, --persistent and --rows-per-warp, declared once for every tool that
// compiles kernels (flashc, flash-run). A tool owns one ConfigFlags object
// (a global, so its options register with the command line before
// parsing) and hands request() to the resolver (KernelConfig.h). Also the
// --version text every flashc tool prints.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONFIG_CONFIGFLAGS_H
#define FLASHC_CONFIG_CONFIGFLAGS_H

#include "flashc/Config/ConfigRequest.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

namespace flashc::nvptx {
struct TargetOptions;
} // namespace flashc::nvptx

namespace flashc::config {

struct ConfigFlags {
  explicit ConfigFlags(llvm::cl::OptionCategory &category);

  llvm::cl::opt<std::string> gemm;
  llvm::cl::opt<std::string> kvCopy;
  llvm::cl::opt<bool> overlapSoftmax;
  llvm::cl::opt<std::string> warpSpecialize;
  llvm::cl::opt<bool> pingPong;
  llvm::cl::opt<std::string> pagedLastBlock;
  llvm::cl::opt<bool> persistent;
  llvm::cl::opt<int> rowsPerWarp;
  llvm::cl::opt<bool> splitKeys;
  llvm::cl::opt<bool> packGqa;
  llvm::cl::opt<int64_t> paged;

  /// The flags given on the command line (those not given stay unset).
  ConfigRequest request() const;
};

/// The backward kernels' flags (flashc and flash-run): target flags, which
/// leave the tuning cache lookup alone, and --bwd-tile, which replaces the
/// backward's tuned winner only.
struct BackwardFlags {
  explicit BackwardFlags(llvm::cl::OptionCategory &category);

  llvm::cl::opt<bool> deterministic;
  llvm::cl::opt<bool> stageAuxGrads;
  llvm::cl::opt<bool> deferTurns;
  llvm::cl::opt<bool> queryGradWriter;
  llvm::cl::opt<bool> rotateQueryTiles;
  llvm::cl::opt<bool> overlapAccumulates;
  llvm::cl::opt<int> mergeBarriers;
  llvm::cl::opt<bool> blockSummary;
  llvm::cl::opt<std::string> tile;

  /// Sets them on `target`; the error names a flag given without --bwd.
  llvm::Error apply(bool backward, nvptx::TargetOptions &target) const;
  /// Adds --bwd-tile and --bwd-block-summary to `request`; the error names
  /// a bad item or the flag given without --bwd.
  llvm::Error request(bool backward, ConfigRequest &request) const;
};

/// Parses --tile's "Br=64,Bc=128" (either or both) into `request` (with
/// `backward`, --bwd-tile's into its backward tile); the error names the
/// flag and the item.
llvm::Error parseTile(llvm::StringRef spec, ConfigRequest &request, bool backward = false);

/// Makes --version print "<tool>: flashc <version> (LLVM <version>)".
void setVersionPrinter(llvm::StringRef tool);

} // namespace flashc::config

#endif // FLASHC_CONFIG_CONFIGFLAGS_H
