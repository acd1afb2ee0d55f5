//===- Autotune.h - flashc-tune's candidate loop ----------------*- C++ -*-===//
//
// The candidates of a search space plus the default configuration (the
// resolver's, flashc/Config/KernelConfig.h), each compiled (the compiler's
// checks prune what does not fit), assembled with ptxas -v when one is
// found (a spill prunes), validated on the GPU against the interpreter on
// a small shape and timed with CUDA events on the real one, within a time
// budget. Every candidate that does not run keeps the reason. flashc-tune
// is the command line around it (the table, the tuning cache).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_TUNING_AUTOTUNE_H
#define FLASHC_TUNING_AUTOTUNE_H

#include "flashc/Frontend/AST.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Target/Package/KernelPackage.h"
#include "flashc/Tuning/Tuning.h"

#include "flashrt/Device.h"
#include "flashrt/Package.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/FunctionExtras.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace flashc::tuning {

struct Candidate {
  TileConfig config;
  bool isDefault = false;
  std::string reason; // why it did not run; empty when it did
  int64_t registers = -1, sharedBytes = 0;
  double ms = 0, tflops = 0, outError = 0;
  std::optional<flashrt::KernelPackage> package;
  mlir::OwningOpRef<mlir::ModuleOp> module; // flash IR of this configuration
};

/// One variant of a parsed file at one shape on one target.
struct TuningProblem {
  mlir::MLIRContext *context = nullptr;
  const frontend::Module *ast = nullptr;
  llvm::SourceMgr *sourceMgr = nullptr;
  std::string variant;
  std::string chip;
  /// The shape timed and the (smaller) shape validated.
  interp::ProblemShape shape, checkShape;
  /// Tune the backward kernels (validated against the interpreter's
  /// backward, timed from a GPU forward's O and LSE) instead of the forward.
  bool backward = false;
  /// The page of a paged K/V cache whose variant gives none (--paged).
  std::optional<int64_t> pageSize;
};

struct TimingOptions {
  int warmup = 5, iterations = 20;
  uint64_t seed = 1;
  bool causalFlops = false;
  std::chrono::seconds budget{60};
  /// The budget as the user wrote it, for the reason of candidates it cut.
  std::string budgetText = "60s";
};

/// Told before each stage of a candidate ("compile", "ptxas", "validate",
/// "time"): how many of `total` are done.
using Progress = llvm::function_ref<void(const Candidate &, llvm::StringRef stage, size_t done,
                                         size_t total)>;

/// Every configuration of `space` (its backward tiles for a backward
/// problem), plus the resolver's default for `problem` when the space lacks
/// it; the default is marked.
llvm::Expected<std::vector<Candidate>> makeCandidates(const SearchSpace &space,
                                                      const TuningProblem &problem);

/// Compiles every candidate through `cache`; with `ptxas` (empty: none)
/// assembles it and reads its registers. A candidate that cannot run gets
/// its reason.
void compileCandidates(std::vector<Candidate> &candidates, const TuningProblem &problem,
                       const CompileCache &cache, const std::string &ptxas, Progress progress);

/// On the GPU of `gpu`: validates every compiled candidate (reason empty)
/// at problem.checkShape against the interpreter on `keyKernel`'s inputs
/// and times it at problem.shape, until `timing.budget` (counted from
/// `started`) is spent. Backward candidates are timed from the O and LSE
/// of one GPU forward (`keyModule`'s kernel) and count 2.5x its FLOPs. Throws flashrt::Error only when the inputs cannot be
/// uploaded; a candidate's own driver error becomes its reason.
void timeCandidates(std::vector<Candidate> &candidates, flashrt::Context &gpu,
                    const TuningProblem &problem, mlir::ModuleOp keyModule,
                    const TimingOptions &timing,
                    std::chrono::steady_clock::time_point started, Progress progress);

/// `ptxas -arch=<arch> -v` on the candidate's PTX: sets its registers, or
/// returns why it must be pruned (ptxas failed, spills).
std::string assembleWithPtxas(const std::string &ptxas, Candidate &candidate);

} // namespace flashc::tuning

#endif // FLASHC_TUNING_AUTOTUNE_H
