//===- flash-run.cpp - Compile, run, validate and time on the GPU ---------===//
//
//   flash-run causal.flash --shape B=8,H=16,N=2048,D=128 [--layout bshd] [--bwd]
//
// Compiles the variant to PTX in-process, makes seeded random inputs,
// poisons the outputs, launches through libflashrt, checks O and LSE against
// the CPU interpreter on the same flash IR, then times the kernel with CUDA
// events (warm-up, median). Exit codes: 0 ok, 1 validation failed or bad
// input, 2 bad command line, 3 no GPU/driver, 4 PTX JIT error, 5 other
// driver errors.
//
//===----------------------------------------------------------------------===//

#include "flashc/Config/ConfigFlags.h"
#include "flashc/Config/KernelConfig.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/Harness/GpuHarness.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"
#include "flashc/Target/Package/KernelPackage.h"
#include "flashc/Tuning/Tuning.h"

#include "flashrun/AttentionKernel.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

using namespace mlir;
using namespace flashc;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("flash-run options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .flash file>"), cl::Required,
                               cl::cat(category));
cl::opt<std::string> variantName("variant", cl::desc("Variant to run (default: the first)"),
                                 cl::cat(category));
cl::opt<std::string> shapeSpec("shape", cl::desc("Sizes, e.g. B=8,H=16,N=2048,D=128 (HKV, M)"),
                               cl::init("B=2,H=4,N=1024,D=64"), cl::cat(category));
cl::opt<std::string> tileSpec("tile", cl::desc("Tile shape Br=..,Bc=.. (default: by head dim, as flashc)"),
                              cl::cat(category));
cl::opt<std::string> archOption("arch", cl::desc("sm_80 or sm_90a (default: from the GPU)"),
                                cl::cat(category));
cl::opt<std::string> cacheDir("cache-dir",
                              cl::desc("Compile cache directory (default: $FLASHC_CACHE_DIR, "
                                       "else $XDG_CACHE_HOME/flashc or ~/.cache/flashc)"),
                              cl::cat(category));
cl::opt<bool> noCache("no-cache", cl::desc("Compile without the compile cache"),
                      cl::cat(category));
cl::opt<bool> noTuningCache("no-tuning-cache",
                            cl::desc("Ignore flashc-tune's winners (use the default tile)"),
                            cl::cat(category));
config::ConfigFlags configFlags(category);
cl::opt<std::string> layout("layout", cl::desc("Memory layout of q, k, v, o: bhsd or bshd"),
                            cl::init("bhsd"), cl::cat(category));
cl::list<std::string> paramSpecs("param", cl::desc("NAME=VALUE"), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random inputs"), cl::init(1),
                       cl::cat(category));
cl::opt<int64_t> documents("docs",
                           cl::desc("i32 aux tensors over the sequence (document ids) hold this "
                                    "many documents, cut at random points (default: 1 to 4)"),
                           cl::init(0), cl::cat(category));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches first"), cl::init(10), cl::cat(category));
cl::opt<int> iterations("iters", cl::desc("Timed launches (0: validate only)"), cl::init(50),
                        cl::cat(category));
cl::opt<bool> causalFlops("causal", cl::desc("Count FLOPs as causal (halved), as the peers do"),
                          cl::cat(category));
cl::opt<std::string> checkShapeSpec(
    "check-shape",
    cl::desc("Validate at these sizes instead (default: the run's sizes, or a reduced shape "
             "when the interpreter would take too long)"),
    cl::cat(category));
cl::opt<bool> csv("csv", cl::desc("Print one CSV row: name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,"
                                   "rel_err_o,rel_err_lse (then summary_ms,cached_ms for a kernel with a block summary)"),
                  cl::cat(category));
cl::opt<std::string> auxOut(
    "save-aux",
    cl::desc("Write the timed run's aux tensors into this directory, one raw little-endian file "
             "NAME.bin each (i32 tensors as int32, float ones as float32), so that a peer can "
             "run on the same inputs"),
    cl::cat(category));
cl::opt<std::string> packageOut("save-package", cl::desc("Also write the kernel package here"),
                                cl::cat(category));
config::BackwardFlags backwardFlags(category);
cl::opt<int64_t> keySplits(
    "splits",
    cl::desc("Kernels that split their keys (--split-keys, or decode shapes): CTAs per query "
             "tile, 0 = the launch's rule (default)"),
    cl::init(0), cl::cat(category));
cl::opt<bool> fullKeyLengths(
    "full-lengths",
    cl::desc("Paged K/V caches and varlen batches: time with every sequence N queries and M "
             "keys long (validation keeps ragged lengths: full, 1, 0, random), so the run "
             "compares with the dense kernel"),
    cl::cat(category));
cl::opt<bool> pagesInOrder(
    "pages-in-order",
    cl::desc("Paged K/V caches: give each sequence consecutive pages instead of shuffled ones "
             "(measures what the shuffle costs)"),
    cl::cat(category));
cl::opt<bool> backwardPass(
    "bwd",
    cl::desc("Also the backward pass: validate dQ, dK, dV and aux gradients against the "
             "interpreter (from the same O, LSE and dO; a mask with a block summary also "
             "through a cached summary) and time it (FLOPs = 2.5 x the forward's); --csv "
             "prints the backward's row (name,...,layout,bwd,ms,tflops,rel_dq,rel_dk,rel_dv, "
             "then summary_ms,cached_ms for a mask with a block summary)"),
    cl::cat(category));
cl::opt<bool> trainingStep(
    "train-step",
    cl::desc("With --bwd: also time the forward and the backward as one training step "
             "(FLOPs = 3.5 x the forward's); --csv prints that row (dir 'train')"),
    cl::cat(category));

[[noreturn]] void die(int code, const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "flash-run") << message << "\n";
  std::exit(code);
}

interp::ProblemShape parseShape(llvm::StringRef spec, llvm::StringRef option,
                                flash::KernelOp kernel, const interp::ProblemShape *base) {
  llvm::Expected<llvm::StringMap<int64_t>> given =
      interp::parseSizes(spec, option, interp::kShapeKeys);
  if (!given)
    die(2, llvm::toString(given.takeError()));
  return interp::resolveShape(kernel, *given, base);
}

/// The aux tensors of `inputs` as raw little-endian files in `dir` (what
/// --save-aux promises), one line per file on stderr.
void saveAuxTensors(flash::KernelOp kernel, const interp::AttentionInputs &inputs,
                    llvm::StringRef dir) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    die(1, "cannot create '" + dir + "': " + ec.message());
  for (mlir::Attribute attr : kernel.getTensors()) {
    auto decl = mlir::cast<flash::AuxTensorAttr>(attr);
    llvm::StringRef name = decl.getName().getValue();
    const interp::HostTensor &tensor = inputs.tensors.find(name)->second;
    bool integer = decl.getElementType().isSignlessInteger(32);
    std::string bytes;
    for (double value : tensor.data) {
      char raw[4];
      if (integer) {
        int32_t element = static_cast<int32_t>(value);
        std::memcpy(raw, &element, 4);
      } else {
        float element = static_cast<float>(value);
        std::memcpy(raw, &element, 4);
      }
      bytes.append(raw, 4);
    }
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name + ".bin");
    std::error_code ec;
    llvm::raw_fd_ostream file(path, ec);
    if (ec)
      die(1, "cannot write '" + path + "': " + ec.message());
    file << bytes;
    std::string extents;
    for (int64_t extent : tensor.shape)
      extents += (extents.empty() ? "" : ", ") + std::to_string(extent);
    llvm::errs() << "flash-run: wrote " << path << " (" << (integer ? "i32" : "f32") << "["
                 << extents << "])\n";
  }
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  config::setVersionPrinter("flash-run");
  cl::ParseCommandLineOptions(argc, argv,
                              "flash-run: compile a .flash variant, run it on the GPU, "
                              "validate against the CPU interpreter and time it\n");
  if (layout != "bhsd" && layout != "bshd")
    die(2, "--layout must be bhsd or bshd");
  llvm::StringMap<double> params;
  for (llvm::StringRef spec : paramSpecs) {
    auto [name, text] = spec.split('=');
    double value;
    if (name.empty() || text.trim().getAsDouble(value))
      die(2, "--param: '" + spec + "' is not NAME=NUMBER");
    params[name.trim()] = value;
  }

  try {
    // The GPU first: without one there is nothing to do (exit 3 = skipped).
    std::string whyNot;
    if (!flashrt::Driver::available(&whyNot)) {
      llvm::errs() << "flash-run: no usable GPU: " << whyNot << "\n";
      return flashrt::kNoGpuExitCode;
    }
    flashrt::Context context;
    flashrt::Device device = context.device();
    auto cc = device.computeCapability();

    llvm::SourceMgr sourceMgr;
    std::optional<frontend::Module> ast = frontend::parseFlashFile(inputFile, sourceMgr);
    if (!ast)
      return 1;
    llvm::StringRef selected = variantName.empty() ? llvm::StringRef(ast->variants[0].name)
                                                   : llvm::StringRef(variantName);
    if (const frontend::Variant *variant = ast->lookup(selected)) {
      bool varlen = variant->varlenQueries || variant->varlenKeys;
      if (!variant->paged && (configFlags.paged.getNumOccurrences() || pagesInOrder))
        die(2, "--paged and --pages-in-order apply to a variant with a 'paged' item; '" +
                   selected + "' reads dense K and V");
      if (!variant->paged && !varlen && fullKeyLengths)
        die(2, "--full-lengths applies to a variant with a 'paged' or 'varlen' item; '" +
                   selected + "' has neither");
    }

    config::ResolveOptions resolve;
    resolve.chip = !archOption.empty() ? archOption.getValue() : nvptx::chipFor(cc.major, cc.minor);
    resolve.request = configFlags.request();
    if (llvm::Error error = config::parseTile(tileSpec, resolve.request))
      die(2, llvm::toString(std::move(error)));
    if (llvm::Error error = backwardFlags.request(backwardPass, resolve.request))
      die(2, llvm::toString(std::move(error)));
    for (llvm::StringRef item : llvm::split(shapeSpec, ',')) {
      int64_t value;
      if (item.consume_front("D=")) {
        if (item.getAsInteger(10, value) || value < 1)
          die(2, "--shape: D must be a positive integer");
        resolve.sizes.headDim = value;
      } else if (item.consume_front("N=")) {
        if (item.getAsInteger(10, value) || value < 1)
          die(2, "--shape: N must be a positive integer");
        resolve.sizes.queryLength = value;
      }
    }

    DialectRegistry registry;
    registerAllDialects(registry);
    MLIRContext mlirContext(registry);

    // With no configuration asked for, a winner of flashc-tune for this
    // variant, shape bucket and GPU is used when the tuning cache has one.
    if (noTuningCache) {
      resolve.noTuningReason = "--no-tuning-cache";
    } else if (resolve.request.empty()) {
      // The shape bucket of the cache: the run's sizes, resolved against the
      // variant (built at the key tile).
      frontend::KernelOptions keyOptions;
      keyOptions.blockRows = tuning::kKeyTileRows;
      keyOptions.blockCols = tuning::kKeyTileCols;
      keyOptions.headDim = resolve.sizes.headDim;
      keyOptions.pageSize = resolve.request.pageSize;
      OwningOpRef<ModuleOp> keyModule =
          frontend::emitFlashIR(mlirContext, *ast, keyOptions, sourceMgr, selected);
      if (!keyModule)
        return 1;
      flash::KernelOp keyKernel = *keyModule->getOps<flash::KernelOp>().begin();
      interp::ProblemShape keyShape = parseShape(shapeSpec, "shape", keyKernel, nullptr);
      config::TuningSource tuning;
      tuning.cachePath = tuning::TuningCache::defaultPath();
      tuning.gpu = device.name();
      tuning.computeCapability = cc.number();
      tuning.queryLength = keyShape.queryLen();
      tuning.keyLength = keyShape.keyLen();
      tuning.context = &mlirContext;
      tuning.sourceMgr = &sourceMgr;
      resolve.tuning = tuning;
    }
    llvm::Expected<config::KernelConfig> resolved =
        config::resolveKernelConfig(resolve, *ast, selected);
    if (!resolved)
      die(2, "--gemm: " + llvm::toString(resolved.takeError()));
    if (!resolved->warnings().empty())
      llvm::WithColor::warning(llvm::errs(), "flash-run") << resolved->warnings();
    nvptx::TargetOptions target = resolved->target();
    if (trainingStep && !backwardPass)
      die(2, "--train-step times the forward and the backward: add --bwd");
    if (llvm::Error error = backwardFlags.apply(backwardPass, target))
      die(2, llvm::toString(std::move(error)));
    std::string configSource = resolved->source().str();

    OwningOpRef<ModuleOp> module = frontend::emitFlashIR(
        mlirContext, *ast, resolved->kernelOptions(resolve.sizes.headDim), sourceMgr, selected);
    if (!module)
      return 1;
    PassManager pm(&mlirContext);
    flash::buildFlashPipeline(pm);
    if (failed(pm.run(*module)))
      return 1;
    flash::KernelOp flashKernel = *module->getOps<flash::KernelOp>().begin();

    auto compileStart = std::chrono::steady_clock::now();
    CompileCache cache(cacheDir.empty() ? CompileCache::defaultDirectory()
                                        : cacheDir.getValue());
    int cacheHits = 0;
    std::string cacheWarnings;
    FailureOr<std::vector<flashrt::KernelPackage>> packages =
        noCache ? buildKernelPackages(*module, target)
                : buildKernelPackages(*module, target, cache, cacheHits, cacheWarnings);
    if (failed(packages))
      return 1;
    if (!cacheWarnings.empty())
      llvm::WithColor::warning(llvm::errs(), "flash-run") << cacheWarnings;
    double compileMs = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - compileStart)
                           .count();
    flashrt::KernelPackage package = (*packages)[0];
    if (!packageOut.empty())
      package.save(packageOut);
    flashrun::AttentionKernel kernel(context, package);
    if (keySplits.getNumOccurrences()) {
      try {
        kernel.setKeySplits(keySplits);
      } catch (const flashrt::Error &error) {
        die(1, std::string("--splits: ") + error.what());
      }
    }
    flashrt::Stream stream(context);

    // The backward: its own kernel op and package (its own tile).
    OwningOpRef<ModuleOp> backwardModule;
    std::optional<flashrun::BackwardKernel> backwardKernel;
    flash::BackwardKernelOp flashBackward;
    if (backwardPass) {
      backwardModule = frontend::emitFlashIR(
          mlirContext, *ast, resolved->backwardKernelOptions(resolve.sizes.headDim), sourceMgr,
          selected);
      if (!backwardModule)
        return 1;
      PassManager backwardPm(&mlirContext);
      flash::buildFlashPipeline(backwardPm);
      if (failed(backwardPm.run(*backwardModule)))
        return 1;
      flashBackward = *backwardModule->getOps<flash::BackwardKernelOp>().begin();
      FailureOr<std::vector<flashrt::KernelPackage>> backwardPackages =
          noCache ? buildKernelPackages(*backwardModule, target)
                  : buildKernelPackages(*backwardModule, target, cache, cacheHits, cacheWarnings);
      if (failed(backwardPackages))
        return 1;
      backwardKernel.emplace(context, (*backwardPackages)[0]);
    }

    interp::ProblemShape shape = parseShape(shapeSpec, "shape", flashKernel, nullptr);
    // A varlen batch's FLOPs: its sequences' N·M over the launch's B·N·M.
    auto raggedWork = [&](const interp::AttentionInputs &inputs) {
      if (!inputs.varlen.packsQueries() && !inputs.varlen.packsKeys())
        return 1.0;
      double work = 0;
      for (int64_t b = 0; b < shape.batch(); ++b)
        work += static_cast<double>(interp::sequenceQueryLength(inputs, b)) *
                static_cast<double>(interp::sequenceKeyLength(inputs, b));
      return work / (static_cast<double>(shape.batch()) * shape.queryLen() * shape.keyLen());
    };
    // The timed run's inputs (harness::upload draws the same ones again).
    // (q, k and v too, unless the shape is too large for the host: then
    // harness::upload draws them on the GPU, and the aux tensors alone here.)
    bool hostInputs = harness::drawsInputsOnHost(shape);
    // The timed run's paged cache (the check keeps ragged, shuffled pages).
    interp::PagedInputs timedPages;
    timedPages.fullLengths = fullKeyLengths;
    timedPages.inOrder = pagesInOrder;
    interp::AttentionInputs runInputs =
        hostInputs ? interp::makeRandomInputs(flashKernel, shape, seed, documents, timedPages)
                   : interp::makeRandomAuxInputs(flashKernel, shape, seed, documents,
                                                 timedPages);
    std::string why = interp::checkInputs(flashKernel, runInputs, hostInputs);
    if (!why.empty())
      die(1, why);
    if (!auxOut.empty())
      saveAuxTensors(flashKernel, runInputs, auxOut);

    // Validate at the run's sizes when the interpreter can afford it.
    harness::Layout dataLayout = layout == "bshd" ? harness::Layout::BSHD : harness::Layout::BHSD;
    interp::ProblemShape checkShape = !checkShapeSpec.empty()
                                          ? parseShape(checkShapeSpec, "check-shape", flashKernel, &shape)
                                          : harness::checkShapeFor(shape, flashKernel);
    harness::DeviceProblem checkProblem =
        harness::upload(context, flashKernel, checkShape, params, seed, dataLayout, documents);
    std::string interpreterError;
    std::optional<harness::Validation> checked =
        harness::validate(kernel, stream, checkProblem, flashKernel, interpreterError);
    if (!checked)
      die(1, "interpreter: " + interpreterError);
    harness::Validation validation = *checked;

    std::optional<harness::BackwardValidation> backwardValidation;
    double ms = 0, tflops = 0, backwardMs = 0, backwardTflops = 0, stepMs = 0, stepTflops = 0;
    int differingRuns = 0;
    harness::SummaryTimes summaryTimes, backwardSummaryTimes;
    if (backwardKernel) {
      harness::DeviceProblem backwardCheck =
          harness::upload(context, flashKernel, checkShape, params, seed, dataLayout);
      backwardValidation =
          harness::validateBackward(context, *backwardKernel, stream, backwardCheck, flashKernel,
                                    flashBackward, seed, interpreterError);
      if (!backwardValidation)
        die(1, "interpreter (backward): " + interpreterError);
      // Reproducibility at the check shape too, from the O and LSE the
      // validation uploaded (the timed shape, with more CTAs racing, is
      // checked below when it runs).
      if (backwardFlags.deterministic) {
        harness::BackwardProblem backward =
            harness::uploadBackward(context, flashBackward, backwardCheck, seed,
                                    backwardKernel->workspaceBytes(backwardCheck.sizes()));
        differingRuns +=
            harness::differingGradRuns(*backwardKernel, stream, backwardCheck, backward, 3);
      }
    }

    if (iterations > 0) {
      harness::DeviceProblem problem = harness::upload(context, flashKernel, shape, params, seed,
                                                       dataLayout, documents, timedPages);
      ms = harness::timeKernel(kernel, stream, problem, warmup, iterations);
      tflops = harness::tflops(shape, ms, causalFlops) * raggedWork(runInputs);
      summaryTimes = harness::timeBlockSummary(kernel, stream, problem, warmup, iterations);
      if (backwardKernel) {
        // From the forward's own O and LSE (the last timed launch wrote them).
        harness::BackwardProblem backward =
            harness::uploadBackward(context, flashBackward, problem, seed,
                                    backwardKernel->workspaceBytes(problem.sizes()));
        backwardMs =
            harness::timeBackward(*backwardKernel, stream, problem, backward, warmup, iterations);
        backwardTflops = 2.5 * harness::tflops(shape, backwardMs, causalFlops);
        backwardSummaryTimes = harness::timeBackwardSummary(*backwardKernel, stream, problem,
                                                            backward, warmup, iterations);
        if (trainingStep) {
          stepMs = harness::timeTrainingStep(kernel, *backwardKernel, stream, problem, backward,
                                             warmup, iterations);
          stepTflops = 3.5 * harness::tflops(shape, stepMs, causalFlops);
        }
        if (backwardFlags.deterministic)
          differingRuns +=
              harness::differingGradRuns(*backwardKernel, stream, problem, backward, 3);
      }
    }
    // The summary again at the check shape, after the timed shape's
    // launches on the same stream and kernel object: the tile order's
    // counters, reused with another layout, must have been left at zero.
    std::optional<harness::SummaryCheck> summaryAgain;
    if (kernel.hasBlockSummary() && iterations > 0) {
      summaryAgain = harness::checkBlockSummary(kernel, stream, checkProblem, flashKernel,
                                                interpreterError);
      if (!summaryAgain)
        die(1, "interpreter: " + interpreterError);
    }
    if (differingRuns > 0)
      llvm::errs() << "flash-run: --deterministic: dQ or an aux gradient differs bitwise in " << differingRuns
                   << " repeated runs\n";
    bool passed = validation.passed() && (!summaryAgain || summaryAgain->passed()) &&
                  (!backwardValidation || backwardValidation->passed()) && differingRuns == 0;

    std::string elementName;
    llvm::raw_string_ostream(elementName) << flashKernel.getElementType();
    // Decode is bound by reading K and V: bytes of both over the time.
    flashrun::Sizes runSizes{shape.batch(), shape.heads(), shape.kvHeads(), shape.queryLen(),
                             shape.keyLen()};
    double kvBytes = 2.0 * 2.0 * static_cast<double>(shape.batch() * shape.kvHeads()) *
                     static_cast<double>(shape.keyLen() * shape.headDim());
    // A paged cache's and a varlen batch's sequences read only their own keys.
    if (runInputs.paged.enabled() || runInputs.varlen.packsKeys()) {
      double keys = 0;
      for (int64_t b = 0; b < shape.batch(); ++b)
        keys += static_cast<double>(interp::sequenceKeyLength(runInputs, b));
      kvBytes = 2.0 * 2.0 * static_cast<double>(shape.kvHeads() * shape.headDim()) * keys;
    }
    double kvGigabytesPerSecond = ms > 0 ? kvBytes / (ms * 1e-3) / 1e9 : 0;
    if (csv && backwardValidation) {
      // One row per timed pass (the training step's with --train-step).
      auto row = [&](const char *dir, double rowMs, double rowTflops) {
        llvm::outs() << selected << "," << elementName << "," << shape.batch() << ","
                     << shape.heads() << "," << shape.kvHeads() << "," << shape.queryLen() << ","
                     << shape.keyLen() << "," << shape.headDim() << "," << layout << "," << dir << ","
                     << llvm::format("%.4f", rowMs) << ","
                     << llvm::format("%.1f", rowTflops) << ","
                     << llvm::format("%.2e", backwardValidation->dq.relative) << ","
                     << llvm::format("%.2e", backwardValidation->dk.relative) << ","
                     << llvm::format("%.2e", backwardValidation->dv.relative);
        // A package with a block summary: the summary's time and the
        // backward's with a cached one.
        if (llvm::StringRef(dir) == "bwd" && backwardKernel->hasBlockSummary())
          llvm::outs() << "," << llvm::format("%.4f", backwardSummaryTimes.summaryMs) << ","
                       << llvm::format("%.4f", backwardSummaryTimes.cachedMs);
        llvm::outs() << (passed ? "" : ",FAIL") << "\n";
      };
      row("bwd", backwardMs, backwardTflops);
      if (trainingStep && iterations > 0)
        row("train", stepMs, stepTflops);
    } else if (csv) {
      llvm::outs() << selected << "," << elementName << "," << shape.batch() << ","
                   << shape.heads() << "," << shape.kvHeads() << "," << shape.queryLen() << ","
                   << shape.keyLen() << "," << shape.headDim() << "," << layout << ","
                   << llvm::format("%.4f", ms) << "," << llvm::format("%.1f", tflops) << ","
                   << llvm::format("%.2e", validation.out.relative) << ","
                   << llvm::format("%.2e", validation.lse.relative);
      // Packages with a block summary: its time and the attention's from a
      // cached one.
      if (kernel.hasBlockSummary())
        llvm::outs() << "," << llvm::format("%.4f", summaryTimes.summaryMs) << ","
                     << llvm::format("%.4f", summaryTimes.cachedMs);
      // Packages that split keys: the split count and K + V read per second.
      if (package.splitKeys)
        llvm::outs() << "," << kernel.keySplits(runSizes) << ","
                     << llvm::format("%.1f", kvGigabytesPerSecond);
      llvm::outs() << (passed ? "" : ",FAIL") << "\n";
    } else {
      llvm::outs() << selected << "  " << device.name() << " (" << target.chip << ")  "
                   << elementName << "  " << layout << "  Br=" << package.blockRows
                   << " Bc=" << package.blockCols << " threads=" << package.threadsPerBlock
                   << " smem=" << package.dynamicSharedBytes << "\n";
      llvm::outs() << "  config " << configSource << "\n";
      for (const std::string &line :
           resolved->why(*ast->lookup(selected), flashKernel.getConfig().getHeadDim()))
        llvm::outs() << "         " << line << "\n";
      llvm::outs() << "  compile " << llvm::format("%.1f", compileMs) << " ms"
                   << (noCache         ? " (no cache)"
                       : cacheHits > 0 ? " (cache hit, " + cache.directory() + ")"
                                       : " (compiled, stored in " + cache.directory() + ")")
                   << "\n";
      llvm::outs() << "  check " << checkShape.str() << ": O rel "
                   << llvm::format("%.2e", validation.out.relative) << " max "
                   << llvm::format("%.2e", validation.out.maxAbs) << " (bound "
                   << llvm::format("%.0e", validation.outBound) << "), LSE rel "
                   << llvm::format("%.2e", validation.lse.relative) << " (bound "
                   << llvm::format("%.0e", validation.lseBound) << ")";
      if (validation.out.nonFinite || validation.lse.nonFinite)
        llvm::outs() << ", " << validation.out.nonFinite + validation.lse.nonFinite
                     << " NaN/inf";
      llvm::outs() << (validation.passed() ? "  ok\n" : "  FAIL\n");
      auto printSummary = [&](const harness::SummaryCheck &check, llvm::StringRef when) {
        llvm::outs() << "  check " << checkShape.str() << " (block summary" << when << ", "
                     << check.tiles << " tiles): ";
        if (check.mismatches)
          llvm::outs() << check.mismatches << " differ from the interpreter's ("
                       << check.firstMismatch << ")  FAIL\n";
        else
          llvm::outs() << "GPU == interpreter  ok\n";
        llvm::outs() << "  check " << checkShape.str() << " (tile order" << when << "): "
                     << (check.orderError.empty() ? "a permutation, costliest first  ok\n"
                                                  : check.orderError + "  FAIL\n");
      };
      if (kernel.hasBlockSummary())
        printSummary(validation.summary, "");
      if (summaryAgain)
        printSummary(*summaryAgain, " again, after the timed shape");
      if (backwardValidation) {
        const flashrt::KernelPackage &bwd = backwardKernel->package();
        const harness::BackwardValidation &bv = *backwardValidation;
        llvm::outs() << "  backward Br=" << bwd.blockRows << " Bc=" << bwd.blockCols
                     << " threads=" << bwd.threadsPerBlock
                     << " smem=" << bwd.dynamicSharedBytes;
        if (bwd.columnSlices > 1)
          llvm::outs() << " column-slices=" << bwd.columnSlices;
        llvm::outs() << "\n";
        llvm::outs() << "  check " << checkShape.str() << " (backward): ";
        auto stat = [&](const char *name, const interp::ErrorStats &e) {
          llvm::outs() << name << " rel " << llvm::format("%.2e", e.relative) << " max "
                       << llvm::format("%.2e", e.maxAbs);
          if (e.nonFinite)
            llvm::outs() << " (" << e.nonFinite << " NaN/inf)";
        };
        stat("dQ", bv.dq);
        llvm::outs() << ", ";
        stat("dK", bv.dk);
        llvm::outs() << ", ";
        stat("dV", bv.dv);
        for (const auto &[name, e] : bv.tensorGrads) {
          llvm::outs() << ", d" << name << " ";
          stat("", e);
        }
        llvm::outs() << " (bound " << llvm::format("%.0e", bv.bound) << ")"
                     << (bv.passed() ? "  ok\n" : "  FAIL\n");
        if (bv.summary) {
          llvm::outs() << "  check " << checkShape.str() << " (backward block summary, "
                       << bv.summary->tiles << " tiles): ";
          if (bv.summary->mismatches)
            llvm::outs() << bv.summary->mismatches << " differ from the interpreter's ("
                         << bv.summary->firstMismatch << ")  FAIL\n";
          else
            llvm::outs() << "GPU == interpreter  ok\n";
        }
        if (bv.cachedSummary) {
          llvm::outs() << "  check " << checkShape.str() << " (backward, cached summary): ";
          if (bv.cachedSummary->mismatches)
            llvm::outs() << "summary: " << bv.cachedSummary->mismatches
                         << " bytes differ from the interpreter's ("
                         << bv.cachedSummary->firstMismatch << "), ";
          if (bv.cachedLaunchWroteSummary)
            llvm::outs() << "the launch wrote the workspace's summary, ";
          stat("dQ", bv.cachedDq);
          llvm::outs() << ", ";
          stat("dK", bv.cachedDk);
          llvm::outs() << ", ";
          stat("dV", bv.cachedDv);
          llvm::outs() << (bv.cachedSummaryPassed() ? "  ok\n" : "  FAIL\n");
        }
        if (backwardFlags.deterministic)
          llvm::outs() << "  deterministic: dQ and aux gradients "
                       << (differingRuns ? "NOT bitwise reproducible" : "bitwise identical")
                       << " over 3 runs" << (iterations > 0 ? " (check and timed shapes)" : "")
                       << (differingRuns ? "  FAIL\n" : "  ok\n");
      }
      if (iterations > 0)
        llvm::outs() << "  time  " << shape.str() << ": " << llvm::format("%.4f", ms)
                     << " ms median of " << iterations << ", "
                     << llvm::format("%.1f", tflops) << " TFLOP/s"
                     << (causalFlops ? " (causal count)" : "") << "\n";
      if (iterations > 0 && package.splitKeys)
        llvm::outs() << "  time  " << shape.str() << " (split keys): "
                     << kernel.keySplits(runSizes) << " split(s) per query tile (check shape: "
                     << kernel.keySplits(checkProblem.sizes()) << "), K + V read at "
                     << llvm::format("%.1f", kvGigabytesPerSecond) << " GB/s\n";
      if (iterations > 0 && kernel.hasBlockSummary())
        llvm::outs() << "  time  " << shape.str() << " (block summary): "
                     << llvm::format("%.4f", summaryTimes.summaryMs) << " ms ("
                     << llvm::format("%.1f", 100.0 * summaryTimes.summaryMs / ms)
                     << "% of the call above, which includes it); attention from a cached "
                     << "summary " << llvm::format("%.4f", summaryTimes.cachedMs) << " ms\n";
      if (iterations > 0 && backwardKernel)
        llvm::outs() << "  time  " << shape.str() << " (backward): "
                     << llvm::format("%.4f", backwardMs) << " ms median of " << iterations
                     << ", " << llvm::format("%.1f", backwardTflops) << " TFLOP/s (2.5 x "
                     << "forward FLOPs" << (causalFlops ? ", causal count" : "") << ")"
                     << "\n";
      if (iterations > 0 && backwardKernel && backwardKernel->hasBlockSummary())
        llvm::outs() << "  time  " << shape.str() << " (backward block summary): "
                     << llvm::format("%.4f", backwardSummaryTimes.summaryMs) << " ms ("
                     << llvm::format("%.1f", 100.0 * backwardSummaryTimes.summaryMs / backwardMs)
                     << "% of the backward above, which includes it); backward from a cached "
                     << "summary " << llvm::format("%.4f", backwardSummaryTimes.cachedMs)
                     << " ms\n";
      if (iterations > 0 && backwardKernel && trainingStep)
        llvm::outs() << "  time  " << shape.str() << " (training step: forward + backward): "
                     << llvm::format("%.4f", stepMs) << " ms median of " << iterations << ", "
                     << llvm::format("%.1f", stepTflops) << " TFLOP/s (3.5 x forward FLOPs"
                     << (causalFlops ? ", causal count" : "") << ")\n";
    }
    return passed ? 0 : 1;
  } catch (const flashrt::Error &error) {
    llvm::WithColor::error(llvm::errs(), "flash-run")
        << flashrt::errorKindName(error.kind()) << ": " << error.what() << "\n";
    return flashrt::exitCodeFor(error.kind());
  }
}
