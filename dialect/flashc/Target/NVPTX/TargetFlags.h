//===- TargetFlags.h - The GPU target's command-line flags ------*- C++ -*-===//
//
// --gemm, --kv-copy, --overlap-softmax, --warp-specialize, --ping-pong and
// --rows-per-warp, declared once for every tool that compiles kernels
// (flashc, flash-run). A tool owns one TargetFlags object (a global, so its
// options register with the command line before parsing). Also the
// --version text every flashc tool prints.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_TARGET_NVPTX_TARGETFLAGS_H
#define FLASHC_TARGET_NVPTX_TARGETFLAGS_H

#include "flashc/Target/NVPTX/EmitPTX.h"

#include "llvm/Support/CommandLine.h"

namespace flashc::nvptx {

struct TargetFlags {
  explicit TargetFlags(llvm::cl::OptionCategory &category);

  llvm::cl::opt<std::string> gemm;
  llvm::cl::opt<std::string> kvCopy;
  llvm::cl::opt<bool> overlapSoftmax;
  llvm::cl::opt<std::string> warpSpecialize;
  llvm::cl::opt<bool> pingPong;
  llvm::cl::opt<bool> persistent;
  llvm::cl::opt<int> rowsPerWarp;

  /// Whether the command line chose any of them (then no tuned config
  /// replaces them).
  bool given() const;
  /// Copies them into `options`; without --persistent the grid is
  /// persistent when `queryLength` is known and persistentGridPays says so.
  void applyTo(TargetOptions &options, std::optional<int64_t> queryLength) const;
  /// --persistent if given, else persistentGridPays(queryLength).
  bool persistentGrid(std::optional<int64_t> queryLength) const;
};

/// Makes --version print "<tool>: flashc <version> (LLVM <version>)".
void setVersionPrinter(llvm::StringRef tool);

} // namespace flashc::nvptx

#endif // FLASHC_TARGET_NVPTX_TARGETFLAGS_H
