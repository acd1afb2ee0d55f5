//===- flash-run.cpp - Compile, run, validate and time on the GPU ---------===//
//
//   flash-run causal.flash --shape B=8,H=16,N=2048,D=128 [--layout bshd]
//
// Compiles the variant to PTX in-process, makes seeded random inputs,
// poisons the outputs, launches through libflashrt, checks O and LSE against
// the CPU interpreter on the same flash IR, then times the kernel with CUDA
// events (warm-up, median). Exit codes: 0 ok, 1 validation failed or bad
// input, 2 bad command line, 3 no GPU/driver, 4 PTX JIT error, 5 other
// driver errors.
//
//===----------------------------------------------------------------------===//

#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"
#include "flashc/Target/Package/KernelPackage.h"

#include "flashrun/AttentionKernel.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
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
cl::opt<std::string> gemmKind("gemm",
                              cl::desc("Tensor-core instructions: auto (wgmma on sm_90a, "
                                       "mma.sync elsewhere), mma.sync or wgmma"),
                              cl::init("auto"), cl::cat(category));
cl::opt<std::string> kvCopy("kv-copy",
                            cl::desc("How the wgmma kernel moves K and V blocks to shared "
                                     "memory: tma (default) or cp.async"),
                            cl::init("tma"), cl::cat(category));
cl::opt<std::string> cacheDir("cache-dir",
                              cl::desc("Compile cache directory (default: $FLASHC_CACHE_DIR, "
                                       "else $XDG_CACHE_HOME/flashc or ~/.cache/flashc)"),
                              cl::cat(category));
cl::opt<bool> noCache("no-cache", cl::desc("Compile without the compile cache"),
                      cl::cat(category));
cl::opt<int> rowsPerWarp("rows-per-warp",
                         cl::desc("Query rows per warp in the sm80 kernel: 16, 32, or 0 = auto"),
                         cl::init(0), cl::cat(category));
cl::opt<std::string> layout("layout", cl::desc("Memory layout of q, k, v, o: bhsd or bshd"),
                            cl::init("bhsd"), cl::cat(category));
cl::list<std::string> paramSpecs("param", cl::desc("NAME=VALUE"), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random inputs"), cl::init(1),
                       cl::cat(category));
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
                                   "rel_err_o,rel_err_lse"),
                  cl::cat(category));
cl::opt<std::string> packageOut("save-package", cl::desc("Also write the kernel package here"),
                                cl::cat(category));

[[noreturn]] void die(int code, const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "flash-run") << message << "\n";
  std::exit(code);
}

interp::ProblemShape parseShape(llvm::StringRef spec, flash::KernelOp kernel,
                                const interp::ProblemShape *base) {
  llvm::StringMap<int64_t> given;
  llvm::SmallVector<llvm::StringRef> items;
  spec.split(items, ',', -1, false);
  for (llvm::StringRef item : items) {
    auto [key, text] = item.split('=');
    int64_t value;
    if (text.trim().getAsInteger(10, value) || value < 1 ||
        !llvm::is_contained(interp::kShapeKeys, key.trim()))
      die(2, "--shape: '" + item + "' is not one of B,H,HKV,N,M,D = a positive integer");
    given[key.trim()] = value;
  }
  return interp::resolveShape(kernel, given, base);
}

/// Host element bits of one float already rounded to `type`.
uint16_t toHalfBits(float value, Type type) {
  if (type.isBF16()) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    return static_cast<uint16_t>(bits >> 16);
  }
  _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, 2);
  return bits;
}

float fromHalfBits(uint16_t bits, Type type) {
  if (type.isBF16()) {
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  _Float16 half;
  std::memcpy(&half, &bits, 2);
  return static_cast<float>(half);
}

bool isBSHD() { return layout == "bshd"; }

flashrun::TensorRef tensorRef(uint64_t ptr, int64_t heads, int64_t length, int64_t dim) {
  return isBSHD() ? flashrun::TensorRef::bshd(ptr, heads, length, dim)
                  : flashrun::TensorRef::bhsd(ptr, heads, length, dim);
}

/// Calls `copy(hostOffset, deviceOffset)` for every row of a [B, heads,
/// length, D] tensor: host data is BHSD, device data is in the chosen layout.
template <typename CopyRow>
void forEachRow(int64_t batch, int64_t heads, int64_t length, int64_t dim, CopyRow copy) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < length; ++s) {
        int64_t host = ((b * heads + h) * length + s) * dim;
        copy(host, isBSHD() ? ((b * length + s) * heads + h) * dim : host);
      }
}

/// Host floats -> device element bits.
std::vector<uint16_t> packTensor(const std::vector<float> &data, int64_t batch, int64_t heads,
                                 int64_t length, int64_t dim, Type type) {
  std::vector<uint16_t> bits(data.size());
  forEachRow(batch, heads, length, dim, [&](int64_t host, int64_t device) {
    for (int64_t d = 0; d < dim; ++d)
      bits[device + d] = toHalfBits(data[host + d], type);
  });
  return bits;
}

/// Device element bits -> host floats.
std::vector<float> unpackTensor(const std::vector<uint16_t> &bits, int64_t batch, int64_t heads,
                                int64_t length, int64_t dim, Type type) {
  std::vector<float> data(bits.size());
  forEachRow(batch, heads, length, dim, [&](int64_t host, int64_t device) {
    for (int64_t d = 0; d < dim; ++d)
      data[host + d] = fromHalfBits(bits[device + d], type);
  });
  return data;
}

/// Device copies of one launch's tensors.
struct DeviceProblem {
  interp::AttentionInputs inputs;
  std::optional<flashrt::DeviceBuffer> q, k, v, o, lse;
  std::vector<flashrt::DeviceBuffer> aux;
  std::map<std::string, double> params;

  flashrun::Sizes sizes() const {
    const interp::ProblemShape &s = inputs.shape;
    return {s.batch(), s.heads(), s.kvHeads(), s.queryLen(), s.keyLen()};
  }
};

DeviceProblem upload(flashrt::Context &context, flash::KernelOp kernel,
                     const interp::ProblemShape &shape,
                     const llvm::StringMap<double> &paramOverrides) {
  DeviceProblem problem;
  problem.inputs = interp::makeRandomInputs(kernel, shape, seed);
  for (const auto &entry : paramOverrides) {
    problem.inputs.params[entry.getKey()] = entry.getValue();
    problem.params[entry.getKey().str()] = entry.getValue();
  }
  Type element = kernel.getElementType();
  int64_t D = shape.headDim();
  auto put = [&](const std::vector<float> &data, int64_t heads, int64_t length) {
    std::vector<uint16_t> bits = packTensor(data, shape.batch(), heads, length, D, element);
    flashrt::DeviceBuffer buffer(context, bits.size() * 2);
    buffer.copyFromHost(bits.data(), bits.size() * 2);
    return buffer;
  };
  problem.q.emplace(put(problem.inputs.q, shape.heads(), shape.queryLen()));
  problem.k.emplace(put(problem.inputs.k, shape.kvHeads(), shape.keyLen()));
  problem.v.emplace(put(problem.inputs.v, shape.kvHeads(), shape.keyLen()));
  problem.o.emplace(context, problem.inputs.q.size() * 2);
  problem.lse.emplace(context, shape.batch() * shape.heads() * shape.queryLen() * 4);
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    const interp::HostTensor &host = problem.inputs.tensors[decl.getName().getValue()];
    Type type = decl.getElementType();
    size_t bytesPer = type.isSignlessInteger(32) || type.isF32() ? 4 : 2;
    std::vector<uint8_t> bytes(host.data.size() * bytesPer);
    for (size_t i = 0; i < host.data.size(); ++i) {
      if (type.isSignlessInteger(32)) {
        int32_t value = static_cast<int32_t>(host.data[i]);
        std::memcpy(&bytes[i * 4], &value, 4);
      } else if (type.isF32()) {
        float value = static_cast<float>(host.data[i]);
        std::memcpy(&bytes[i * 4], &value, 4);
      } else {
        uint16_t value = toHalfBits(static_cast<float>(host.data[i]), type);
        std::memcpy(&bytes[i * 2], &value, 2);
      }
    }
    flashrt::DeviceBuffer buffer(context, std::max<size_t>(bytes.size(), 4));
    buffer.copyFromHost(bytes.data(), bytes.size());
    problem.aux.push_back(std::move(buffer));
  }
  return problem;
}

void launch(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
            const DeviceProblem &p) {
  const interp::ProblemShape &s = p.inputs.shape;
  std::vector<uint64_t> aux;
  for (const flashrt::DeviceBuffer &buffer : p.aux)
    aux.push_back(buffer.devicePtr());
  kernel.launch(stream, tensorRef(p.q->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                tensorRef(p.k->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim()),
                tensorRef(p.v->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim()),
                tensorRef(p.o->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                p.lse->devicePtr(), p.sizes(), p.params, aux);
}

struct Validation {
  interp::ErrorStats out, lse;
  double outBound, lseBound;
  bool passed() const { return out.passes(outBound) && lse.passes(lseBound); }
};

/// Runs the kernel on `problem` (outputs poisoned first) and compares with
/// the interpreter on the same flash IR.
Validation validate(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                    DeviceProblem &problem, flash::KernelOp flashKernel) {
  problem.o->fill(0xFF); // NaN in bf16 and f16
  problem.lse->fill(0xFF);
  launch(kernel, stream, problem);
  stream.synchronize();
  const interp::ProblemShape &s = problem.inputs.shape;
  std::vector<uint16_t> oBits(problem.inputs.q.size());
  problem.o->copyToHost(oBits.data(), oBits.size() * 2);
  std::vector<float> lse(s.batch() * s.heads() * s.queryLen());
  problem.lse->copyToHost(lse.data(), lse.size() * 4);
  std::vector<float> out =
      unpackTensor(oBits, s.batch(), s.heads(), s.queryLen(), s.headDim(),
                   flashKernel.getElementType());

  interp::AttentionOutputs expected;
  std::string error;
  if (failed(interp::runKernel(flashKernel, problem.inputs, expected, error)))
    die(1, "interpreter: " + error);
  std::vector<double> expectedOut(expected.out.begin(), expected.out.end());
  std::vector<double> expectedLse(expected.lse.begin(), expected.lse.end());
  Validation v;
  v.out = interp::compare(out, expectedOut);
  v.lse = interp::compare(lse, expectedLse);
  // P is rounded to the element type for the P·V GEMM on the GPU and kept in
  // f32 by the interpreter; O is rounded to the element type by both.
  v.outBound = flashKernel.getElementType().isBF16() ? 1e-2 : 2e-3;
  v.lseBound = 1e-4;
  return v;
}

int64_t interpreterWork(const interp::ProblemShape &s) {
  return s.batch() * s.heads() * s.queryLen() * s.keyLen() * s.headDim();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
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

    std::string openError;
    std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(inputFile, &openError);
    if (!buffer)
      die(1, openError);
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    std::optional<frontend::Module> ast = frontend::parseFlashFile(sourceMgr);
    if (!ast)
      return 1;
    llvm::StringRef selected = variantName.empty() ? llvm::StringRef(ast->variants[0].name)
                                                   : llvm::StringRef(variantName);

    nvptx::TargetOptions target;
    target.chip = !archOption.empty() ? archOption.getValue()
                  : cc.major == 9     ? std::string("sm_90a")
                                      : "sm_" + std::to_string(cc.major * 10 + cc.minor);
    target.gemm = gemmKind;
    target.kvCopy = kvCopy;
    target.rowsPerWarp = rowsPerWarp;
    llvm::Expected<std::string> gemm = nvptx::selectGemm(target);
    if (!gemm)
      die(2, "--gemm: " + llvm::toString(gemm.takeError()));

    frontend::KernelOptions options;
    options.wgmmaTiles = *gemm == "wgmma";
    llvm::SmallVector<llvm::StringRef> tileItems;
    llvm::StringRef(tileSpec).split(tileItems, ',', -1, false);
    for (llvm::StringRef item : tileItems) {
      auto [key, text] = item.split('=');
      int64_t value;
      if (text.getAsInteger(10, value) || value < 1 || (key != "Br" && key != "Bc"))
        die(2, "--tile: '" + item + "' is not Br=N or Bc=N");
      (key == "Br" ? options.blockRows : options.blockCols) = value;
    }
    for (llvm::StringRef item : llvm::split(shapeSpec, ',')) {
      int64_t headDim;
      if (item.consume_front("D=")) {
        if (item.getAsInteger(10, headDim) || headDim < 1)
          die(2, "--shape: D must be a positive integer");
        options.headDim = headDim;
      }
    }

    DialectRegistry registry;
    registerAllDialects(registry);
    MLIRContext mlirContext(registry);
    OwningOpRef<ModuleOp> module =
        frontend::emitFlashIR(mlirContext, *ast, options, sourceMgr, selected);
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
    flashrt::Stream stream(context);

    interp::ProblemShape shape = parseShape(shapeSpec, flashKernel, nullptr);
    std::string why = interp::checkInputs(flashKernel, interp::makeRandomInputs(
                                                           flashKernel, shape, seed));
    if (!why.empty())
      die(1, why);

    // Validate at the run's sizes when the interpreter can afford it.
    interp::ProblemShape checkShape = shape;
    if (!checkShapeSpec.empty()) {
      checkShape = parseShape(checkShapeSpec, flashKernel, &shape);
    } else if (interpreterWork(shape) > (int64_t(1) << 31)) {
      checkShape[flash::DimRole::Batch] = 1;
      int64_t group = shape.heads() / shape.kvHeads();
      checkShape[flash::DimRole::Heads] = group * std::min<int64_t>(shape.kvHeads(), 2);
      checkShape[flash::DimRole::KVHeads] = std::min<int64_t>(shape.kvHeads(), 2);
      checkShape[flash::DimRole::QueryLen] = std::min<int64_t>(shape.queryLen(), 1031);
      checkShape[flash::DimRole::KeyLen] =
          flashKernel.getDimClasses()[4] == 3 ? checkShape.queryLen()
                                              : std::min<int64_t>(shape.keyLen(), 1031);
    }
    DeviceProblem checkProblem = upload(context, flashKernel, checkShape, params);
    Validation validation = validate(kernel, stream, checkProblem, flashKernel);

    double ms = 0, tflops = 0;
    if (iterations > 0) {
      DeviceProblem problem = upload(context, flashKernel, shape, params);
      std::vector<float> times = flashrt::timeLaunches(
          stream, warmup, iterations, [&] { launch(kernel, stream, problem); });
      ms = flashrt::median(times);
      double flops = 4.0 * shape.batch() * shape.heads() * shape.queryLen() * shape.keyLen() *
                     shape.headDim() * (causalFlops ? 0.5 : 1.0);
      tflops = flops / (ms * 1e-3) / 1e12;
    }

    std::string elementName;
    llvm::raw_string_ostream(elementName) << flashKernel.getElementType();
    if (csv) {
      llvm::outs() << selected << "," << elementName << "," << shape.batch() << ","
                   << shape.heads() << "," << shape.kvHeads() << "," << shape.queryLen() << ","
                   << shape.keyLen() << "," << shape.headDim() << "," << layout << ","
                   << llvm::format("%.4f", ms) << "," << llvm::format("%.1f", tflops) << ","
                   << llvm::format("%.2e", validation.out.relative) << ","
                   << llvm::format("%.2e", validation.lse.relative)
                   << (validation.passed() ? "" : ",FAIL") << "\n";
    } else {
      llvm::outs() << selected << "  " << device.name() << " (" << target.chip << ")  "
                   << elementName << "  " << layout << "  Br=" << package.blockRows
                   << " Bc=" << package.blockCols << " threads=" << package.threadsPerBlock
                   << " smem=" << package.dynamicSharedBytes << "\n";
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
      if (iterations > 0)
        llvm::outs() << "  time  " << shape.str() << ": " << llvm::format("%.4f", ms)
                     << " ms median of " << iterations << ", "
                     << llvm::format("%.1f", tflops) << " TFLOP/s"
                     << (causalFlops ? " (causal count)" : "") << "\n";
    }
    return validation.passed() ? 0 : 1;
  } catch (const flashrt::Error &error) {
    llvm::WithColor::error(llvm::errs(), "flash-run")
        << flashrt::errorKindName(error.kind()) << ": " << error.what() << "\n";
    return flashrt::exitCodeFor(error.kind());
  }
}
