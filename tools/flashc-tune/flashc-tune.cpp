//===- flashc-tune.cpp - Autotune tile configurations on the GPU ----------===//
//
//   flashc-tune causal.flash --shape B=4,H=16,N=4096,D=128 [--causal]
//       [--space Br=64,128 Bc=32,64,128 gemm=wgmma,mma.sync kv=tma,cp.async overlap=on,off
//                persistent=on,off rpw=16,32]
//       [--budget 60s]
//   flashc-tune causal.flash --bwd --shape ... [--space Br=32,64,128 Bc=64,128 gemm=wgmma]
//
// Enumerates the configurations of the space (plus the default one),
// compiles each (the compiler's checks reject what does not fit: tile
// rules, shared memory), assembles it with ptxas when one is found (a
// configuration that spills is pruned), validates the survivors on the GPU
// against the interpreter on a small shape and times them with CUDA events
// on the real shape, within the time budget. Prints a ranked table; every
// candidate that did not run says why. The winner goes to the tuning cache
// (flash-run uses it when no tile is given). With --bwd the backward
// kernels are tuned instead: Br, Bc and the GEMM, each validated against the
// interpreter's backward and timed (three launches, 2.5x the forward's
// FLOPs) from one GPU forward's O and LSE; the winner is the variant's
// backward entry in the same cache. Exit codes: 0 ok, 1 nothing
// ran or bad input, 2 bad command line, 3 no GPU (the compile checks still
// run and are printed).
//
//===----------------------------------------------------------------------===//

#include "flashc/Config/ConfigFlags.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/Harness/GpuHarness.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Target/NVPTX/EmitPTX.h"
#include "flashc/Target/NVPTX/Ptxas.h"
#include "flashc/Target/Package/KernelPackage.h"
#include "flashc/Tuning/Autotune.h"
#include "flashc/Tuning/Tuning.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/WithColor.h"

#include <algorithm>
#include <chrono>

using namespace mlir;
using namespace flashc;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("flashc-tune options");
// The input file, then (after --space's first item) more KNOB=VALUES items:
// `--space Br=64,128 Bc=32,64` reads as one space.
cl::list<std::string> positionals(cl::Positional, cl::desc("<input .flash file> [KNOB=VALUES...]"),
                                  cl::OneOrMore, cl::cat(category));
cl::opt<int64_t> pagedPage("paged",
                            cl::desc("The page of a paged K/V cache whose variant gives none"),
                            cl::value_desc("PAGE"), cl::init(0), cl::cat(category));
cl::opt<std::string> variantName("variant", cl::desc("Variant to tune (default: the first)"),
                                 cl::cat(category));
cl::opt<std::string> shapeSpec("shape", cl::desc("Sizes timed, e.g. B=4,H=16,N=4096,D=128"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> checkShapeSpec(
    "check-shape", cl::desc("Sizes validated (default: a reduced shape, as flash-run)"),
    cl::cat(category));
cl::list<std::string> spaceItems(
    "space", cl::desc("Knob=values lists: Br=64,128 Bc=32,64,128 gemm=wgmma,mma.sync "
                      "kv=tma,cp.async overlap=on,off persistent=on,off rpw=16,32 (default: "
                      "Br=64,128 Bc=32,64,128 gemm=wgmma kv=tma overlap=on,off persistent=on,off; "
                      "overlap applies to Br = 64, persistent to Br >= 128)"),
    cl::cat(category));
cl::opt<std::string> dtype("dtype", cl::desc("Element type: must be the variant's (bf16, f16)"),
                           cl::cat(category));
cl::opt<std::string> budgetSpec("budget", cl::desc("Time budget, e.g. 60s or 5m (default 60s)"),
                                cl::init("60s"), cl::cat(category));
cl::opt<bool> causalFlops("causal", cl::desc("Count FLOPs as causal (halved)"),
                          cl::cat(category));
cl::opt<bool> backwardPass("bwd",
                           cl::desc("Tune the backward kernels (knobs Br, Bc, gemm; default "
                                    "space Br=32,64,128 Bc=64,128 gemm=wgmma)"),
                           cl::cat(category));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches per candidate"), cl::init(5),
                    cl::cat(category));
cl::opt<int> iterations("iters", cl::desc("Timed launches per candidate"), cl::init(20),
                        cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random inputs"), cl::init(1),
                       cl::cat(category));
cl::opt<std::string> archOption("arch", cl::desc("Target without a GPU (default sm_90a)"),
                                cl::init("sm_90a"), cl::cat(category));
cl::opt<std::string> cachePath("tuning-cache",
                               cl::desc("Tuning cache file (default: tuning.json in "
                                        "$FLASHC_CACHE_DIR or ~/.cache/flashc)"),
                               cl::cat(category));
cl::opt<bool> noRecord("no-record", cl::desc("Do not write the winner to the tuning cache"),
                       cl::cat(category));
cl::opt<std::string> ptxasPath("ptxas",
                               cl::desc("ptxas for the spill check (default: on PATH or "
                                        "/usr/local/cuda/bin; 'none' skips it)"),
                               cl::cat(category));

[[noreturn]] void die(int code, const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "flashc-tune") << message << "\n";
  std::exit(code);
}

std::chrono::seconds parseBudget(llvm::StringRef text) {
  int64_t value;
  llvm::StringRef number = text.rtrim("sm");
  if (number.getAsInteger(10, value) || value <= 0 || number.size() == text.size() ||
      text.size() - number.size() != 1)
    die(2, "--budget: '" + text + "' is not a duration like 60s or 5m");
  return std::chrono::seconds(text.back() == 'm' ? value * 60 : value);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  config::setVersionPrinter("flashc-tune");
  cl::ParseCommandLineOptions(argc, argv,
                              "flashc-tune: autotune the tile configuration of a .flash "
                              "variant on the GPU\n");
  std::chrono::seconds budget = parseBudget(budgetSpec);
  std::string inputFile = positionals.front();
  std::vector<std::string> items;
  for (llvm::StringRef spec : spaceItems)
    for (llvm::StringRef item : llvm::split(spec, ' '))
      if (!item.empty())
        items.push_back(item.str());
  for (size_t i = 1; i < positionals.size(); ++i) {
    if (spaceItems.empty() || !llvm::StringRef(positionals[i]).contains('='))
      die(2, "unexpected argument '" + positionals[i] +
                 "' (one input file; KNOB=VALUES items follow --space)");
    items.push_back(positionals[i]);
  }
  llvm::Expected<tuning::SearchSpace> space =
      backwardPass ? tuning::SearchSpace::parseBackward(items) : tuning::SearchSpace::parse(items);
  if (!space)
    die(2, llvm::toString(space.takeError()));
  bool progressBar = llvm::sys::Process::StandardErrIsDisplayed();

  llvm::SourceMgr sourceMgr;
  std::optional<frontend::Module> ast = frontend::parseFlashFile(inputFile, sourceMgr);
  if (!ast)
    return 1;
  std::string selected = variantName.empty() ? ast->variants[0].name : variantName.getValue();

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);

  // The GPU decides the target; without one the compile checks still run.
  std::string whyNoGpu;
  bool haveGpu = flashrt::Driver::available(&whyNoGpu);
  std::optional<flashrt::Context> gpu;
  std::string gpuName = "none", chip = archOption;
  int computeCapability = 0;
  if (haveGpu) {
    try {
      gpu.emplace();
      flashrt::ComputeCapability cc = gpu->device().computeCapability();
      computeCapability = cc.number();
      gpuName = gpu->device().name();
      chip = nvptx::chipFor(cc.major, cc.minor);
    } catch (const flashrt::Error &error) {
      die(flashrt::exitCodeFor(error.kind()), error.what());
    }
  }

  // The shape, from the variant at the key tile.
  frontend::KernelOptions keyOptions;
  keyOptions.blockRows = tuning::kKeyTileRows;
  keyOptions.blockCols = tuning::kKeyTileCols;
  llvm::Expected<llvm::StringMap<int64_t>> parsedShape =
      interp::parseSizes(shapeSpec, "shape", interp::kShapeKeys);
  if (!parsedShape)
    die(2, llvm::toString(parsedShape.takeError()));
  llvm::StringMap<int64_t> given = std::move(*parsedShape);
  if (given.count("D"))
    keyOptions.headDim = given.lookup("D");
  std::optional<int64_t> pageSize;
  if (pagedPage.getNumOccurrences())
    pageSize = pagedPage;
  keyOptions.pageSize = pageSize;
  OwningOpRef<ModuleOp> keyModule =
      frontend::emitFlashIR(context, *ast, keyOptions, sourceMgr, selected);
  if (!keyModule)
    return 1;
  flash::KernelOp keyKernel = *keyModule->getOps<flash::KernelOp>().begin();
  interp::ProblemShape shape = interp::resolveShape(keyKernel, given, nullptr);
  interp::ProblemShape checkShape = harness::checkShapeFor(shape, keyKernel);
  if (!checkShapeSpec.empty()) {
    llvm::Expected<llvm::StringMap<int64_t>> check =
        interp::parseSizes(checkShapeSpec, "check-shape", interp::kShapeKeys);
    if (!check)
      die(2, llvm::toString(check.takeError()));
    checkShape = interp::resolveShape(keyKernel, *check, &shape);
  }
  std::string elementName;
  llvm::raw_string_ostream(elementName) << keyKernel.getElementType();
  if (!dtype.empty() && dtype != elementName)
    die(2, "--dtype " + dtype + ": variant '" + selected + "' is " + elementName +
               " (the element type comes from the .flash source)");
  std::optional<tuning::TuningKey> key =
      tuning::makeKey(context, *ast, sourceMgr, selected, shape.headDim(), shape.queryLen(),
                      shape.keyLen(), gpuName, computeCapability, backwardPass, pageSize);
  if (!key)
    die(1, "variant '" + selected + "' does not build at the key tile" +
               (backwardPass ? " (backward)" : ""));

  // The candidates: the space, plus the default configuration.
  tuning::TuningProblem problem;
  problem.context = &context;
  problem.ast = &*ast;
  problem.sourceMgr = &sourceMgr;
  problem.variant = selected;
  problem.chip = chip;
  problem.shape = shape;
  problem.checkShape = checkShape;
  problem.backward = backwardPass;
  problem.pageSize = pageSize;
  llvm::Expected<std::vector<tuning::Candidate>> made = tuning::makeCandidates(*space, problem);
  if (!made)
    die(2, llvm::toString(made.takeError()));
  std::vector<tuning::Candidate> candidates = std::move(*made);

  auto progress = [&](const tuning::Candidate &c, llvm::StringRef stage, size_t done,
                      size_t total) {
    if (progressBar) {
      int width = 30, filled = static_cast<int>(width * done / total);
      llvm::errs() << "\r[" << std::string(filled, '#') << std::string(width - filled, '.')
                   << "] " << done << "/" << total << "  " << c.config.str() << ": " << stage
                   << "\x1b[K";
    } else {
      llvm::errs() << "[" << done + 1 << "/" << total << "] " << c.config.str() << ": " << stage
                   << "\n";
    }
  };
  auto started = std::chrono::steady_clock::now();
  tuning::compileCandidates(candidates, problem, CompileCache(CompileCache::defaultDirectory()),
                            nvptx::findPtxas(ptxasPath), progress);

  // On the GPU: validate, then time, within the budget.
  size_t runnable = std::count_if(candidates.begin(), candidates.end(),
                                  [](const tuning::Candidate &c) { return c.reason.empty(); });
  if (haveGpu && runnable > 0) {
    tuning::TimingOptions timing;
    timing.warmup = warmup;
    timing.iterations = iterations;
    timing.seed = seed;
    timing.causalFlops = causalFlops;
    timing.budget = budget;
    timing.budgetText = budgetSpec;
    try {
      tuning::timeCandidates(candidates, *gpu, problem, *keyModule, timing, started, progress);
    } catch (const flashrt::Error &error) {
      die(flashrt::exitCodeFor(error.kind()), error.what());
    }
  }
  if (progressBar)
    llvm::errs() << "\r\x1b[K";

  // The table: timed candidates ranked, then the rest with their reasons.
  std::vector<tuning::Candidate *> order;
  for (tuning::Candidate &c : candidates)
    order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](const tuning::Candidate *a, const tuning::Candidate *b) {
    return a->tflops > b->tflops;
  });
  llvm::outs() << selected << (backwardPass ? " (backward)" : "") << "  " << shape.str() << "  "
               << elementName << "  " << gpuName << " (" << chip << ")  "
               << (causalFlops ? "causal count" : "full count")
               << (backwardPass ? ", 2.5x the forward's FLOPs" : "") << "\n";
  llvm::outs() << llvm::format("%4s  %-34s %9s %9s %5s %7s  %s\n", "rank", "config", "TFLOP/s",
                               "ms", "regs", "smem", "notes");
  int rank = 0;
  tuning::Candidate *winner = nullptr, *defaultCandidate = nullptr;
  for (tuning::Candidate *c : order) {
    if (c->isDefault)
      defaultCandidate = c;
    std::string regs = c->registers >= 0 ? std::to_string(c->registers) : "-";
    if (c->tflops > 0) {
      if (!winner)
        winner = c;
      llvm::outs() << llvm::format("%4d  %-34s %9.1f %9.4f %5s %7lld  %s\n", ++rank,
                                   c->config.str().c_str(), c->tflops, c->ms, regs.c_str(),
                                   static_cast<long long>(c->sharedBytes),
                                   c->isDefault ? "default" : "");
    }
  }
  for (tuning::Candidate *c : order) {
    if (c->tflops > 0)
      continue;
    std::string reason = c->reason.empty() ? "compiled; not timed (no GPU)" : c->reason;
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    std::string regs = c->registers >= 0 ? std::to_string(c->registers) : "-";
    llvm::outs() << llvm::format("%4s  %-34s %9s %9s %5s %7lld  %s%s\n", "-",
                                 c->config.str().c_str(), "-", "-", regs.c_str(),
                                 static_cast<long long>(c->sharedBytes),
                                 c->isDefault ? "default; " : "", reason.c_str());
  }
  if (!haveGpu) {
    llvm::errs() << "flashc-tune: no usable GPU (" << whyNoGpu << "): " << runnable << " of "
                 << candidates.size() << " configurations compiled cleanly, none timed\n";
    return flashrt::kNoGpuExitCode;
  }
  if (!winner) {
    llvm::WithColor::error(llvm::errs(), "flashc-tune") << "no configuration ran\n";
    return 1;
  }
  llvm::outs() << "winner: " << winner->config.str() << ", "
               << llvm::format("%.1f", winner->tflops) << " TFLOP/s";
  if (defaultCandidate && defaultCandidate->tflops > 0)
    llvm::outs() << " (" << llvm::format("%.2f", winner->tflops / defaultCandidate->tflops)
                 << "x the default " << defaultCandidate->config.str() << ")";
  llvm::outs() << "\n";
  if (!noRecord) {
    tuning::TuningCache cache(cachePath.empty() ? tuning::TuningCache::defaultPath()
                                                : cachePath.getValue());
    std::string warnings;
    if (llvm::Error error = cache.record({*key, winner->config, winner->tflops}, warnings))
      llvm::WithColor::warning(llvm::errs(), "flashc-tune")
          << "not recorded: " << llvm::toString(std::move(error)) << "\n";
    else
      llvm::outs() << "recorded in " << cache.path() << "\n";
    if (!warnings.empty())
      llvm::WithColor::warning(llvm::errs(), "flashc-tune") << warnings;
  }
  return 0;
}
