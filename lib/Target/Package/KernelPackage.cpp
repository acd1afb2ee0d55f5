//===- KernelPackage.cpp - Compile flash kernels into packages ------------===//

#include "flashc/Target/Package/KernelPackage.h"

#include "flashc/Conversion/FlashToNVVM/KernelModule.h"

#include "flashrt/Error.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Chrono.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace flashc {

namespace {

std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

/// Kernel ops (flash.kernel, flash.backward_kernel) of `module`, in order.
SmallVector<Operation *> kernelOps(ModuleOp module) {
  SmallVector<Operation *> ops;
  for (Operation &op : module.getBody()->getOperations())
    if (isa<flash::KernelOp, flash::BackwardKernelOp>(op))
      ops.push_back(&op);
  return ops;
}

flashrt::KernelPackage describeKernel(Operation *op) {
  auto kernel = cast<flash::KernelSignature>(op);
  flashrt::KernelPackage package;
  package.flashcVersion = FLASHC_VERSION;
  package.kernelName = packageKernelName(op);
  package.backward = isa<flash::BackwardKernelOp>(op);
  package.variantHash = variantHash(op);
  package.elementType = typeName(kernel.getElementType());
  package.headDim = kernel.getConfig().getHeadDim();
  package.staticSizes.assign(kernel.getStaticSizes().begin(), kernel.getStaticSizes().end());
  package.dimClasses.assign(kernel.getDimClasses().begin(), kernel.getDimClasses().end());
  for (Attribute attr : kernel.getParams()) {
    auto param = cast<flash::ParamAttr>(attr);
    double value = isa<IntegerAttr>(param.getDefaultValue())
                       ? static_cast<double>(cast<IntegerAttr>(param.getDefaultValue()).getInt())
                       : cast<FloatAttr>(param.getDefaultValue()).getValueAsDouble();
    package.params.push_back({param.getName().str(), typeName(param.getType()), value});
  }
  if (flash::BlockSummaryAttr summary = kernel.getBlockSummaryAttr()) {
    package.blockSummary = true;
    package.summaryPerBatch = summary.getPerBatch();
    package.summaryPerHead = summary.getPerHead();
  }
  if (auto forward = dyn_cast<flash::KernelOp>(op)) {
    package.splitKeys = forward.getSplitKeys();
    package.packedHeads = forward.getPackedHeads();
    if (flash::PagedKVAttr paged = forward.getPagedKvAttr()) {
      package.pageSize = paged.getPage();
      package.pageTable = paged.getTable().str();
      package.pageLengths = paged.getLengths().str();
    }
    if (flash::VarlenAttr varlen = forward.getVarlenAttr()) {
      package.varlenQueries = varlen.getQueries().str();
      package.varlenKeys = varlen.getKeys().str();
    }
  }
  for (Attribute attr : kernel.getTensors()) {
    auto tensor = cast<flash::AuxTensorAttr>(attr);
    flashrt::PackageTensor entry{tensor.getName().str(), typeName(tensor.getElementType()), {}};
    for (int64_t extent : tensor.getExtents())
      entry.extents.push_back(flash::AuxTensorAttr::isRole(extent)
                                  ? flash::stringifyDimRole(
                                        flash::AuxTensorAttr::decodeRole(extent))
                                        .str()
                                  : std::to_string(extent));
    package.tensors.push_back(std::move(entry));
  }
  return package;
}

} // namespace

std::string packageKernelName(Operation *kernel) {
  StringRef name = cast<SymbolOpInterface>(kernel).getName();
  return isa<flash::BackwardKernelOp>(kernel) ? backwardKernelName(name) : name.str();
}

std::string variantHash(Operation *kernel) {
  std::string text;
  llvm::raw_string_ostream os(text);
  kernel->print(os, OpPrintingFlags().elideLargeElementsAttrs(16));
  return llvm::utohexstr(llvm::xxh3_64bits(text), /*LowerCase=*/true);
}

FailureOr<std::vector<flashrt::KernelPackage>>
buildKernelPackages(ModuleOp flashModule, const nvptx::TargetOptions &options) {
  std::vector<flashrt::KernelPackage> packages;
  for (Operation *kernel : kernelOps(flashModule)) {
    // One PTX module per kernel op: a package is self-contained.
    OwningOpRef<ModuleOp> single = ModuleOp::create(flashModule.getLoc());
    single->getBody()->push_back(kernel->clone());
    FailureOr<nvptx::CompiledPTX> compiled = nvptx::compileToPTX(*single, options);
    if (failed(compiled))
      return failure();
    flashrt::KernelPackage package = describeKernel(kernel);
    package.arch = compiled->chip;
    package.ptx = compiled->ptx;
    package.deterministic = package.backward && options.deterministic;
    for (const nvptx::KernelLaunchInfo &info : compiled->kernels) {
      if (info.name != package.kernelName) {
        // The backward's preprocess and convert kernels, the block summary.
        StringRef name = cast<SymbolOpInterface>(kernel).getName();
        for (StringRef role : {"preprocess", "convert"})
          if (package.backward && info.name == backwardKernelName(name, role))
            package.entries.push_back(
                {role.str(), info.name, info.threadsPerBlock, info.dynamicSharedBytes});
        std::string summaryName = package.backward ? backwardKernelName(name, "summary")
                                                   : blockSummaryKernelName(name);
        if (package.blockSummary && info.name == summaryName)
          package.entries.push_back(
              {"summary", info.name, info.threadsPerBlock, info.dynamicSharedBytes});
        if (package.splitKeys && info.name == splitCombineKernelName(name))
          package.entries.push_back(
              {"combine", info.name, info.threadsPerBlock, info.dynamicSharedBytes});
        continue;
      }
      package.blockRows = info.blockRows;
      package.blockCols = info.blockCols;
      package.threadsPerBlock = info.threadsPerBlock;
      package.dynamicSharedBytes = info.dynamicSharedBytes;
      package.kvTensorMaps = info.kvTensorMaps;
      package.persistent = info.persistent;
      package.columnSlices = info.columnSlices;
    }
    if (package.threadsPerBlock == 0 ||
        (package.backward && package.entries.size() != 2 + size_t(package.blockSummary)) ||
        (!package.backward && package.entries.size() != size_t(package.blockSummary) +
                                                            size_t(package.splitKeys)))
      return kernel->emitError("the GPU lowering reported no launch rule for this kernel");
    packages.push_back(std::move(package));
  }
  return packages;
}

llvm::Error writeFileAtomically(llvm::StringRef path, llvm::StringRef contents) {
  llvm::SmallString<256> temporary;
  int fd;
  if (std::error_code error =
          llvm::sys::fs::createUniqueFile(path + ".%%%%%%%%.tmp", fd, temporary))
    return llvm::createStringError(error, "cannot write next to " + path + ": " +
                                              error.message());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << contents;
    os.close();
    if (os.has_error()) {
      // Cleared, or the stream's destructor would abort the process.
      std::error_code error = os.error();
      os.clear_error();
      llvm::sys::fs::remove(temporary);
      return llvm::createStringError(error, "cannot write " + temporary + ": " +
                                                error.message());
    }
  }
  // Renaming within a directory is atomic.
  if (std::error_code error = llvm::sys::fs::rename(temporary, path)) {
    llvm::sys::fs::remove(temporary);
    return llvm::createStringError(error, "cannot replace " + path + ": " + error.message());
  }
  return llvm::Error::success();
}

std::string CompileCache::defaultDirectory() {
  if (std::optional<std::string> dir = llvm::sys::Process::GetEnv("FLASHC_CACHE_DIR"))
    if (!dir->empty())
      return *dir;
  llvm::SmallString<256> path;
  if (std::optional<std::string> xdg = llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
      xdg && !xdg->empty())
    path = *xdg;
  else if (std::optional<std::string> home = llvm::sys::Process::GetEnv("HOME"))
    llvm::sys::path::append(path, *home, ".cache");
  else
    llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/false, path);
  llvm::sys::path::append(path, "flashc");
  return std::string(path);
}

/// Which build of the compiler runs: the version does not change when the
/// code generator does, so the running executable's size and modification
/// time are part of every compile-cache key (a rebuild invalidates the cache).
static const std::string &buildIdentity() {
  static const std::string identity = [] {
    static int anchor;
    std::string path = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
    llvm::sys::fs::file_status status;
    if (path.empty() || llvm::sys::fs::status(path, status))
      return std::string("unknown-build");
    return path + ":" + std::to_string(status.getSize()) + ":" +
           std::to_string(llvm::sys::toTimeT(status.getLastModificationTime()));
  }();
  return identity;
}

std::string CompileCache::key(Operation *kernel, const nvptx::TargetOptions &options) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << variantHash(kernel) << '|' << options.chip << '|' << options.features << '|'
     << options.optLevel << '|' << options.gemm << '|' << options.kvCopy << '|' << options.overlapSoftmax << '|' << options.warpSpecialize << options.pingPong << options.persistent << options.persistentWithTensors << '|' << options.pagedLastBlock << '|'
     << options.numWarps << '|' << options.rowsPerWarp << '|' << options.qInRegisters << '|'
     << options.deterministic << options.stageAuxGrads << options.deferTurns
     << options.queryGradWriter << options.rotateQueryTiles << options.overlapAccumulates
     << '|' << options.mergeBarriers
     << '|'
     << FLASHC_VERSION << '|' << buildIdentity();
  return packageKernelName(kernel) + "-" +
         llvm::utohexstr(llvm::xxh3_64bits(text), /*LowerCase=*/true);
}

std::string CompileCache::pathFor(llvm::StringRef key) const {
  llvm::SmallString<256> path(root);
  llvm::sys::path::append(path, key + ".flashpkg");
  return std::string(path);
}

std::optional<flashrt::KernelPackage> CompileCache::lookup(Operation *kernel,
                                                           llvm::StringRef key,
                                                           std::string &warnings) const {
  std::string path = pathFor(key);
  if (!llvm::sys::fs::exists(path))
    return std::nullopt;
  try {
    flashrt::KernelPackage package = flashrt::KernelPackage::load(path);
    if (package.kernelName != packageKernelName(kernel) ||
        package.variantHash != variantHash(kernel) ||
        package.flashcVersion != FLASHC_VERSION) {
      warnings += "ignoring stale compile cache entry " + path + " (built for kernel '" +
                  package.kernelName + "', flashc " + package.flashcVersion + ")\n";
      return std::nullopt;
    }
    return package;
  } catch (const flashrt::Error &error) {
    warnings += "ignoring corrupt compile cache entry: " + std::string(error.what()) + "\n";
    return std::nullopt;
  }
}

llvm::Error CompileCache::store(llvm::StringRef key,
                                const flashrt::KernelPackage &package) const {
  if (std::error_code error = llvm::sys::fs::create_directories(root))
    return llvm::createStringError(error, "cannot create " + root + ": " + error.message());
  return writeFileAtomically(pathFor(key), package.serialize());
}

FailureOr<std::vector<flashrt::KernelPackage>>
buildKernelPackages(ModuleOp flashModule, const nvptx::TargetOptions &options,
                    const CompileCache &cache, int &hits, std::string &warnings) {
  std::vector<flashrt::KernelPackage> packages;
  for (Operation *kernel : kernelOps(flashModule)) {
    std::string key = CompileCache::key(kernel, options);
    if (std::optional<flashrt::KernelPackage> cached = cache.lookup(kernel, key, warnings)) {
      ++hits;
      packages.push_back(std::move(*cached));
      continue;
    }
    OwningOpRef<ModuleOp> single = ModuleOp::create(flashModule.getLoc());
    single->getBody()->push_back(kernel->clone());
    FailureOr<std::vector<flashrt::KernelPackage>> built = buildKernelPackages(*single, options);
    if (failed(built))
      return failure();
    if (llvm::Error error = cache.store(key, built->front()))
      warnings += "compile cache: " + llvm::toString(std::move(error)) + "\n";
    packages.push_back(std::move(built->front()));
  }
  return packages;
}

} // namespace flashc
