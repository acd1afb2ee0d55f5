//===- KernelPackage.cpp - Compile flash kernels into packages ------------===//

#include "flashc/Target/Package/KernelPackage.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringExtras.h"
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

flashrt::KernelPackage describeKernel(flash::KernelOp kernel) {
  flashrt::KernelPackage package;
  package.flashcVersion = FLASHC_VERSION;
  package.kernelName = kernel.getSymName().str();
  package.variantHash = variantHash(kernel);
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

std::string variantHash(flash::KernelOp kernel) {
  std::string text;
  llvm::raw_string_ostream os(text);
  kernel->print(os, OpPrintingFlags().elideLargeElementsAttrs(16));
  return llvm::utohexstr(llvm::xxh3_64bits(text), /*LowerCase=*/true);
}

FailureOr<std::vector<flashrt::KernelPackage>>
buildKernelPackages(ModuleOp flashModule, const nvptx::TargetOptions &options) {
  std::vector<flashrt::KernelPackage> packages;
  for (auto kernel : flashModule.getOps<flash::KernelOp>()) {
    // One PTX module per kernel: a package is self-contained.
    OwningOpRef<ModuleOp> single = ModuleOp::create(flashModule.getLoc());
    single->getBody()->push_back(kernel->clone());
    FailureOr<nvptx::CompiledPTX> compiled = nvptx::compileToPTX(*single, options);
    if (failed(compiled))
      return failure();
    flashrt::KernelPackage package = describeKernel(kernel);
    package.arch = compiled->chip;
    package.ptx = compiled->ptx;
    for (const nvptx::KernelLaunchInfo &info : compiled->kernels) {
      if (info.name != package.kernelName)
        continue;
      package.blockRows = info.blockRows;
      package.blockCols = info.blockCols;
      package.threadsPerBlock = info.threadsPerBlock;
      package.dynamicSharedBytes = info.dynamicSharedBytes;
      package.kvTensorMaps = info.kvTensorMaps;
    }
    if (package.threadsPerBlock == 0)
      return kernel.emitError("the GPU lowering reported no launch rule for this kernel");
    packages.push_back(std::move(package));
  }
  return packages;
}

} // namespace flashc
