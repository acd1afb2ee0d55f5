//===- flashc.cpp - The flashc compiler driver ----------------------------===//
//
//   flashc variant.flash --emit=flash -o -        flash IR after the passes
//   flashc variant.flash --run=cpu --shape B=2,H=4,N=1000,D=64
//   flashc variant.flash --run=cpu --bwd       gradients against fp64
//
// Diagnostics go to stderr; exit 0 on success, 1 on bad input or a failed
// check, 2 on bad command-line usage.
//
//===----------------------------------------------------------------------===//

#include "flashc/Config/ConfigFlags.h"
#include "flashc/Config/KernelConfig.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/BackwardCheck.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"
#include "flashc/Interpreter/VariantReference.h"
#include "flashc/Target/NVPTX/EmitPTX.h"
#include "flashc/Target/NVPTX/Ptxas.h"
#include "flashc/Target/Package/AOT.h"
#include "flashc/Target/Package/KernelPackage.h"
#include "flashc/Tuning/Tuning.h"

#include "flashrt/Device.h"
#include "flashrt/Driver.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <chrono>
#include <limits>
#include <optional>

using namespace mlir;
using namespace flashc;
namespace cl = llvm::cl;

namespace {

enum class EmitKind { None, FlashRaw, Flash, Gpu, Llvm, Ptx, Package, Aot };
enum class RunKind { None, Cpu };

cl::OptionCategory flashcCategory("flashc options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .flash file>"), cl::init("-"),
                               cl::cat(flashcCategory));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(flashcCategory));
cl::opt<EmitKind> emitKind(
    "emit", cl::desc("What to write"), cl::init(EmitKind::None),
    cl::values(clEnumValN(EmitKind::FlashRaw, "flash-raw",
                          "flash IR as the front end builds it, before any pass"),
               clEnumValN(EmitKind::Flash, "flash",
                          "flash IR after flash-fuse-rescale and flash-fold-scale "
                          "(what the interpreter and GPU backends run)"),
               clEnumValN(EmitKind::Gpu, "gpu",
                          "after flash-to-sm80/sm90: a gpu.module of LLVM/NVVM-dialect "
                          "kernels"),
               clEnumValN(EmitKind::Llvm, "llvm", "LLVM and NVVM dialects only, ready for NVPTX"),
               clEnumValN(EmitKind::Ptx, "ptx", "PTX text from LLVM's NVPTX backend"),
               clEnumValN(EmitKind::Package, "package",
                          "a kernel package: PTX plus launch metadata (one variant)"),
               clEnumValN(EmitKind::Aot, "aot",
                          "into the directory -o: per variant a C header, a C++ source "
                          "launching it through libflashrt, the PTX and (with ptxas) "
                          "a cubin")),
    cl::cat(flashcCategory));
cl::opt<std::string> arch("arch", cl::desc("GPU target: sm_80 (also runs on sm_86/89/90) or sm_90a"),
                          cl::init("sm_90a"), cl::cat(flashcCategory));
cl::opt<std::string> tunedFor(
    "tuned-for",
    cl::desc("Use flashc-tune's winner for this GPU, e.g. \"NVIDIA H200:90\" (name:compute "
             "capability; default: the GPU of this machine, if any)"),
    cl::value_desc("name:cc"), cl::cat(flashcCategory));
cl::opt<bool> noTuningCache("no-tuning-cache",
                            cl::desc("Ignore the tuning cache (default tiles)"),
                            cl::cat(flashcCategory));
cl::opt<bool> verbose("verbose", cl::desc("Say which configuration each kernel uses and why"),
                      cl::cat(flashcCategory));
cl::opt<std::string> ptxasPath(
    "ptxas", cl::desc("ptxas for --emit=aot's cubin (default: ptxas on PATH, then "
                      "/usr/local/cuda/bin/ptxas; 'none' skips the cubin)"),
    cl::value_desc("path"), cl::cat(flashcCategory));
config::ConfigFlags configFlags(flashcCategory);
cl::opt<RunKind> runKind(
    "run", cl::desc("Execute the kernels and check them against the naive fp64 reference"),
    cl::init(RunKind::None),
    cl::values(clEnumValN(RunKind::Cpu, "cpu", "the CPU interpreter of flash IR")),
    cl::cat(flashcCategory));
cl::opt<std::string> variantName("variant", cl::desc("Only this variant (default: all)"),
                                 cl::value_desc("name"), cl::cat(flashcCategory));
cl::opt<std::string> shapeSpec(
    "shape",
    cl::desc("Problem sizes, e.g. B=2,H=4,N=1000,D=64 (also HKV, M). Defaults: B=1, H=2, "
             "HKV=H, N=256, M=N, D=64, or what the variant fixes"),
    cl::value_desc("K=V,..."), cl::cat(flashcCategory));
cl::opt<std::string> tileSpec("tile",
                              cl::desc("Tile shape, e.g. Br=64,Bc=64, of the forward and (without "
                                       "--bwd-tile) the backward (default: by head dim, GEMM "
                                       "kind, variant and N; --verbose names the rule)"),
                              cl::value_desc("Br=..,Bc=.."), cl::cat(flashcCategory));
cl::list<std::string> paramSpecs("param", cl::desc("Set a runtime parameter, e.g. window=256"),
                                 cl::value_desc("name=value"), cl::cat(flashcCategory));
cl::opt<bool> backwardPass(
    "bwd",
    cl::desc("The backward pass: --emit=flash/flash-raw print each variant's "
             "flash.backward_kernel; --run=cpu checks dQ, dK, dV and aux tensor "
             "gradients against the fp64 reference; --emit=gpu/llvm/ptx/package emit the "
             "backward kernels (preprocess, main, dQ conversion)"),
    cl::cat(flashcCategory));
config::BackwardFlags backwardFlags(flashcCategory);
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random inputs (--run)"), cl::init(1),
                       cl::cat(flashcCategory));
cl::opt<int64_t> keySplits(
    "splits",
    cl::desc("--run=cpu of kernels that split their keys (--split-keys): the split count S "
             "(default 1; more splits than key blocks leave some empty)"),
    cl::init(1), cl::cat(flashcCategory));

int usageError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "flashc") << message << "\n";
  return 2;
}

/// Parses "K=V,K=V" for --option (keys from `allowed`), reporting errors.
std::optional<llvm::StringMap<int64_t>> parseSizes(llvm::StringRef spec, const char *option,
                                                   llvm::ArrayRef<llvm::StringRef> allowed) {
  llvm::Expected<llvm::StringMap<int64_t>> sizes = interp::parseSizes(spec, option, allowed);
  if (!sizes) {
    usageError(llvm::toString(sizes.takeError()));
    return std::nullopt;
  }
  return std::move(*sizes);
}

/// Relative-error bound of O by element type: the output is rounded to it.
double outputBound(Type elementType) {
  if (elementType.isBF16())
    return 1e-2;
  if (elementType.isF16())
    return 2e-3;
  return 1e-5;
}

/// LSE passes on its relative or its absolute error: a row whose LSE is near
/// 0 (one visible key with a small score) makes the relative one meaningless.
bool lsePasses(const interp::ErrorStats &stats, double bound) {
  return stats.passes(bound) ||
         (stats.passes(std::numeric_limits<double>::infinity()) && stats.maxAbs <= bound);
}

void printStats(llvm::raw_ostream &os, llvm::StringRef what, const interp::ErrorStats &stats,
                double bound, std::optional<bool> passed = std::nullopt) {
  os << "  " << llvm::left_justify(what, 4) << " rel " << llvm::format("%.2e", stats.relative)
     << "  max " << llvm::format("%.2e", stats.maxAbs) << "  (bound "
     << llvm::format("%.1e", bound) << ")";
  if (stats.nonFinite)
    os << "  " << stats.nonFinite << " NaN/inf";
  if (stats.mismatchedInf)
    os << "  " << stats.mismatchedInf << " rows empty on one side only";
  os << (passed.value_or(stats.passes(bound)) ? "  ok\n" : "  FAIL\n");
}

/// Checks the backward kernel of `kernel`'s variant from the forward's own
/// O and LSE on `inputs`. Returns whether every gradient is within bounds.
bool checkBackwardOnCpu(flash::KernelOp kernel, const interp::AttentionOutputs &outputs,
                        flash::BackwardKernelOp backward, const frontend::Variant &variant,
                        const interp::AttentionInputs &inputs, bool &ranOk) {
  std::vector<float> outputGrad =
      interp::makeRandomOutputGrad(kernel, inputs.shape, seed);
  interp::BackwardCheck check;
  std::string error;
  ranOk = succeeded(
      interp::checkBackward(outputs, backward, variant, inputs, outputGrad, check, error));
  if (!ranOk) {
    llvm::WithColor::error(llvm::errs(), "flashc")
        << "variant '" << kernel.getSymName() << "' (backward): " << error << "\n";
    return false;
  }
  for (const interp::GradientCheck &gradient : check.gradients)
    printStats(llvm::outs(), gradient.name, gradient.stats, gradient.bound);
  llvm::outs() << "  interpreter " << llvm::format("%.2f", check.seconds)
               << " s (backward)";
  const interp::AttentionOutputs::TileCounts &tiles = check.tiles;
  if (tiles.empty + tiles.full + tiles.partial > 0)
    llvm::outs() << ", backward mask tiles: " << tiles.empty << " empty, " << tiles.full
                 << " full, " << tiles.partial << " partial";
  if (check.emptyRows)
    llvm::outs() << ", " << check.emptyRows << " rows see no key (zero gradients)";
  llvm::outs() << "\n";
  return check.passes();
}

/// Runs every kernel of `module` on the interpreter and checks it, and its
/// backward kernel in `backwardModule` when given. Returns the process exit
/// code.
int runOnCpu(ModuleOp module, ModuleOp backwardModule, const frontend::Module &ast,
             const llvm::StringMap<int64_t> &sizes, const llvm::StringMap<double> &params) {
  bool allPassed = true;
  for (auto kernel : module.getOps<flash::KernelOp>()) {
    const frontend::Variant *variant = ast.lookup(kernel.getSymName());
    interp::ProblemShape shape = interp::resolveShape(kernel, sizes);
    interp::AttentionInputs inputs = interp::makeRandomInputs(kernel, shape, seed);
    for (const auto &param : params)
      inputs.params[param.getKey()] = param.getValue();
    inputs.keySplits = keySplits;

    flash::TileConfigAttr config = kernel.getConfig();
    Type element = kernel.getElementType();
    llvm::outs() << kernel.getSymName() << "  " << shape.str() << "  Br=" << config.getBr()
                 << " Bc=" << config.getBc() << "  " << element << "  seed=" << seed
                 << (backwardModule ? "  backward" : "")
                 << (kernel.getSplitKeys() ? "  splits=" + std::to_string(keySplits) : "")
                 << (kernel.getPackedHeads() ? "  packed-gqa" : "")
                 << (kernel.getPagedKvAttr()
                         ? "  paged=" + std::to_string(kernel.getPagedKvAttr().getPage())
                         : "")
                 << (kernel.getVarlenAttr() ? "  varlen" : "") << "\n";
    // A paged cache: the sequences' key lengths (ragged: M, 1, 0, random).
    if (inputs.paged.enabled()) {
      llvm::outs() << "  key lengths";
      for (int32_t length : inputs.paged.lengths)
        llvm::outs() << " " << length;
      llvm::outs() << " over " << inputs.paged.numPages << " shuffled pages\n";
    }
    // A varlen batch: the sequences' offsets (ragged: full, 1, 0, random).
    for (auto [offsets, what] : {std::make_pair(&inputs.varlen.queryOffsets, "query"),
                                 std::make_pair(&inputs.varlen.keyOffsets, "key")})
      if (!offsets->empty()) {
        llvm::outs() << "  " << what << " offsets";
        for (int32_t offset : *offsets)
          llvm::outs() << " " << offset;
        llvm::outs() << "\n";
      }
    auto start = std::chrono::steady_clock::now();
    interp::AttentionOutputs outputs;
    std::string error;
    if (failed(interp::runKernel(kernel, inputs, outputs, error))) {
      llvm::WithColor::error(llvm::errs(), "flashc")
          << "variant '" << kernel.getSymName() << "': " << error << "\n";
      return 1;
    }
    double interpSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    interp::ReferenceOutputs reference =
        interp::naiveAttention(inputs, interp::referenceFor(*variant, inputs));

    interp::ErrorStats outStats = interp::compare(outputs.out, reference.out);
    interp::ErrorStats lseStats = interp::compare(outputs.lse, reference.lse);
    // Rows past a varlen sequence are no rows of the problem.
    int64_t paddingRows = 0;
    if (inputs.varlen.packsQueries())
      for (int64_t b = 0; b < inputs.shape.batch(); ++b)
        paddingRows += (inputs.shape.queryLen() - interp::sequenceQueryLength(inputs, b)) *
                       inputs.shape.heads();
    int64_t emptyRows =
        llvm::count_if(reference.lse, [](double v) { return std::isinf(v); }) - paddingRows;
    printStats(llvm::outs(), "O", outStats, outputBound(element));
    printStats(llvm::outs(), "LSE", lseStats, 1e-5, lsePasses(lseStats, 1e-5));
    llvm::outs() << "  interpreter " << llvm::format("%.2f", interpSeconds) << " s";
    const interp::AttentionOutputs::TileCounts &tiles = outputs.tiles;
    if (tiles.empty + tiles.full + tiles.partial > 0)
      llvm::outs() << ", mask tiles: " << tiles.empty << " empty, " << tiles.full << " full, "
                   << tiles.partial << " partial";
    if (emptyRows)
      llvm::outs() << ", " << emptyRows << " rows see no key (O = 0, LSE = -inf)";
    llvm::outs() << "\n";
    allPassed &= outStats.passes(outputBound(element)) && lsePasses(lseStats, 1e-5);
    if (backwardModule) {
      auto backward = backwardModule.lookupSymbol<flash::BackwardKernelOp>(kernel.getSymName());
      bool ranOk = true;
      allPassed &= checkBackwardOnCpu(kernel, outputs, backward, *variant, inputs, ranOk);
      if (!ranOk)
        return 1;
    }
  }
  return allPassed ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(flashcCategory);
  config::setVersionPrinter("flashc");
  cl::ParseCommandLineOptions(
      argc, argv,
      "flashc: compile attention variants written in the .flash language\n\n"
      "  flashc causal.flash --emit=flash -o causal.mlir\n"
      "  flashc causal.flash --run=cpu --shape B=2,H=4,N=1000,D=64\n");

  if (emitKind == EmitKind::None && runKind == RunKind::None)
    return usageError("nothing to do: give --emit=flash|flash-raw|gpu|llvm|ptx|package and/or "
                      "--run=cpu");

  std::optional<llvm::StringMap<int64_t>> sizes = parseSizes(shapeSpec, "shape", interp::kShapeKeys);
  if (!sizes)
    return 2;
  config::ConfigRequest request = configFlags.request();
  if (llvm::Error error = config::parseTile(tileSpec, request))
    return usageError(llvm::toString(std::move(error)));
  if (llvm::Error error = backwardFlags.request(backwardPass, request))
    return usageError(llvm::toString(std::move(error)));
  llvm::StringMap<double> params;
  for (llvm::StringRef spec : paramSpecs) {
    auto [name, text] = spec.split('=');
    double value;
    if (name.empty() || text.trim().getAsDouble(value))
      return usageError("--param: '" + spec + "' is not NAME=NUMBER");
    params[name.trim()] = value;
  }

  llvm::SourceMgr sourceMgr;
  std::optional<frontend::Module> ast = frontend::parseFlashFile(inputFile, sourceMgr);
  if (!ast)
    return 1;

  if (arch != "sm_80" && arch != "sm_86" && arch != "sm_89" && arch != "sm_90" &&
      arch != "sm_90a")
    return usageError("--arch must be sm_80, sm_86, sm_89, sm_90 or sm_90a, got '" + arch + "'");
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext context(registry);

  // Which configuration: the command line's, else flashc-tune's winner for
  // this variant, shape bucket and GPU, else the rules (the resolver).
  std::optional<int64_t> queryLength =
      sizes->count("N") ? std::optional<int64_t>(sizes->lookup("N")) : std::nullopt;
  config::ResolveOptions resolve;
  resolve.chip = arch;
  resolve.request = request;
  if (sizes->count("D"))
    resolve.sizes.headDim = sizes->lookup("D");
  resolve.sizes.queryLength = queryLength;
  const frontend::Variant *only =
      !variantName.empty() ? ast->lookup(variantName)
      : ast->variants.size() == 1 ? &ast->variants.front() : nullptr;
  if (!request.empty() || emitKind < EmitKind::Gpu) {
    // Tuned configs are per GPU: flash IR and the interpreter need no lookup
    // (and no driver start-up).
  } else if (noTuningCache) {
    resolve.noTuningReason = "--no-tuning-cache";
  } else if (!only) {
    resolve.noTuningReason = "the tuning cache applies to one variant: use --variant";
  } else {
    config::TuningSource tuning;
    if (!tunedFor.empty()) {
      auto [name, number] = llvm::StringRef(tunedFor).rsplit(':');
      if (name.empty() || number.getAsInteger(10, tuning.computeCapability))
        return usageError("--tuned-for: '" + tunedFor + "' is not NAME:CC (e.g. NVIDIA H200:90)");
      tuning.gpu = name.str();
    } else if (flashrt::Driver::available()) {
      try {
        flashrt::Device device = flashrt::Device::fromEnvironment();
        tuning.gpu = device.name();
        tuning.computeCapability = device.computeCapability().number();
      } catch (const flashrt::Error &error) {
        llvm::WithColor::warning(llvm::errs(), "flashc")
            << "no tuned configs: " << error.what() << "\n";
      }
    }
    if (tuning.gpu.empty()) {
      resolve.noTuningReason = "no GPU to look up tuned configs for; see --tuned-for";
    } else {
      tuning.cachePath = tuning::TuningCache::defaultPath();
      tuning.queryLength = queryLength.value_or(256);
      tuning.keyLength = sizes->count("M") ? sizes->lookup("M") : tuning.queryLength;
      tuning.context = &context;
      tuning.sourceMgr = &sourceMgr;
      resolve.tuning = tuning;
    }
  }
  llvm::Expected<config::KernelConfig> resolved =
      config::resolveKernelConfig(resolve, *ast, variantName);
  if (!resolved)
    return usageError("--gemm: " + llvm::toString(resolved.takeError()));
  if (!resolved->warnings().empty())
    llvm::WithColor::warning(llvm::errs(), "flashc") << resolved->warnings();
  nvptx::TargetOptions target = resolved->target();
  if (llvm::Error error = backwardFlags.apply(backwardPass, target))
    return usageError(llvm::toString(std::move(error)));

  frontend::KernelOptions kernelOptions = resolved->kernelOptions(resolve.sizes.headDim);
  OwningOpRef<ModuleOp> module =
      frontend::emitFlashIR(context, *ast, kernelOptions, sourceMgr, variantName);
  if (!module)
    return 1;
  // The backward kernels, beside the forward ones (the CPU check runs the
  // forward first for O and LSE).
  OwningOpRef<ModuleOp> backwardModule;
  if (backwardPass) {
    backwardModule = frontend::emitFlashIR(
        context, *ast, resolved->backwardKernelOptions(resolve.sizes.headDim), sourceMgr,
        variantName);
    if (!backwardModule)
      return 1;
  }
  if (verbose)
    for (flash::KernelOp kernel : module->getOps<flash::KernelOp>()) {
      flash::TileConfigAttr tileConfig = kernel.getConfig();
      llvm::errs() << "flashc: " << kernel.getSymName() << ": Br=" << tileConfig.getBr()
                   << " Bc=" << tileConfig.getBc() << " D=" << tileConfig.getHeadDim();
      if (emitKind >= EmitKind::Gpu)
        llvm::errs() << " " << resolved->gemm() << " "
                     << (resolved->gemm() == "wgmma" ? target.kvCopy : "cp.async") << " on "
                     << target.chip;
      llvm::errs() << ": " << resolved->source() << "\n";
      const frontend::Variant *variant = ast->lookup(kernel.getSymName());
      for (const std::string &line : resolved->why(*variant, tileConfig.getHeadDim()))
        llvm::errs() << "flashc: " << kernel.getSymName() << ":   " << line << "\n";
    }
  if (verbose && backwardModule)
    for (flash::BackwardKernelOp kernel : backwardModule->getOps<flash::BackwardKernelOp>()) {
      flash::TileConfigAttr tileConfig = kernel.getConfig();
      const frontend::Variant *variant = ast->lookup(kernel.getSymName());
      config::TileChoice tile =
          resolved->backwardTileFor(*variant, tileConfig.getHeadDim());
      llvm::errs() << "flashc: " << kernel.getSymName() << " (backward): Br="
                   << tileConfig.getBr() << " Bc=" << tileConfig.getBc()
                   << " D=" << tileConfig.getHeadDim();
      if (emitKind >= EmitKind::Gpu)
        llvm::errs() << " " << resolved->gemm() << " on " << target.chip;
      llvm::errs() << ": " << resolved->backwardSource() << "\n";
      llvm::errs() << "flashc: " << kernel.getSymName() << " (backward):   tile: " << tile.why
                   << "\n";
      llvm::StringRef adds =
          kernel.getOrderedQueryGrads()
              ? "in key-block order by default, where it measured faster (ordered_query_grads)"
          : kernel.getQueryGradWriter()
              ? "by the dQ writer in any order by default, where it measured faster "
                "(query_grad_writer)"
              : "as the flags ask (--deterministic, --dq-writer), else in any order";
      llvm::errs() << "flashc: " << kernel.getSymName() << " (backward):   dQ added " << adds
                   << "\n";
    }

  if (emitKind != EmitKind::FlashRaw) {
    PassManager pm(&context);
    flash::buildFlashPipeline(pm);
    if (failed(pm.run(*module)) || (backwardModule && failed(pm.run(*backwardModule))))
      return 1;
  }

  if (emitKind >= EmitKind::Gpu && runKind == RunKind::Cpu)
    return usageError("--run=cpu needs flash IR: combine it with --emit=flash or none");
  if (emitKind == EmitKind::Aot) {
    if (outputFile == "-")
      return usageError("--emit=aot writes files: give the directory with -o");
    std::string ptxas = nvptx::findPtxas(ptxasPath);
    if (ptxas.empty() && ptxasPath.empty())
      llvm::WithColor::note(llvm::errs(), "flashc")
          << "no ptxas found: writing PTX without a cubin (the runtime JIT-compiles it)\n";
    FailureOr<std::vector<flashrt::KernelPackage>> packages =
        buildKernelPackages(*module, target);
    if (failed(packages))
      return 1;
    // With --bwd, each variant's backward package goes into its sources too
    // (both modules hold the variants in the same order).
    FailureOr<std::vector<flashrt::KernelPackage>> backwardPackages =
        backwardModule ? buildKernelPackages(*backwardModule, target)
                       : FailureOr<std::vector<flashrt::KernelPackage>>(
                             std::vector<flashrt::KernelPackage>());
    if (failed(backwardPackages))
      return 1;
    for (auto [index, package] : llvm::enumerate(*packages))
      if (llvm::Error error = writeAOT(package, inputFile, outputFile, ptxas,
                                       backwardModule ? &(*backwardPackages)[index] : nullptr)) {
        llvm::WithColor::error(llvm::errs(), "flashc") << llvm::toString(std::move(error))
                                                       << "\n";
        return 1;
      }
    return 0;
  }
  if (emitKind >= EmitKind::Gpu) {
    // With --bwd, the backward kernels go to the GPU instead of the forward.
    ModuleOp gpuSource = backwardModule ? *backwardModule : *module;
    std::string text;
    llvm::raw_string_ostream os(text);
    if (emitKind == EmitKind::Package) {
      if (llvm::range_size(gpuSource.getBody()->getOperations()) != 1)
        return usageError("--emit=package writes one variant; pick it with --variant");
      FailureOr<std::vector<flashrt::KernelPackage>> packages =
          buildKernelPackages(gpuSource, target);
      if (failed(packages))
        return 1;
      os << (*packages)[0].serialize();
    } else if (emitKind == EmitKind::Ptx) {
      FailureOr<nvptx::CompiledPTX> compiled = nvptx::compileToPTX(gpuSource, target);
      if (failed(compiled))
        return 1;
      os << compiled->ptx;
    } else {
      if (failed(emitKind == EmitKind::Gpu ? nvptx::lowerToGPU(gpuSource, target)
                                           : nvptx::lowerToLLVM(gpuSource, target)))
        return 1;
      gpuSource->print(os);
      os << "\n";
    }
    std::string error;
    auto output = mlir::openOutputFile(outputFile, &error);
    if (!output) {
      llvm::WithColor::error(llvm::errs(), "flashc") << error << "\n";
      return 1;
    }
    output->os() << text;
    output->keep();
    return 0;
  }

  if (emitKind != EmitKind::None) {
    std::string error;
    auto output = mlir::openOutputFile(outputFile, &error);
    if (!output) {
      llvm::WithColor::error(llvm::errs(), "flashc") << error << "\n";
      return 1;
    }
    (backwardModule ? *backwardModule : *module)->print(output->os());
    output->os() << "\n";
    output->keep();
  }
  if (runKind == RunKind::Cpu)
    return runOnCpu(*module, backwardModule ? *backwardModule : ModuleOp(), *ast, *sizes,
                    params);
  return 0;
}
