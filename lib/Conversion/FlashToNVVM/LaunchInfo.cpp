//===- LaunchInfo.cpp - What every backend supports, launch facts, the driver ===//
//
// baseConfig checks a kernel against what every GPU backend supports;
// KernelEmitter::launchAttr writes the kernel's #flash.launch (verified:
// an inconsistent one is an internal error, not a package); and
// lowerFlashKernels is the body every flash-to-<target> pass shares.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"
#include "flashc/Conversion/FlashToNVVM/KernelModule.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

FailureOr<KernelConfig> lowering::checkedTileConfig(flash::KernelSignature kernel,
                                                    StringRef passName, const Twine &kernelKind) {
  auto fail = [&](const Twine &message) -> FailureOr<KernelConfig> {
    kernel->emitOpError() << passName << ": " << message;
    return failure();
  };
  flash::TileConfigAttr tile = kernel.getConfig();
  Type elementType = kernel.getElementType();
  KernelConfig config;
  config.br = tile.getBr();
  config.bc = tile.getBc();
  config.headDim = tile.getHeadDim();
  config.elementType = elementType;
  if (elementType.isF32())
    return fail("f32 inputs are interpreter-only on the GPU path (use bf16 or f16)");
  if (!elementType.isBF16() && !elementType.isF16())
    return fail("element type must be bf16 or f16");
  int64_t d = config.headDim;
  if (d != 64 && d != 96 && d != 128 && d != 256)
    return fail("head dim " + Twine(d) + " is not supported by the " + kernelKind +
                " (supported: 64, 96, 128, 256)");
  return config;
}

FailureOr<KernelConfig> lowering::baseConfig(flash::KernelOp kernel, StringRef passName,
                                             flash::GemmKind gemm) {
  return checkedTileConfig(kernel, passName, flash::stringifyGemmKind(gemm) + " kernel");
}

flash::LaunchAttr KernelEmitter::launchAttr(flash::GemmKind gemm) {
  SmallVector<Attribute> paramNames, paramTypes, tensorNames;
  signatureNames(paramNames, paramTypes, tensorNames);
  flash::GridKind grid = persistentGrid()         ? flash::GridKind::Persistent
                         : kernel.getSplitKeys() ? flash::GridKind::PerSplitTile
                                                 : flash::GridKind::PerTile;
  auto emitError = [&] {
    return kernel.emitOpError() << passName() << ": internal error: invalid launch facts: ";
  };
  return flash::LaunchAttr::getChecked(
      emitError, kernel.getContext(), gemm, grid, config.numThreads, dynamicSharedBytes(),
      config.br, config.bc, config.headDim, config.numWarps, config.rowsPerWarp,
      config.elementType, tensorMapArguments(), b.getArrayAttr(paramNames),
      b.getArrayAttr(paramTypes), b.getArrayAttr(tensorNames), /*column_slices=*/int64_t{1});
}

gpu::GPUModuleOp flashc::getOrCreateKernelModule(ModuleOp module) {
  OpBuilder b(module.getContext());
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
  if (!gpuModule) {
    b.setInsertionPointToEnd(module.getBody());
    gpuModule = gpu::GPUModuleOp::create(b, module.getLoc(), kKernelModuleName);
  }
  return gpuModule;
}

void flashc::recordLaunches(gpu::GPUModuleOp gpuModule, ArrayRef<NamedAttribute> added) {
  SmallVector<NamedAttribute> launches;
  if (auto existing = gpuModule->getAttrOfType<DictionaryAttr>(kLaunchAttrName))
    launches.assign(existing.begin(), existing.end());
  launches.append(added.begin(), added.end());
  gpuModule->setAttr(kLaunchAttrName, DictionaryAttr::get(gpuModule.getContext(), launches));
}

LogicalResult lowering::lowerFlashKernels(
    ModuleOp module, flash::GemmKind gemm,
    function_ref<std::unique_ptr<KernelEmitter>(flash::KernelOp, gpu::GPUModuleOp)>
        makeEmitter) {
  SmallVector<flash::KernelOp> kernels(module.getOps<flash::KernelOp>());
  if (kernels.empty())
    return success();
  OpBuilder b(module.getContext());
  gpu::GPUModuleOp gpuModule = getOrCreateKernelModule(module);
  SmallVector<NamedAttribute> launches;
  bool failedAny = false;
  for (flash::KernelOp kernel : kernels) {
    std::unique_ptr<KernelEmitter> emitter = makeEmitter(kernel, gpuModule);
    if (!emitter) {
      failedAny = true;
      continue;
    }
    flash::LaunchAttr launch;
    if (succeeded(emitter->emit()))
      launch = emitter->launchAttr(gemm);
    if (!launch) {
      if (emitter->getFunc())
        emitter->getFunc().erase();
      failedAny = true;
      continue;
    }
    launches.push_back(b.getNamedAttr(kernel.getSymName(), launch));
    if (kernel.getBlockSummaryAttr()) {
      flash::LaunchAttr summary = emitBlockSummaryKernel(kernel, emitter->config, gpuModule,
                                                         emitter->passName(), gemm);
      if (!summary) {
        failedAny = true;
        continue;
      }
      launches.push_back(
          b.getNamedAttr(blockSummaryKernelName(kernel.getSymName()), summary));
    }
    if (kernel.getSplitKeys()) {
      flash::LaunchAttr combine = emitSplitCombineKernel(kernel, emitter->config, gpuModule,
                                                         emitter->passName(), gemm);
      if (!combine) {
        failedAny = true;
        continue;
      }
      launches.push_back(b.getNamedAttr(splitCombineKernelName(kernel.getSymName()), combine));
    }
  }
  if (failedAny)
    return failure();
  recordLaunches(gpuModule, launches);
  for (flash::KernelOp kernel : kernels)
    kernel.erase();
  return success();
}
