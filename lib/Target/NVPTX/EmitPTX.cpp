//===- EmitPTX.cpp - flash IR to PTX text, in process ----------------------===//

#include "flashc/Target/NVPTX/EmitPTX.h"

#include "flashc/Config/KernelRules.h"
#include "flashc/Conversion/FlashToSM80/Passes.h"
#include "flashc/Conversion/FlashToSM90/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace flashc;
using namespace flashc::nvptx;

void nvptx::registerNVPTXDialects(DialectRegistry &registry) {
  registry.insert<gpu::GPUDialect, NVVM::NVVMDialect, LLVM::LLVMDialect,
                  cf::ControlFlowDialect>();
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
}

void nvptx::registerNVPTXPasses() {
  registerConvertFlashToSM80();
  registerConvertFlashToSM90();
  registerSCFToControlFlowPass();
  registerArithToLLVMConversionPass();
  registerConvertControlFlowToLLVMPass();
  registerReconcileUnrealizedCastsPass();
  registerGpuNVVMAttachTarget();
  registerGpuModuleToBinaryPass();
}

static void prepareContext(ModuleOp module) {
  DialectRegistry registry;
  registerNVPTXDialects(registry);
  module.getContext()->appendDialectRegistry(registry);
}

static bool hasFlashKernels(ModuleOp module) {
  return !module.getOps<flash::KernelOp>().empty() ||
         !module.getOps<flash::BackwardKernelOp>().empty();
}

static gpu::GPUModuleOp findKernelModule(ModuleOp module) {
  return module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
}

std::string nvptx::chipFor(int major, int minor) {
  return major == 9 ? std::string("sm_90a") : "sm_" + std::to_string(major * 10 + minor);
}

LogicalResult nvptx::lowerToGPU(ModuleOp module, const TargetOptions &options) {
  prepareContext(module);
  if (!hasFlashKernels(module)) {
    if (findKernelModule(module))
      return success(); // already lowered
    return module.emitError("flashc: the module holds no flash.kernel or flash.backward_kernel to lower");
  }
  llvm::Expected<std::string> gemm = config::selectGemm(options.chip, options.gemm);
  if (!gemm)
    return module.emitError("flashc: ") << llvm::toString(gemm.takeError());
  PassManager pm(module.getContext());
  if (*gemm == "wgmma") {
    ConvertFlashToSM90Options sm90;
    sm90.kvCopy = options.kvCopy;
    sm90.overlapSoftmax = options.overlapSoftmax;
    sm90.warpSpecialize = options.warpSpecialize;
    sm90.pingPong = options.pingPong;
    sm90.pagedLastBlock = options.pagedLastBlock;
    sm90.persistent = options.persistent;
    sm90.persistentWithTensors = options.persistentWithTensors;
    sm90.deterministic = options.deterministic;
    sm90.stageAuxGrads = options.stageAuxGrads;
    sm90.deferTurns = options.deferTurns;
    sm90.queryGradWriter = options.queryGradWriter;
    sm90.rotateQueryTiles = options.rotateQueryTiles;
    sm90.overlapAccumulates = options.overlapAccumulates;
    sm90.mergeBarriers = options.mergeBarriers;
    pm.addPass(createConvertFlashToSM90(sm90));
  } else {
    ConvertFlashToSM80Options sm80;
    sm80.numWarps = options.numWarps;
    sm80.rowsPerWarp = options.rowsPerWarp;
    sm80.qInRegisters = options.qInRegisters;
    sm80.deterministic = options.deterministic;
    sm80.stageAuxGrads = options.stageAuxGrads;
    pm.addPass(createConvertFlashToSM80(sm80));
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // MLIR prints only errors when no handler is registered; the lowering's
  // warnings (a requested warp specialization that cannot apply) must reach
  // the user too. Errors go on to the caller's handlers.
  ScopedDiagnosticHandler warnings(module.getContext(), [](Diagnostic &diagnostic) {
    if (diagnostic.getSeverity() != DiagnosticSeverity::Warning)
      return failure();
    if (auto file = diagnostic.getLocation()->findInstanceOf<FileLineColLoc>())
      llvm::errs() << file.getFilename().getValue() << ':' << file.getLine() << ':'
                   << file.getColumn();
    else
      llvm::errs() << diagnostic.getLocation();
    llvm::errs() << ": warning: " << diagnostic << "\n";
    return success();
  });
  return pm.run(module);
}

LogicalResult nvptx::lowerToLLVM(ModuleOp module, const TargetOptions &options) {
  if (failed(lowerToGPU(module, options)))
    return failure();
  PassManager pm(module.getContext());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCSEPass());
  return pm.run(module);
}

FailureOr<std::vector<KernelLaunchInfo>> nvptx::readLaunchInfo(ModuleOp module) {
  gpu::GPUModuleOp gpuModule = findKernelModule(module);
  if (!gpuModule)
    return module.emitError("flashc: no gpu.module @") << kKernelModuleName;
  auto launches = gpuModule->getAttrOfType<DictionaryAttr>(kLaunchAttrName);
  if (!launches)
    return gpuModule.emitError("flashc: missing ") << kLaunchAttrName;
  std::vector<KernelLaunchInfo> result;
  for (NamedAttribute entry : launches) {
    auto launch = dyn_cast<flash::LaunchAttr>(entry.getValue());
    if (!launch)
      return gpuModule.emitError("flashc: ") << kLaunchAttrName << " entry '"
                                             << entry.getName().getValue()
                                             << "' is not a #flash.launch";
    KernelLaunchInfo info;
    info.name = entry.getName().str();
    info.threadsPerBlock = launch.getThreadsPerBlock();
    info.dynamicSharedBytes = launch.getDynamicSharedBytes();
    info.blockRows = launch.getBlockRows();
    info.blockCols = launch.getBlockCols();
    info.headDim = launch.getHeadDim();
    info.numWarps = launch.getNumWarps();
    info.rowsPerWarp = launch.getRowsPerWarp();
    llvm::raw_string_ostream(info.elementType) << launch.getElementType();
    for (Attribute name : launch.getParams())
      info.params.push_back(cast<StringAttr>(name).str());
    for (Attribute type : launch.getParamTypes()) {
      std::string text;
      llvm::raw_string_ostream(text) << cast<TypeAttr>(type).getValue();
      info.paramTypes.push_back(text);
    }
    for (Attribute name : launch.getTensors())
      info.tensors.push_back(cast<StringAttr>(name).str());
    info.kvTensorMaps = launch.getTensorMaps() > 0;
    info.persistent = launch.getGrid() == flash::GridKind::Persistent;
    info.columnSlices = launch.getColumnSlices();
    info.grid = flash::stringifyGridKind(launch.getGrid()).str();
    result.push_back(std::move(info));
  }
  return result;
}

FailureOr<CompiledPTX> nvptx::compileToPTX(ModuleOp module, const TargetOptions &options) {
  if (failed(lowerToLLVM(module, options)))
    return failure();
  FailureOr<std::vector<KernelLaunchInfo>> kernels = readLaunchInfo(module);
  if (failed(kernels))
    return failure();

  PassManager pm(module.getContext());
  GpuNVVMAttachTargetOptions target;
  target.moduleMatcher = kKernelModuleName.str();
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = static_cast<unsigned>(options.optLevel);
  pm.addPass(createGpuNVVMAttachTarget(target));
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(binary));
  if (failed(pm.run(module)))
    return failure();

  auto binaryOp = module.lookupSymbol<gpu::BinaryOp>(kKernelModuleName);
  if (!binaryOp || binaryOp.getObjects().size() != 1)
    return module.emitError("flashc: gpu-module-to-binary produced no PTX");
  auto object = cast<gpu::ObjectAttr>(binaryOp.getObjects()[0]);
  CompiledPTX result;
  result.ptx = object.getObject().str();
  result.chip = options.chip;
  result.kernels = std::move(*kernels);
  return result;
}
