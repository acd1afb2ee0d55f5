//===- flashc-tune.cpp - Autotune tile configurations on the GPU ----------===//
//
//   flashc-tune causal.flash --shape B=4,H=16,N=4096,D=128 [--causal]
//       [--space Br=64,128 Bc=32,64,128 gemm=wgmma,mma.sync kv=tma,cp.async overlap=on,off
//                persistent=on,off rpw=16,32]
//       [--budget 60s]
//
// Enumerates the configurations of the space (plus the default one),
// compiles each (the compiler's checks reject what does not fit: tile
// rules, shared memory), assembles it with ptxas when one is found (a
// configuration that spills is pruned), validates the survivors on the GPU
// against the interpreter on a small shape and times them with CUDA events
// on the real shape, within the time budget. Prints a ranked table; every
// candidate that did not run says why. The winner goes to the tuning cache
// (flash-run uses it when no tile is given). Exit codes: 0 ok, 1 nothing
// ran or bad input, 2 bad command line, 3 no GPU (the compile checks still
// run and are printed).
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToSM90/Passes.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/Harness/GpuHarness.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Target/NVPTX/TargetFlags.h"
#include "flashc/Target/Package/KernelPackage.h"
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

struct Candidate {
  tuning::TileConfig config;
  bool isDefault = false;
  std::string reason; // why it did not run; empty when it did
  int64_t registers = -1, sharedBytes = 0;
  double ms = 0, tflops = 0, outError = 0;
  std::optional<flashrt::KernelPackage> package;
  OwningOpRef<ModuleOp> module; // flash IR of this tile
};

std::chrono::seconds parseBudget(llvm::StringRef text) {
  int64_t value;
  llvm::StringRef number = text.rtrim("sm");
  if (number.getAsInteger(10, value) || value <= 0 || number.size() == text.size() ||
      text.size() - number.size() != 1)
    die(2, "--budget: '" + text + "' is not a duration like 60s or 5m");
  return std::chrono::seconds(text.back() == 'm' ? value * 60 : value);
}

std::string findPtxas() {
  if (ptxasPath == "none")
    return "";
  if (!ptxasPath.empty())
    return ptxasPath;
  if (llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName("ptxas"))
    return *found;
  if (llvm::sys::fs::can_execute("/usr/local/cuda/bin/ptxas"))
    return "/usr/local/cuda/bin/ptxas";
  return "";
}

/// ptxas -v on the package's PTX: registers, or a reason to prune.
std::string assemble(const std::string &ptxas, Candidate &c) {
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
  llvm::SmallVector<llvm::StringRef> match;
  if (llvm::Regex("Used ([0-9]+) registers").match(report, &match))
    match[1].getAsInteger(10, c.registers);
  if (llvm::Regex("([0-9]+) bytes spill stores").match(report, &match) && match[1] != "0")
    return "spills " + match[1].str() + " bytes (ptxas)";
  return "";
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  nvptx::setVersionPrinter("flashc-tune");
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
  llvm::Expected<tuning::SearchSpace> space = tuning::SearchSpace::parse(items);
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
                      shape.keyLen(), gpuName, computeCapability);
  if (!key)
    die(1, "variant '" + selected + "' does not build at the key tile");

  // The candidates: the space, plus the default configuration.
  std::vector<Candidate> candidates;
  nvptx::TargetOptions defaultTarget;
  defaultTarget.chip = chip;
  std::string defaultGemm = llvm::cantFail(nvptx::selectGemm(defaultTarget));
  auto [defaultBr, defaultBc] =
      frontend::defaultTile(*ast->lookup(selected), shape.headDim(), defaultGemm == "wgmma",
                            nvptx::usesWarpSpecializedTiles(defaultTarget, defaultGemm),
                            shape.queryLen());
  tuning::TileConfig defaultConfig{defaultBr, defaultBc, defaultGemm,
                                   defaultGemm == "wgmma" ? "tma" : "cp.async", 0};
  // Warp-specialized default tiles name their grid, as the space's do.
  if (defaultGemm == "wgmma" && defaultBr >= 128)
    defaultConfig.persistent = nvptx::persistentGridPays(shape.queryLen()) &&
                               persistentGridFits(shape.headDim(), defaultBc);
  for (const tuning::TileConfig &config : space->enumerate())
    candidates.push_back({config});
  auto isDefault = [&](const Candidate &c) { return c.config == defaultConfig; };
  if (std::none_of(candidates.begin(), candidates.end(), isDefault))
    candidates.push_back({defaultConfig});
  for (Candidate &c : candidates)
    c.isDefault = isDefault(c);

  std::string ptxas = findPtxas();
  CompileCache compileCache(CompileCache::defaultDirectory());
  auto started = std::chrono::steady_clock::now();
  size_t total = candidates.size(), done = 0;
  auto progress = [&](const Candidate &c, llvm::StringRef stage) {
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

  for (Candidate &c : candidates) {
    progress(c, "compile");
    if (c.config.gemm == "wgmma" && chip != "sm_90a") {
      c.reason = "wgmma needs sm_90a (this target is " + chip + ")";
      ++done;
      continue;
    }
    frontend::KernelOptions options = keyOptions;
    nvptx::TargetOptions target;
    target.chip = chip;
    target.persistent = nvptx::persistentGridPays(shape.queryLen());
    c.config.applyTo(options, target);
    std::string diagnostics;
    {
      ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
        llvm::raw_string_ostream(diagnostics) << diag.str();
        return success();
      });
      // Front-end errors name this candidate's failure instead of printing.
      sourceMgr.setDiagHandler(
          [](const llvm::SMDiagnostic &diag, void *out) {
            llvm::raw_string_ostream(*static_cast<std::string *>(out)) << diag.getMessage();
          },
          &diagnostics);
      c.module = frontend::emitFlashIR(context, *ast, options, sourceMgr, selected);
      sourceMgr.setDiagHandler(nullptr);
      if (c.module) {
        PassManager pm(&context);
        flash::buildFlashPipeline(pm);
        if (failed(pm.run(*c.module)))
          c.module = nullptr;
      }
      if (c.module) {
        int hits = 0;
        std::string cacheWarnings;
        FailureOr<std::vector<flashrt::KernelPackage>> packages =
            buildKernelPackages(*c.module, target, compileCache, hits, cacheWarnings);
        if (succeeded(packages))
          c.package = (*packages)[0];
      }
    }
    if (!c.package) {
      c.reason = "compile: " + (diagnostics.empty() ? std::string("failed") : diagnostics);
      ++done;
      continue;
    }
    // The compiler keeps some tiles off the persistent grid (D = 256 above
    // Bc = 64): such a candidate is its per-tile twin, not worth timing
    // again, and must not be recorded under the wrong name.
    if (c.config.persistent && *c.config.persistent && !c.package->persistent) {
      c.reason = "the compiler keeps this tile off the persistent grid (the per-tile "
                 "candidate is the same kernel)";
      ++done;
      continue;
    }
    c.sharedBytes = c.package->dynamicSharedBytes;
    if (!ptxas.empty()) {
      progress(c, "ptxas");
      c.reason = assemble(ptxas, c);
    }
    ++done;
  }

  // On the GPU: validate, then time, within the budget.
  size_t runnable = std::count_if(candidates.begin(), candidates.end(),
                                  [](const Candidate &c) { return c.reason.empty(); });
  done = 0;
  total = runnable;
  if (haveGpu && runnable > 0) {
    flashrt::Stream stream(*gpu);
    llvm::StringMap<double> noParams;
    // Every candidate is the same variant: one set of inputs serves all.
    std::optional<harness::DeviceProblem> check, problem;
    try {
      check.emplace(harness::upload(*gpu, keyKernel, checkShape, noParams, seed,
                                    harness::Layout::BHSD));
      problem.emplace(
          harness::upload(*gpu, keyKernel, shape, noParams, seed, harness::Layout::BHSD));
    } catch (const flashrt::Error &error) {
      die(flashrt::exitCodeFor(error.kind()), error.what());
    }
    for (Candidate &c : candidates) {
      if (!c.reason.empty())
        continue;
      if (std::chrono::steady_clock::now() - started > budget) {
        c.reason = "not run: the " + budgetSpec + " budget was spent";
        continue;
      }
      flash::KernelOp flashKernel = *c.module->getOps<flash::KernelOp>().begin();
      try {
        progress(c, "validate");
        flashrun::AttentionKernel kernel(*gpu, *c.package);
        std::string error;
        std::optional<harness::Validation> validation =
            harness::validate(kernel, stream, *check, flashKernel, error);
        if (!validation) {
          c.reason = "interpreter: " + error;
        } else if (!validation->passed()) {
          c.reason = "validation failed: O rel " +
                     llvm::formatv("{0:e2}", validation->out.relative).str() + ", LSE rel " +
                     llvm::formatv("{0:e2}", validation->lse.relative).str();
        } else {
          c.outError = validation->out.relative;
          progress(c, "time");
          c.ms = harness::timeKernel(kernel, stream, *problem, warmup, iterations);
          c.tflops = harness::tflops(shape, c.ms, causalFlops);
        }
      } catch (const flashrt::Error &error) {
        c.reason = std::string(flashrt::errorKindName(error.kind())) + ": " + error.what();
      }
      ++done;
    }
  }
  if (progressBar)
    llvm::errs() << "\r\x1b[K";

  // The table: timed candidates ranked, then the rest with their reasons.
  std::vector<Candidate *> order;
  for (Candidate &c : candidates)
    order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](const Candidate *a, const Candidate *b) {
    return a->tflops > b->tflops;
  });
  llvm::outs() << selected << "  " << shape.str() << "  " << elementName << "  " << gpuName
               << " (" << chip << ")  " << (causalFlops ? "causal count" : "full count")
               << "\n";
  llvm::outs() << llvm::format("%4s  %-34s %9s %9s %5s %7s  %s\n", "rank", "config", "TFLOP/s",
                               "ms", "regs", "smem", "notes");
  int rank = 0;
  Candidate *winner = nullptr, *defaultCandidate = nullptr;
  for (Candidate *c : order) {
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
  for (Candidate *c : order) {
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
