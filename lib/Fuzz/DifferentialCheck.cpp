//===- DifferentialCheck.cpp - One generated variant, every check ----------===//

#include "flashc/Fuzz/DifferentialCheck.h"

#include "flashc/Config/KernelConfig.h"
#include "flashc/Dialect/Flash/Transforms/Passes.h"
#include "flashc/Frontend/Derivative.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/BackwardCheck.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"
#include "flashc/Interpreter/VariantReference.h"
#include "flashc/Target/NVPTX/EmitPTX.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

using namespace mlir;
using namespace flashc;
using namespace flashc::fuzz;

namespace {

CheckResult fail(std::string stage, std::string message) {
  return {Outcome::Fail, std::move(stage), std::move(message)};
}
CheckResult skip(std::string why, std::string detail = "") {
  return {Outcome::Skip, std::move(why), std::move(detail)};
}

std::string format(double value) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.2e", value);
  return text;
}

/// Whether IRGen refused the variant for a score or scale that is NaN or
/// +inf for every input (on purpose: nothing sensible can be computed).
bool rejectsNonFiniteConstant(llvm::StringRef diagnostics) {
  return diagnostics.contains("error: the score is") || diagnostics.contains("error: the scale is");
}

/// The element type's bound on O's relative error (its rounding of O).
double outputBound(llvm::StringRef elementType) {
  return elementType == "bf16" ? 1e-2 : elementType == "f16" ? 2e-3 : 1e-5;
}

/// Parses the case, reporting diagnostics into `diagnostics`.
struct ParsedCase {
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  std::optional<frontend::Module> ast;

  explicit ParsedCase(const GeneratedCase &c) {
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diag, void *out) {
          llvm::raw_string_ostream os(*static_cast<std::string *>(out));
          diag.print("fuzz.flash", os, /*ShowColors=*/false);
        },
        &diagnostics);
    sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(c.source(), "fuzz.flash"),
                                 llvm::SMLoc());
    ast = frontend::parseFlashFile(sourceMgr);
  }
};

/// PTX for `chip` at the default tile and head dim `headDim` (of the
/// backward kernels with `backward`; `exactAuxGrads`: deterministic, aux
/// gradients staged, and on odd seeds the dQ turns deferred; a backward
/// on every fourth seed takes the dQ writer warp, on another fourth
/// the rotated query-tile walk, on every third seed waits for the dK
/// and dV products at once, and merges the body's per-tile barriers at
/// level (seed / 5) mod 5 - 1, -1 the default), assembled by `ptxas`
/// when given. With `pagedPage` the forward over a paged cache of that
/// many keys per page, as a prefill (N = 1024) with the default
/// --warp-specialize=auto: where the rules give it the warp-specialized
/// tile, the kernel must have its producer warpgroup. With
/// `pagedLastBlockByTma` (--paged-last-block=tma) a kernel without one must
/// not gather (no cp.async arrival on a barrier).
CheckResult checkPTX(const GeneratedCase &c, ParsedCase &parsed, MLIRContext &context,
                     llvm::StringRef chip, const std::string &ptxas, bool backward = false,
                     bool exactAuxGrads = false, int64_t headDim = 64,
                     int64_t pagedPage = 0, bool pagedLastBlockByTma = false) {
  bool deferTurns = exactAuxGrads && c.seed % 2;
  bool queryGradWriter = backward && c.seed % 4 == 2;
  bool rotateQueryTiles = backward && !exactAuxGrads && c.seed % 4 == 3;
  bool overlapAccumulates = !(backward && c.seed % 3 == 1);
  // -1: the default by head dim.
  int64_t mergeBarriers = backward ? static_cast<int64_t>(c.seed / 5 % 5) - 1 : -1;
  std::string stage = (backward ? "backward ptx " : "ptx ") + chip.str() +
                      (headDim != 64 ? " D = " + std::to_string(headDim) : std::string()) +
                      (exactAuxGrads ? " --deterministic --stage-aux-grads" : "") +
                      (deferTurns ? " --defer-turns" : "") +
                      (queryGradWriter ? " --dq-writer" : "") +
                      (rotateQueryTiles ? " --bwd-rotate-tiles" : "") +
                      (overlapAccumulates ? "" : " --bwd-overlap-accumulates=false") +
                      (mergeBarriers >= 0
                           ? " --bwd-merge-barriers=" + std::to_string(mergeBarriers)
                           : std::string()) +
                      (pagedPage ? " --paged " + std::to_string(pagedPage) + " N = 1024"
                                 : std::string()) +
                      (pagedLastBlockByTma ? " --paged-last-block=tma" : "");
  // The paged item is set for the resolver and IRGen, and reset on return.
  frontend::Variant &variant = parsed.ast->variants.front();
  if (pagedPage)
    variant.paged = frontend::PagedDecl{"fuzz_block_table", "fuzz_kv_len", pagedPage, variant.loc};
  llvm::scope_exit unpage([&] { variant.paged.reset(); });
  config::ResolveOptions resolve;
  resolve.chip = chip.str();
  resolve.sizes.headDim = headDim;
  resolve.sizes.queryLength = pagedPage ? 1024 : c.queryLen;
  llvm::Expected<config::KernelConfig> resolved = config::resolveKernelConfig(resolve, *parsed.ast);
  if (!resolved)
    return fail(stage, llvm::toString(resolved.takeError()));
  std::string diagnostics;
  ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      llvm::raw_string_ostream(diagnostics) << diag.str() << "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = frontend::emitFlashIR(
      context, *parsed.ast,
      backward ? resolved->backwardKernelOptions(headDim) : resolved->kernelOptions(headDim),
      parsed.sourceMgr);
  // The backward check has judged the backward's IRGen (a derivative too
  // large to form is a located error, not a lowering bug).
  if (!module && backward)
    return skip("no backward kernel at D = " + std::to_string(headDim), parsed.diagnostics);
  if (!module) {
    // At this D a constant over D may be NaN where the case's D was not.
    if (rejectsNonFiniteConstant(parsed.diagnostics))
      return skip("a constant score or scale that is not finite at D = " +
                      std::to_string(headDim),
                  parsed.diagnostics);
    return fail(stage, "IRGen: " + parsed.diagnostics);
  }
  PassManager pm(&context);
  flash::buildFlashPipeline(pm);
  if (failed(pm.run(*module)))
    return fail(stage, "pipeline: " + diagnostics);
  nvptx::TargetOptions target = resolved->target();
  target.deterministic = target.stageAuxGrads = exactAuxGrads;
  target.deferTurns = deferTurns;
  target.queryGradWriter = queryGradWriter;
  target.rotateQueryTiles = rotateQueryTiles;
  target.overlapAccumulates = overlapAccumulates;
  target.mergeBarriers = mergeBarriers;
  if (pagedLastBlockByTma)
    target.pagedLastBlock = "tma";
  FailureOr<nvptx::CompiledPTX> compiled = nvptx::compileToPTX(*module, target);
  if (failed(compiled))
    return fail(stage, diagnostics.empty() ? std::string("compileToPTX failed") : diagnostics);
  // (`on` may specialize other tiles too: the kernel's copies decide.)
  if (pagedPage) {
    config::TileChoice tile = resolved->tileFor(variant, headDim);
    if (tile.blockRows >= 128 && resolved->warpSpecializedTilesFor(variant, headDim) &&
        !llvm::StringRef(compiled->ptx).contains("setmaxnreg.dec"))
      return fail(stage, "the warp-specialized tile without a producer warpgroup in the PTX (" +
                             tile.why + ")");
    llvm::StringRef ptx = compiled->ptx;
    if (pagedLastBlockByTma && !ptx.contains("setmaxnreg.dec") &&
        ptx.contains("cp.async.mbarrier.arrive"))
      return fail(stage, "--paged-last-block=tma, and the one-warpgroup kernel still gathers");
  }
  if (ptxas.empty())
    return {};
  llvm::SmallString<128> file, log;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("flashc-fuzz", "ptx", fd, file))
    return fail(stage, "cannot create a temporary file for ptxas");
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << compiled->ptx;
  }
  llvm::sys::fs::createTemporaryFile("flashc-fuzz", "log", log);
  std::string arch = "-arch=" + chip.str();
  llvm::StringRef args[] = {ptxas, arch, file, "-o", "/dev/null"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(), log.str()};
  int status = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects);
  std::string report;
  if (auto buffer = llvm::MemoryBuffer::getFile(log))
    report = (*buffer)->getBuffer().str();
  llvm::sys::fs::remove(file);
  llvm::sys::fs::remove(log);
  if (status != 0)
    return fail("ptxas " + chip.str(), report);
  return {};
}

/// Check 5: the backward kernel, after the pipeline, against the fp64
/// reference's gradients, from the final forward kernel's O and LSE, with
/// the tile claims checked element by element in the transposed loop too.
CheckResult checkBackwardCase(const GeneratedCase &c, ParsedCase &parsed, MLIRContext &context,
                              std::string &diagnostics, flash::KernelOp forward,
                              const interp::AttentionInputs &inputs, double bound,
                              const CheckOptions &options) {
  const char *stage = "interpreter backward";
  if (bound > options.maxBound)
    return skip("scores too large for an f32 comparison of gradients");
  frontend::KernelOptions kernelOptions;
  kernelOptions.blockRows = c.blockRows;
  kernelOptions.blockCols = c.blockCols;
  kernelOptions.headDim = c.headDim;
  kernelOptions.backward = true;
  // First without a block summary: the summarized backward is compared
  // with this one below.
  kernelOptions.backwardBlockSummary = false;
  OwningOpRef<ModuleOp> module =
      frontend::emitFlashIR(context, *parsed.ast, kernelOptions, parsed.sourceMgr);
  if (!module) {
    // The only refusal the backward adds: a derivative too large to form.
    if (parsed.diagnostics.find("cannot form the backward pass") != std::string::npos)
      return skip("a derivative too large to form", parsed.diagnostics);
    return fail("IRGen backward", parsed.diagnostics + diagnostics);
  }
  PassManager pm(&context);
  flash::buildFlashPipeline(pm);
  if (failed(pm.run(*module)))
    return fail("pass pipeline (backward)", diagnostics);
  auto backward = *module->getOps<flash::BackwardKernelOp>().begin();

  std::string error;
  interp::RunOptions run;
  run.checkClassification = true;
  interp::AttentionOutputs outputs;
  if (failed(interp::runKernel(forward, inputs, outputs, error, run)))
    return fail(stage, error);
  std::vector<float> outputGrad = interp::makeRandomOutputGrad(forward, inputs.shape, c.seed);
  interp::BackwardInputs backwardInputs{outputs.out, outputs.lse, outputGrad};
  const frontend::Variant &variant = parsed.ast->variants.front();
  interp::ReferenceSpec spec = interp::referenceFor(variant, inputs);
  // The kernel evaluates the symbolic ∂score/∂s in f32: what its rounding
  // explains (kDerivativeErrorPerScale times its roundingScale) is forgiven, so a
  // cancelling derivative (s * (30 / s) gives 30/s - 30/s) is not a failure.
  std::optional<frontend::ScoreDerivatives> derivatives =
      frontend::differentiateScore(variant, parsed.sourceMgr);
  if (derivatives && derivatives->wrtScore)
    interp::addDerivativeRounding(spec, variant, *derivatives->wrtScore, inputs);
  // Whether an intermediate of ∂score/∂s leaves the f32 range somewhere
  // (its rounding scale, which counts every intermediate's magnitude, does):
  // tanh(exp(30 * s)) is then (1 - 1) · inf = NaN in f32, as in any f32
  // autodiff (PyTorch's too), while the fp64 reference stays finite.
  bool derivativeOverflows = false;
  if (auto explained = spec.scoreDerivativeError)
    spec.scoreDerivativeError = [&derivativeOverflows, explained](double s, int64_t b, int64_t h,
                                                                 int64_t i, int64_t j) {
      double error = explained(s, b, h, i, j);
      if (!(error / interp::kDerivativeErrorPerScale <= std::numeric_limits<float>::max()))
        derivativeOverflows = true;
      return error;
    };
  interp::AttentionGradients gradients;
  if (failed(interp::runBackwardKernel(backward, inputs, backwardInputs, gradients, error, run)))
    return fail(stage, error);
  interp::ReferenceGradients reference =
      interp::naiveAttentionBackward(inputs, spec, outputGrad);
  auto check = [&](llvm::StringRef name, const interp::ErrorStats &stats) -> CheckResult {
    if (stats.passes(bound) || (stats.nonFinite == 0 && stats.maxAbs <= bound))
      return {};
    if (stats.nonFinite && derivativeOverflows)
      return skip("the score's derivative leaves the f32 range for these inputs",
                  name.str() + ": " + std::to_string(stats.nonFinite) + " NaN/inf");
    return fail(stage, name.str() + " rel " + format(stats.relative) + ", max " +
                           format(stats.maxAbs) + " (bound " + format(bound) + ", " +
                           std::to_string(stats.nonFinite) + " NaN/inf)");
  };
  // Every gradient relative to the magnitudes summed into it: random scores
  // make one-hot rows, whose dP − Δ cancels (ReferenceGradients).
  std::vector<double> none(reference.dv.size(), 0.0);
  for (auto [name, actual, expected, sizes, explained] :
       {std::make_tuple("dQ", &gradients.dq, &reference.dq, &reference.dqSizes,
                        &reference.dqErrors),
        std::make_tuple("dK", &gradients.dk, &reference.dk, &reference.dkSizes,
                        &reference.dkErrors),
        std::make_tuple("dV", &gradients.dv, &reference.dv, &reference.dvSizes, &none)}) {
    CheckResult result = check(name, interp::compare(*actual, *expected, *sizes, *explained));
    if (result.outcome != Outcome::Pass)
      return result;
  }
  // The same backward reading a block summary of its own tiling
  // (--bwd-block-summary) skips the query tiles the summary empties and
  // unmasks the full ones; either way those tiles add exact zeros, so every
  // gradient must come out bitwise the same.
  if (variant.maskReadsTensors()) {
    kernelOptions.backwardBlockSummary = true;
    const char *summaryStage = "interpreter backward (block summary)";
    OwningOpRef<ModuleOp> summarized =
        frontend::emitFlashIR(context, *parsed.ast, kernelOptions, parsed.sourceMgr);
    if (!summarized)
      return fail(summaryStage, parsed.diagnostics + diagnostics);
    PassManager summaryPm(&context);
    flash::buildFlashPipeline(summaryPm);
    if (failed(summaryPm.run(*summarized)))
      return fail(summaryStage, diagnostics);
    interp::AttentionGradients skipped;
    if (failed(interp::runBackwardKernel(*summarized->getOps<flash::BackwardKernelOp>().begin(),
                                         inputs, backwardInputs, skipped, error, run)))
      return fail(summaryStage, error);
    auto sameBits = [](const std::vector<float> &x, const std::vector<float> &y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
    };
    for (auto [name, x, y] : {std::make_tuple("dQ", &skipped.dq, &gradients.dq),
                              std::make_tuple("dK", &skipped.dk, &gradients.dk),
                              std::make_tuple("dV", &skipped.dv, &gradients.dv)})
      if (!sameBits(*x, *y))
        return fail(summaryStage, std::string(name) + " differs from the backward without one");
    for (const auto &entry : gradients.tensorGrads) {
      auto it = skipped.tensorGrads.find(entry.getKey());
      if (it == skipped.tensorGrads.end() || !sameBits(it->second, entry.getValue()))
        return fail(summaryStage, ("d(" + entry.getKey() + ") differs from the backward "
                                   "without one").str());
    }
  }
  for (const auto &entry : gradients.tensorGrads) {
    std::vector<double> zeros(entry.getValue().size(), 0.0);
    auto lookup = [&](const llvm::StringMap<std::vector<double>> &map) {
      auto it = map.find(entry.getKey());
      return it == map.end() ? llvm::ArrayRef<double>(zeros) : llvm::ArrayRef<double>(it->second);
    };
    CheckResult result =
        check(("d(" + entry.getKey() + ")").str(),
              interp::compare(entry.getValue(), lookup(reference.tensorGrads),
                              lookup(reference.tensorGradSizes)));
    if (result.outcome != Outcome::Pass)
      return result;
  }
  return {};
}

} // namespace

CheckResult fuzz::checkCase(const GeneratedCase &c, const CheckOptions &options) {
  ParsedCase parsed(c);
  if (!parsed.ast)
    return fail("front end", "a generated variant was rejected:\n" + parsed.diagnostics);
  const frontend::Variant &variant = parsed.ast->variants.front();

  static const DialectRegistry registry = [] {
    DialectRegistry r;
    registerAllDialects(r);
    return r;
  }();
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  std::string diagnostics;
  ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
    llvm::raw_string_ostream(diagnostics) << diag.str() << "\n";
    return success();
  });

  frontend::KernelOptions kernelOptions;
  kernelOptions.blockRows = c.blockRows;
  kernelOptions.blockCols = c.blockCols;
  kernelOptions.headDim = c.headDim;
  OwningOpRef<ModuleOp> module =
      frontend::emitFlashIR(context, *parsed.ast, kernelOptions, parsed.sourceMgr);
  if (!module) {
    // A score or scale that is NaN or +inf for every input is rejected on
    // purpose (IRGen's constant checks).
    if (rejectsNonFiniteConstant(parsed.diagnostics))
      return skip("a constant score or scale that is not finite", parsed.diagnostics);
    return fail("IRGen", parsed.diagnostics + diagnostics);
  }
  flash::KernelOp kernel = *module->getOps<flash::KernelOp>().begin();

  llvm::StringMap<int64_t> sizes = {{"B", c.batch},    {"H", c.heads},   {"HKV", c.kvHeads},
                                    {"N", c.queryLen}, {"M", c.keyLen}, {"D", c.headDim}};
  interp::ProblemShape shape = interp::resolveShape(kernel, sizes);
  interp::AttentionInputs inputs = interp::makeRandomInputs(kernel, shape, c.seed);

  // The reference, recording the largest score it saw and whether any was
  // not finite.
  interp::ReferenceSpec spec = interp::referenceFor(variant, inputs);
  constexpr double kF32Epsilon = 1.0 / (1 << 24);
  double maxScore = 0, maxScoreError = 0;
  bool nonFinite = false;
  auto recordScore = [&](double score) {
    if (!std::isfinite(score))
      nonFinite = true;
    else
      maxScore = std::max(maxScore, std::fabs(score));
    return score;
  };
  auto score = spec.score;
  auto derivative = spec.scoreDerivative;
  double maxDerivativeError = 0;
  spec.score = [&, score, derivative](double s, int64_t b, int64_t h, int64_t i, int64_t j) {
    recordScore(s);
    if (!score)
      return s;
    double value = recordScore(score(s, b, h, i, j));
    // The f32 interpreter's s differs from the reference's by rounding
    // (about 2^-24 of |s| plus the dot product's accumulation): how much the
    // score mod amplifies that (1 / s near 0) is part of the bound.
    double delta = 64 * kF32Epsilon * (1 + std::fabs(s));
    for (double perturbed : {score(s + delta, b, h, i, j), score(s - delta, b, h, i, j)}) {
      double change = std::fabs(perturbed - value);
      maxScoreError = std::max(maxScoreError, std::isfinite(change) ? change : 1e300);
    }
    // The same for the backward's chain rule: how far ∂score/∂s moves under
    // that perturbation, relative to its size (tanh'' near the knee, 1/s²).
    if (derivative) {
      double slope = derivative(s, b, h, i, j);
      for (double perturbed : {derivative(s + delta, b, h, i, j),
                               derivative(s - delta, b, h, i, j)}) {
        double change = std::fabs(perturbed - slope) / (1 + std::fabs(slope));
        maxDerivativeError =
            std::max(maxDerivativeError, std::isfinite(change) ? change : 1e300);
      }
    }
    return value;
  };
  interp::ReferenceOutputs reference = interp::naiveAttention(inputs, spec);
  if (nonFinite)
    return skip("a score is not finite for these inputs");
  double scoreError = 64 * kF32Epsilon * (1 + maxScore) + 2 * maxScoreError;
  double outBound = outputBound(c.elementType) + scoreError;
  double lseBound = 1e-5 + scoreError;
  if (outBound > options.maxBound)
    return skip("scores too large for an f32 comparison", "up to " + format(maxScore));

  // A failure when `outputs` misses the reference (`note` says more).
  auto againstReference = [&](const std::string &where, const interp::AttentionOutputs &outputs,
                              const std::string &note) -> std::optional<CheckResult> {
    interp::ErrorStats out = interp::compare(outputs.out, reference.out);
    interp::ErrorStats lse = interp::compare(outputs.lse, reference.lse);
    // LSE is compared in absolute terms too: rows whose LSE is near 0 (one
    // visible key with a small score) make its relative error meaningless.
    bool lseOk = lse.passes(lseBound) ||
                 (lse.passes(std::numeric_limits<double>::infinity()) && lse.maxAbs <= lseBound);
    if (out.passes(outBound) && lseOk)
      return std::nullopt;
    return fail(where, "O rel " + format(out.relative) + " (bound " + format(outBound) + ", " +
                           std::to_string(out.nonFinite) + " NaN/inf), LSE rel " +
                           format(lse.relative) + ", max " + format(lse.maxAbs) + " (bound " +
                           format(lseBound) + ", " + std::to_string(lse.nonFinite) +
                           " NaN/inf, " + std::to_string(lse.mismatchedInf) +
                           " rows empty on one side)" + note);
  };

  // The interpreter before the passes and after each of them.
  struct Stage {
    const char *name;
    std::function<void(OpPassManager &)> add;
  };
  std::vector<Stage> stages = {
      {"IRGen", nullptr},
      {"flash-fuse-rescale", [](OpPassManager &pm) { pm.addPass(flash::createFlashFuseRescale()); }},
      {"flash-classify-tiles",
       [](OpPassManager &pm) {
         flash::FlashClassifyTilesOptions classify;
         classify.groupRows = 64;
         pm.addPass(flash::createFlashClassifyTiles(classify));
       }},
      {"cse", [](OpPassManager &pm) { pm.addPass(mlir::createCSEPass()); }},
      {"flash-fold-scale", [](OpPassManager &pm) { pm.addPass(flash::createFlashFoldScale()); }},
  };
  for (const Stage &stage : stages) {
    std::string where = std::string("interpreter after ") + stage.name;
    if (stage.add) {
      PassManager pm(&context);
      stage.add(pm.nest<flash::KernelOp>());
      if (failed(pm.run(*module)))
        return fail(std::string("pass ") + stage.name, diagnostics);
    }
    kernel = *module->getOps<flash::KernelOp>().begin();
    interp::AttentionOutputs outputs;
    std::string error;
    interp::RunOptions run;
    run.checkClassification = true;
    if (failed(interp::runKernel(kernel, inputs, outputs, error, run)))
      return fail(where, error);
    if (std::optional<CheckResult> failure = againstReference(where, outputs, ""))
      return *failure;
  }

  // Packed GQA with split keys (the decode kernel): the query heads of a
  // KV group share a tile's rows, the keys run in 1 to 4 splits merged by
  // LSE, and every claim of flash-classify-tiles about the packed tiles
  // is checked too.
  {
    const char *where = "interpreter with packed heads and split keys";
    frontend::KernelOptions packedOptions = kernelOptions;
    packedOptions.packHeads = true;
    packedOptions.packSummarizedMasks = true;
    packedOptions.splitKeys = true;
    OwningOpRef<ModuleOp> packed =
        frontend::emitFlashIR(context, *parsed.ast, packedOptions, parsed.sourceMgr);
    if (!packed)
      return fail("IRGen (packed heads)", parsed.diagnostics + diagnostics);
    PassManager pm(&context);
    OpPassManager &nested = pm.nest<flash::KernelOp>();
    nested.addPass(flash::createFlashFuseRescale());
    flash::FlashClassifyTilesOptions classify;
    classify.groupRows = 64;
    nested.addPass(flash::createFlashClassifyTiles(classify));
    nested.addPass(mlir::createCSEPass());
    nested.addPass(flash::createFlashFoldScale());
    if (failed(pm.run(*packed)))
      return fail("pass pipeline (packed heads)", diagnostics);
    interp::AttentionInputs packedInputs = inputs;
    packedInputs.keySplits = 1 + static_cast<int64_t>(c.seed % 4);
    interp::AttentionOutputs outputs;
    std::string error;
    interp::RunOptions run;
    run.checkClassification = true;
    if (failed(interp::runKernel(*packed->getOps<flash::KernelOp>().begin(), packedInputs,
                                 outputs, error, run)))
      return fail(where, error);
    if (std::optional<CheckResult> failure = againstReference(
            where, outputs, ", " + std::to_string(packedInputs.keySplits) + " split(s)"))
      return *failure;
  }

  // The variant as the front end has rewritten it (a paged cache, a varlen
  // batch: `rewrite` sets the AST item, which is reset after IRGen), through
  // the whole pipeline, run on `rewrittenInputs` with the classification's
  // claims checked, against the dense reference.
  auto checkRewritten = [&](const std::string &what, const std::string &where,
                            const frontend::KernelOptions &rewrittenOptions,
                            const std::function<void(frontend::Variant *)> &rewrite,
                            const interp::AttentionInputs &rewrittenInputs,
                            const std::string &note) -> std::optional<CheckResult> {
    frontend::Variant &rewritten = parsed.ast->variants.front();
    rewrite(&rewritten);
    OwningOpRef<ModuleOp> module =
        frontend::emitFlashIR(context, *parsed.ast, rewrittenOptions, parsed.sourceMgr);
    rewritten.paged.reset();
    rewritten.varlenQueries.reset();
    rewritten.varlenKeys.reset();
    if (!module)
      return fail("IRGen (" + what + ")", parsed.diagnostics + diagnostics);
    PassManager pm(&context);
    flash::buildFlashPipeline(pm);
    if (failed(pm.run(*module)))
      return fail("pass pipeline (" + what + ")", diagnostics);
    interp::AttentionOutputs outputs;
    std::string error;
    interp::RunOptions run;
    run.checkClassification = true;
    if (failed(interp::runKernel(*module->getOps<flash::KernelOp>().begin(), rewrittenInputs,
                                 outputs, error, run)))
      return fail(where, error);
    return againstReference(where, outputs, note);
  };
  // Whether `role`'s length is a symbol of its own (`twin` may share it).
  const frontend::Variant &declared = parsed.ast->variants.front();
  auto ownLength = [&](frontend::DimRole role, std::optional<frontend::DimRole> twin) {
    const frontend::Dim &length = declared.dim(role);
    bool own = !length.isFixed();
    for (int other = 0; other < 6; ++other)
      own &= other == static_cast<int>(role) || (twin && other == static_cast<int>(*twin)) ||
             declared.dims[other].symbol != length.symbol;
    return own;
  };

  // The same decode kernel over a paged K/V cache: K and V moved into
  // shuffled pages (every sequence M keys, so the dense reference holds;
  // the rows past M in the last page and the spare pages are NaN). Only a
  // variant whose M is its own symbol can be paged (a paged M is each
  // sequence's).
  if (ownLength(frontend::DimRole::KeyLen, std::nullopt)) {
    static const int64_t kPages[] = {1, 8, 16, 48, 64, 128};
    int64_t page = kPages[c.seed % 6];
    frontend::KernelOptions pagedOptions = kernelOptions;
    pagedOptions.packHeads = true;
    pagedOptions.packSummarizedMasks = true;
    pagedOptions.splitKeys = true;
    interp::AttentionInputs pagedInputs = interp::pageKeysAndValues(inputs, page, c.seed);
    pagedInputs.keySplits = 1 + static_cast<int64_t>((c.seed / 4) % 3);
    if (std::optional<CheckResult> failure = checkRewritten(
            "paged cache",
            "interpreter with a paged cache of " + std::to_string(page) + "-key pages",
            pagedOptions,
            [&](frontend::Variant *variant) {
              variant->paged =
                  frontend::PagedDecl{"fuzz_block_table", "fuzz_kv_len", page, variant->loc};
            },
            pagedInputs, ", " + std::to_string(pagedInputs.keySplits) + " split(s)"))
      return *failure;
  }

  // The same variant as a varlen batch: queries and keys packed where their
  // lengths are their own symbols (one offsets tensor where N and M are one
  // symbol), every sequence full length from a seed-dependent row, so the
  // dense reference holds while N and M come from the offsets.
  bool tied = declared.dim(frontend::DimRole::QueryLen).symbol ==
              declared.dim(frontend::DimRole::KeyLen).symbol;
  bool packQueries = ownLength(frontend::DimRole::QueryLen, frontend::DimRole::KeyLen);
  bool packKeys = ownLength(frontend::DimRole::KeyLen, frontend::DimRole::QueryLen);
  if (tied)
    packKeys = packQueries = packQueries && packKeys;
  if (packQueries || packKeys) {
    interp::AttentionInputs packedInputs = inputs;
    auto fullOffsets = [&](int64_t length) {
      std::vector<int32_t> offsets = {static_cast<int32_t>(c.seed % 7)};
      for (int64_t b = 0; b < shape.batch(); ++b)
        offsets.push_back(offsets.back() + static_cast<int32_t>(length));
      return offsets;
    };
    if (packQueries)
      packedInputs.varlen.queryOffsets = fullOffsets(shape.queryLen());
    if (packKeys)
      packedInputs.varlen.keyOffsets = fullOffsets(shape.keyLen());
    std::string packed = std::string(packQueries ? "queries" : "") +
                         (packQueries && packKeys ? ", " : "") + (packKeys ? "keys" : "");
    if (std::optional<CheckResult> failure = checkRewritten(
            "varlen", "interpreter as a varlen batch (" + packed + " packed)", kernelOptions,
            [&](frontend::Variant *variant) {
              if (packQueries)
                variant->varlenQueries =
                    frontend::VarlenDecl{tied ? "fuzz_cu" : "fuzz_cu_q", variant->loc};
              if (packKeys)
                variant->varlenKeys =
                    frontend::VarlenDecl{tied ? "fuzz_cu" : "fuzz_cu_k", variant->loc};
            },
            packedInputs, ""))
      return *failure;
  }

  if (options.backward) {
    CheckResult result = checkBackwardCase(c, parsed, context, diagnostics, kernel, inputs,
                                           outBound + 4 * scoreError + 4 * maxDerivativeError,
                                           options);
    if (result.outcome != Outcome::Pass)
      return result;
  }

  if (options.ptx && c.elementType != "f32")
    for (llvm::StringRef chip : {"sm_90a", "sm_80"}) {
      CheckResult result = checkPTX(c, parsed, context, chip, options.ptxas);
      if (result.outcome != Outcome::Pass)
        return result;
      // The prefill over a paged cache with its producer warpgroup (the
      // default), at D = 128, where M is its own symbol.
      if (chip == "sm_90a" && ownLength(frontend::DimRole::KeyLen, std::nullopt)) {
        static const int64_t kPrefillPages[] = {16, 32, 64, 128, 256};
        result = checkPTX(c, parsed, context, chip, options.ptxas, /*backward=*/false,
                          /*exactAuxGrads=*/false, /*headDim=*/128, kPrefillPages[c.seed % 5]);
        if (result.outcome == Outcome::Fail)
          return result;
        // The one-warpgroup kernel (D = 64) with the block a sequence ends
        // in by TMA and its rows past the end zeroed.
        result = checkPTX(c, parsed, context, chip, options.ptxas, /*backward=*/false,
                          /*exactAuxGrads=*/false, /*headDim=*/64, kPrefillPages[c.seed % 5],
                          /*pagedLastBlockByTma=*/true);
        if (result.outcome == Outcome::Fail)
          return result;
      }
      if (!options.backward)
        continue;
      result = checkPTX(c, parsed, context, chip, options.ptxas, /*backward=*/true);
      if (result.outcome == Outcome::Fail)
        return result;
      // D = 256: the main kernel splits D into column slices.
      CheckResult sliced = checkPTX(c, parsed, context, chip, options.ptxas, /*backward=*/true,
                                    /*exactAuxGrads=*/false, /*headDim=*/256);
      if (sliced.outcome == Outcome::Fail)
        return sliced;
      // The deterministic and staged aux-gradient paths, where the case
      // has aux tensors to take them.
      if (result.outcome == Outcome::Pass && !c.tensors.empty()) {
        result = checkPTX(c, parsed, context, chip, options.ptxas, /*backward=*/true,
                          /*exactAuxGrads=*/true);
        if (result.outcome == Outcome::Fail)
          return result;
      }
    }
  return {};
}

GeneratedCase fuzz::minimize(const GeneratedCase &c, const CheckResult &failure,
                             const CheckOptions &options, CheckFn check, int budget) {
  GeneratedCase best = c;
  bool progress = true;
  while (progress && budget > 0) {
    progress = false;
    for (const GeneratedCase &candidate : simplifications(best)) {
      if (--budget < 0)
        break;
      CheckResult result = check(candidate, options);
      if (result.outcome == Outcome::Fail && result.stage == failure.stage) {
        best = candidate;
        progress = true;
        break;
      }
    }
  }
  return best;
}
