//===- FlashToSM80Pass.cpp - flash-to-sm80 ---------------------------------===//
//
// Checks each kernel against what the mma.sync backend supports, picks the
// resources (warps, shared memory, Q in registers), emits the kernel into
// `gpu.module @flashc_kernels` and records its launch rule there.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToSM80/Passes.h"

#include "SM80Emitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace flashc {
#define GEN_PASS_DEF_CONVERTFLASHTOSM80
#include "flashc/Conversion/FlashToSM80/Passes.h.inc"
} // namespace flashc

using namespace mlir;
using namespace flashc;
using namespace flashc::sm80;

namespace {

FailureOr<KernelConfig> chooseConfig(flash::KernelOp kernel, int64_t numWarps,
                                     int64_t rowsPerWarp, StringRef qInRegisters) {
  auto fail = [&](const Twine &message) -> FailureOr<KernelConfig> {
    kernel.emitOpError() << "flash-to-sm80: " << message;
    return failure();
  };
  FailureOr<KernelConfig> base = baseConfig(kernel, "flash-to-sm80", "mma.sync");
  if (failed(base))
    return failure();
  KernelConfig config = *base;
  int64_t d = config.headDim;
  if (config.br % 16 || config.br < 16)
    return fail("Br = " + Twine(config.br) + " must be a multiple of 16 (one warp per 16 rows)");
  if (config.bc % 16 || config.bc < 16)
    return fail("Bc = " + Twine(config.bc) + " must be a multiple of 16");
  // Two m16 row blocks per warp halve the ldmatrix traffic of K and V per
  // mma (FlashAttention-2's 4 warps x 32 rows). A thread then holds D + Bc
  // f32 of A and S: auto takes 32 rows while that is at most 160 (ptxas
  // spills at D = 128, Bc = 64 with a mask and at D = 64, Bc = 128) and Br
  // keeps at least 4 warps.
  // Without a mask or score mod, D = 128 with Bc = 64 fits too (measured on
  // an H200: 357 TFLOP/s against 273 with 16 rows, no spills).
  bool plainScores = kernel.getBody().walk([](Operation *op) {
                       return isa<flash::MaskOp, flash::ScoreModOp>(op) ? WalkResult::interrupt()
                                                                         : WalkResult::advance();
                     }).wasInterrupted() == false;
  if (rowsPerWarp == 0)
    rowsPerWarp = config.br % 128 == 0 &&
                          (d + config.bc <= 160 || (plainScores && d + config.bc <= 192))
                      ? 32
                      : 16;
  if (rowsPerWarp != 16 && rowsPerWarp != 32)
    return fail("rows-per-warp = " + Twine(rowsPerWarp) + " must be 16 or 32");
  if (config.br % rowsPerWarp)
    return fail("Br = " + Twine(config.br) + " is not a multiple of rows-per-warp = " +
                Twine(rowsPerWarp));
  config.rowsPerWarp = rowsPerWarp;
  config.numWarps = config.br / rowsPerWarp;
  if (numWarps != 0 && numWarps != config.numWarps)
    return fail("num-warps = " + Twine(numWarps) + " does not match Br/" + Twine(rowsPerWarp) +
                " = " + Twine(config.numWarps) + " (each warp owns " + Twine(rowsPerWarp) +
                " query rows)");
  config.numThreads = config.numWarps * 32;
  if (config.numThreads > 1024)
    return fail("Br = " + Twine(config.br) + " needs more than 1024 threads");
  if (qInRegisters == "auto")
    config.qInRegisters = config.rowBlocks() * d <= 128;
  else if (qInRegisters == "always")
    config.qInRegisters = true;
  else if (qInRegisters == "never")
    config.qInRegisters = false;
  else
    return fail("q-in-registers must be auto, always or never");
  if (config.sharedBytes() > kMaxSharedBytes)
    return fail("the tiles need " + Twine(config.sharedBytes()) +
                " bytes of shared memory, more than a block can have");
  return config;
}

struct ConvertFlashToSM80Pass
    : flashc::impl::ConvertFlashToSM80Base<ConvertFlashToSM80Pass> {
  using Base::Base;

  void runOnOperation() override {
    auto makeEmitter = [&](flash::KernelOp kernel,
                           gpu::GPUModuleOp gpuModule) -> std::unique_ptr<SM80Emitter> {
      FailureOr<KernelConfig> config = chooseConfig(kernel, numWarps, rowsPerWarp, qInRegisters);
      if (failed(config))
        return nullptr;
      return std::make_unique<SM80Emitter>(kernel, *config, gpuModule);
    };
    if (failed(lowerFlashKernels(getOperation(), "mma.sync", makeEmitter)))
      signalPassFailure();
  }
};

} // namespace

FailureOr<KernelConfig> sm80::baseConfig(flash::KernelOp kernel, StringRef passName,
                                         StringRef gemm) {
  auto fail = [&](const Twine &message) -> FailureOr<KernelConfig> {
    kernel.emitOpError() << passName << ": " << message;
    return failure();
  };
  KernelConfig config;
  flash::TileConfigAttr tile = kernel.getConfig();
  config.br = tile.getBr();
  config.bc = tile.getBc();
  config.headDim = tile.getHeadDim();
  config.elementType = kernel.getElementType();
  if (config.elementType.isF32())
    return fail("f32 inputs are interpreter-only on the GPU path (use bf16 or f16)");
  if (!config.elementType.isBF16() && !config.elementType.isF16())
    return fail("element type must be bf16 or f16");
  int64_t d = config.headDim;
  if (d != 64 && d != 96 && d != 128 && d != 256)
    return fail("head dim " + Twine(d) + " is not supported by the " + gemm + " kernel " +
                "(supported: 64, 96, 128, 256)");
  return config;
}

DictionaryAttr sm80::launchInfo(Builder &b, flash::KernelOp kernel, const KernelConfig &config,
                                StringRef gemm) {
  SmallVector<Attribute> paramNames, paramTypes, tensorNames;
  for (Attribute attr : kernel.getParams()) {
    auto param = cast<flash::ParamAttr>(attr);
    paramNames.push_back(param.getName());
    paramTypes.push_back(TypeAttr::get(param.getType()));
  }
  for (Attribute attr : kernel.getTensors())
    tensorNames.push_back(cast<flash::AuxTensorAttr>(attr).getName());
  SmallVector<NamedAttribute> entries = {
      b.getNamedAttr("threads_per_block", b.getI64IntegerAttr(config.numThreads)),
      b.getNamedAttr("dynamic_shared_bytes", b.getI64IntegerAttr(config.sharedBytes())),
      b.getNamedAttr("block_rows", b.getI64IntegerAttr(config.br)),
      b.getNamedAttr("block_cols", b.getI64IntegerAttr(config.bc)),
      b.getNamedAttr("head_dim", b.getI64IntegerAttr(config.headDim)),
      b.getNamedAttr("num_warps", b.getI64IntegerAttr(config.numWarps)),
      b.getNamedAttr("rows_per_warp", b.getI64IntegerAttr(config.rowsPerWarp)),
      b.getNamedAttr("element_type", TypeAttr::get(config.elementType)),
      b.getNamedAttr("gemm", b.getStringAttr(gemm)),
      b.getNamedAttr("kv_tensor_maps", b.getBoolAttr(config.kvTensorMaps)),
      b.getNamedAttr("persistent", b.getBoolAttr(config.persistent)),
      b.getNamedAttr("grid", b.getStringAttr(config.persistent
                                                 ? "(min(ceil(N/block_rows) * H * B, resident CTAs), 1, 1)"
                                                 : "(ceil(N/block_rows), H, B)")),
      b.getNamedAttr("params", b.getArrayAttr(paramNames)),
      b.getNamedAttr("param_types", b.getArrayAttr(paramTypes)),
      b.getNamedAttr("tensors", b.getArrayAttr(tensorNames)),
  };
  return b.getDictionaryAttr(entries);
}

LogicalResult sm80::lowerFlashKernels(
    ModuleOp module, StringRef gemm,
    function_ref<std::unique_ptr<SM80Emitter>(flash::KernelOp, gpu::GPUModuleOp)> makeEmitter) {
  SmallVector<flash::KernelOp> kernels(module.getOps<flash::KernelOp>());
  if (kernels.empty())
    return success();
  OpBuilder b(module.getContext());
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());

  auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kSM80ModuleName);
  if (!gpuModule) {
    b.setInsertionPointToEnd(module.getBody());
    gpuModule = gpu::GPUModuleOp::create(b, module.getLoc(), kSM80ModuleName);
  }
  SmallVector<NamedAttribute> launches;
  if (auto existing = gpuModule->getAttrOfType<DictionaryAttr>(kLaunchAttrName))
    launches.assign(existing.begin(), existing.end());

  bool failedAny = false;
  for (flash::KernelOp kernel : kernels) {
    std::unique_ptr<SM80Emitter> emitter = makeEmitter(kernel, gpuModule);
    if (!emitter) {
      failedAny = true;
      continue;
    }
    if (failed(emitter->emit())) {
      if (emitter->getFunc())
        emitter->getFunc().erase();
      failedAny = true;
      continue;
    }
    launches.push_back(
        b.getNamedAttr(kernel.getSymName(), launchInfo(b, kernel, emitter->config, gemm)));
  }
  if (failedAny)
    return failure();
  gpuModule->setAttr(kLaunchAttrName, b.getDictionaryAttr(launches));
  for (flash::KernelOp kernel : kernels)
    kernel.erase();
  return success();
}
