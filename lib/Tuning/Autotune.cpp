//===- Autotune.cpp - flashc-tune's candidate loop -------------------------===//

#include "flashc/Tuning/Autotune.h"

#include "flashc/Config/KernelConfig.h"
#include "flashc/Dialect/Flash/Transforms/Passes.h"
#include "flashc/Harness/GpuHarness.h"
#include "flashc/IRGen/IRGen.h"

#include "flashrun/AttentionKernel.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"

#include <algorithm>

using namespace mlir;
using namespace flashc;
using namespace flashc::tuning;

/// The resolver's view of `problem` with `request` asked for.
static config::ResolveOptions resolveOptions(const TuningProblem &problem,
                                             const config::ConfigRequest &request) {
  config::ResolveOptions options;
  options.chip = problem.chip;
  options.request = request;
  options.request.pageSize = problem.pageSize;
  options.sizes.headDim = problem.shape.headDim();
  options.sizes.queryLength = problem.shape.queryLen();
  return options;
}

llvm::Expected<std::vector<Candidate>> tuning::makeCandidates(const SearchSpace &space,
                                                              const TuningProblem &problem) {
  const frontend::Variant *variant = problem.ast->lookup(problem.variant);
  if (!variant)
    return llvm::createStringError("no variant named '" + problem.variant + "'");
  llvm::Expected<config::KernelConfig> resolved =
      config::resolveKernelConfig(resolveOptions(problem, {}), *problem.ast, problem.variant);
  if (!resolved)
    return resolved.takeError();
  TileConfig defaultConfig = resolved->asTileConfig(*variant, problem.shape.headDim());
  if (problem.backward) {
    config::TileChoice tile = resolved->backwardTileFor(*variant, problem.shape.headDim());
    defaultConfig = TileConfig{tile.blockRows, tile.blockCols, resolved->gemm().str(),
                               "cp.async", 0, /*overlapSoftmax=*/false};
    defaultConfig.backward = true;
  }
  std::vector<Candidate> candidates;
  for (const TileConfig &config :
       problem.backward ? space.enumerateBackward() : space.enumerate())
    candidates.push_back({config});
  auto isDefault = [&](const Candidate &c) { return c.config == defaultConfig; };
  if (std::none_of(candidates.begin(), candidates.end(), isDefault))
    candidates.push_back({defaultConfig});
  for (Candidate &c : candidates)
    c.isDefault = isDefault(c);
  return candidates;
}

std::string tuning::assembleWithPtxas(const std::string &ptxas, Candidate &c) {
  llvm::SmallString<128> ptx, log;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("flashc-tune", "ptx", fd, ptx))
    return "";
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << c.package->ptx;
    os.close();
    if (os.has_error()) {
      std::string why = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(ptx);
      return "cannot write the PTX for ptxas: " + why;
    }
  }
  llvm::sys::fs::createTemporaryFile("flashc-tune", "log", log);
  std::string arch = "-arch=" + c.package->arch;
  llvm::StringRef args[] = {ptxas, arch, "-v", ptx, "-o", "/dev/null"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(), log.str()};
  int status = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects);
  std::string report;
  if (auto buffer = llvm::MemoryBuffer::getFile(log))
    report = (*buffer)->getBuffer().str();
  llvm::sys::fs::remove(ptx);
  llvm::sys::fs::remove(log);
  if (status != 0)
    return "ptxas failed: " + llvm::StringRef(report).trim().str();
  // Registers are the main kernel's (a backward package also holds its
  // preprocess and convert kernels); a spill in any kernel prunes.
  llvm::StringRef rest = report;
  std::string entry = "entry function '" + c.package->kernelName + "'";
  size_t section = rest.find(entry);
  llvm::SmallVector<llvm::StringRef> match;
  if (section != llvm::StringRef::npos &&
      llvm::Regex("Used ([0-9]+) registers").match(rest.substr(section), &match))
    match[1].getAsInteger(10, c.registers);
  while (llvm::Regex("([0-9]+) bytes spill stores").match(rest, &match)) {
    if (match[1] != "0")
      return "spills " + match[1].str() + " bytes (ptxas)";
    rest = rest.substr(rest.find(match[0]) + match[0].size());
  }
  return "";
}

/// Compiles one candidate into its package, or returns why it cannot be.
static std::string compileCandidate(Candidate &c, const TuningProblem &problem,
                                    const CompileCache &cache) {
  if (c.config.gemm == "wgmma" && problem.chip != "sm_90a")
    return "wgmma needs sm_90a (this target is " + problem.chip + ")";
  llvm::Expected<config::KernelConfig> resolved = config::resolveKernelConfig(
      resolveOptions(problem, c.config.request()), *problem.ast, problem.variant);
  if (!resolved)
    return "compile: " + llvm::toString(resolved.takeError());
  std::string diagnostics;
  ScopedDiagnosticHandler capture(problem.context, [&](Diagnostic &diag) {
    llvm::raw_string_ostream(diagnostics) << diag.str();
    return success();
  });
  // Front-end errors name this candidate's failure instead of printing.
  llvm::SourceMgr &sourceMgr = *problem.sourceMgr;
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diag, void *out) {
        llvm::raw_string_ostream(*static_cast<std::string *>(out)) << diag.getMessage();
      },
      &diagnostics);
  std::optional<int64_t> headDim = problem.shape.headDim();
  c.module = frontend::emitFlashIR(*problem.context, *problem.ast,
                                   problem.backward ? resolved->backwardKernelOptions(headDim)
                                                    : resolved->kernelOptions(headDim),
                                   sourceMgr, problem.variant);
  sourceMgr.setDiagHandler(nullptr);
  if (c.module) {
    PassManager pm(problem.context);
    flash::buildFlashPipeline(pm);
    if (failed(pm.run(*c.module)))
      c.module = nullptr;
  }
  if (c.module) {
    int hits = 0;
    std::string cacheWarnings;
    FailureOr<std::vector<flashrt::KernelPackage>> packages =
        buildKernelPackages(*c.module, resolved->target(), cache, hits, cacheWarnings);
    if (succeeded(packages))
      c.package = (*packages)[0];
  }
  if (!c.package)
    return "compile: " + (diagnostics.empty() ? std::string("failed") : diagnostics);
  // The compiler keeps some tiles off the persistent grid (D = 256 above
  // Bc = 64): such a candidate is its per-tile twin, not worth timing
  // again, and must not be recorded under the wrong name.
  if (c.config.persistent && *c.config.persistent && !c.package->persistent)
    return "the compiler keeps this tile off the persistent grid (the per-tile candidate is "
           "the same kernel)";
  return "";
}

void tuning::compileCandidates(std::vector<Candidate> &candidates, const TuningProblem &problem,
                               const CompileCache &cache, const std::string &ptxas,
                               Progress progress) {
  size_t done = 0;
  for (Candidate &c : candidates) {
    progress(c, "compile", done, candidates.size());
    c.reason = compileCandidate(c, problem, cache);
    if (c.reason.empty()) {
      c.sharedBytes = c.package->dynamicSharedBytes;
      if (!ptxas.empty()) {
        progress(c, "ptxas", done, candidates.size());
        c.reason = assembleWithPtxas(ptxas, c);
      }
    }
    ++done;
  }
}

/// The forward kernel of `keyModule` (the key tile, the resolver's target
/// options) loaded on `gpu`, or why it cannot be.
static std::string compileForward(const TuningProblem &problem, ModuleOp keyModule,
                                  std::optional<flashrun::AttentionKernel> &forward,
                                  flashrt::Context &gpu) {
  llvm::Expected<config::KernelConfig> resolved =
      config::resolveKernelConfig(resolveOptions(problem, {}), *problem.ast, problem.variant);
  if (!resolved)
    return "the forward for O and LSE: " + llvm::toString(resolved.takeError());
  std::string diagnostics;
  ScopedDiagnosticHandler capture(problem.context, [&](Diagnostic &diag) {
    llvm::raw_string_ostream(diagnostics) << diag.str();
    return success();
  });
  OwningOpRef<ModuleOp> module = keyModule.clone();
  PassManager pm(problem.context);
  flash::buildFlashPipeline(pm);
  if (failed(pm.run(*module)))
    return "the forward for O and LSE does not compile: " + diagnostics;
  FailureOr<std::vector<flashrt::KernelPackage>> packages =
      buildKernelPackages(*module, resolved->target());
  if (failed(packages))
    return "the forward for O and LSE does not compile: " + diagnostics;
  forward.emplace(gpu, (*packages)[0]);
  return "";
}

/// Validates a backward candidate against the interpreter at the check
/// shape, then times its three launches at the timed shape.
static void timeBackwardCandidate(Candidate &c, flashrt::Context &gpu, flashrt::Stream &stream,
                                  harness::DeviceProblem &check, harness::DeviceProblem &timed,
                                  flash::KernelOp keyKernel, const TuningProblem &problem,
                                  const TimingOptions &timing, Progress progress, size_t done,
                                  size_t total) {
  flash::BackwardKernelOp backwardOp = *c.module->getOps<flash::BackwardKernelOp>().begin();
  progress(c, "validate", done, total);
  flashrun::BackwardKernel kernel(gpu, *c.package);
  std::string error;
  std::optional<harness::BackwardValidation> validation = harness::validateBackward(
      gpu, kernel, stream, check, keyKernel, backwardOp, timing.seed, error);
  if (!validation) {
    c.reason = "interpreter: " + error;
    return;
  }
  if (!validation->passed()) {
    c.reason = "validation failed: dQ rel " +
               llvm::formatv("{0:e2}", validation->dq.relative).str() + ", dK rel " +
               llvm::formatv("{0:e2}", validation->dk.relative).str() + ", dV rel " +
               llvm::formatv("{0:e2}", validation->dv.relative).str();
    return;
  }
  c.outError = std::max({validation->dq.relative, validation->dk.relative,
                         validation->dv.relative});
  progress(c, "time", done, total);
  harness::BackwardProblem backward = harness::uploadBackward(
      gpu, backwardOp, timed, timing.seed, kernel.workspaceBytes(timed.sizes()));
  c.ms = harness::timeBackward(kernel, stream, timed, backward, timing.warmup,
                               timing.iterations);
  c.tflops = 2.5 * harness::tflops(problem.shape, c.ms, timing.causalFlops);
}

void tuning::timeCandidates(std::vector<Candidate> &candidates, flashrt::Context &gpu,
                            const TuningProblem &problem, ModuleOp keyModule,
                            const TimingOptions &timing,
                            std::chrono::steady_clock::time_point started, Progress progress) {
  size_t total = std::count_if(candidates.begin(), candidates.end(),
                               [](const Candidate &c) { return c.reason.empty(); });
  if (total == 0)
    return;
  flash::KernelOp keyKernel = *keyModule.getOps<flash::KernelOp>().begin();
  flashrt::Stream stream(gpu);
  llvm::StringMap<double> noParams;
  // Every candidate is the same variant: one set of inputs serves all.
  harness::DeviceProblem check = harness::upload(gpu, keyKernel, problem.checkShape, noParams,
                                                 timing.seed, harness::Layout::BHSD);
  harness::DeviceProblem timed = harness::upload(gpu, keyKernel, problem.shape, noParams,
                                                 timing.seed, harness::Layout::BHSD);
  // The backward runs from a forward's O and LSE at the timed shape: one
  // GPU forward of the key-tile kernel writes them.
  if (problem.backward) {
    std::optional<flashrun::AttentionKernel> forward;
    std::string why = compileForward(problem, keyModule, forward, gpu);
    if (!why.empty()) {
      for (Candidate &c : candidates)
        if (c.reason.empty())
          c.reason = why;
      return;
    }
    harness::timeKernel(*forward, stream, timed, /*warmup=*/0, /*iterations=*/1);
  }
  size_t done = 0;
  for (Candidate &c : candidates) {
    if (!c.reason.empty())
      continue;
    if (std::chrono::steady_clock::now() - started > timing.budget) {
      c.reason = "not run: the " + timing.budgetText + " budget was spent";
      continue;
    }
    if (problem.backward) {
      try {
        timeBackwardCandidate(c, gpu, stream, check, timed, keyKernel, problem, timing,
                              progress, done, total);
      } catch (const flashrt::Error &error) {
        c.reason = std::string(flashrt::errorKindName(error.kind())) + ": " + error.what();
      }
      ++done;
      continue;
    }
    flash::KernelOp flashKernel = *c.module->getOps<flash::KernelOp>().begin();
    try {
      progress(c, "validate", done, total);
      flashrun::AttentionKernel kernel(gpu, *c.package);
      std::string error;
      std::optional<harness::Validation> validation =
          harness::validate(kernel, stream, check, flashKernel, error);
      if (!validation) {
        c.reason = "interpreter: " + error;
      } else if (!validation->passed()) {
        c.reason = "validation failed: O rel " +
                   llvm::formatv("{0:e2}", validation->out.relative).str() + ", LSE rel " +
                   llvm::formatv("{0:e2}", validation->lse.relative).str();
      } else {
        c.outError = validation->out.relative;
        progress(c, "time", done, total);
        c.ms = harness::timeKernel(kernel, stream, timed, timing.warmup, timing.iterations);
        c.tflops = harness::tflops(problem.shape, c.ms, timing.causalFlops);
      }
    } catch (const flashrt::Error &error) {
      c.reason = std::string(flashrt::errorKindName(error.kind())) + ": " + error.what();
    }
    ++done;
  }
}
