//===- FlashToSM80Pass.cpp - flash-to-sm80 ---------------------------------===//
//
// Checks each kernel against what the mma.sync backend supports, picks the
// resources (warps, shared memory, Q in registers), emits the kernel into
// `gpu.module @flashc_kernels` and records its launch rule there.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToSM80/Passes.h"

#include "SM80Emitter.h"

#include "flashc/Config/KernelRules.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace flashc {
#define GEN_PASS_DEF_CONVERTFLASHTOSM80
#include "flashc/Conversion/FlashToSM80/Passes.h.inc"
} // namespace flashc

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

namespace {

FailureOr<KernelConfig> chooseConfig(flash::KernelOp kernel, int64_t numWarps,
                                     int64_t rowsPerWarp, StringRef qInRegisters) {
  auto fail = [&](const Twine &message) -> FailureOr<KernelConfig> {
    kernel.emitOpError() << "flash-to-sm80: " << message;
    return failure();
  };
  FailureOr<KernelConfig> base = baseConfig(kernel, "flash-to-sm80", flash::GemmKind::MmaSync);
  if (failed(base))
    return failure();
  KernelConfig config = *base;
  int64_t d = config.headDim;
  if (config.br % 16 || config.br < 16)
    return fail("Br = " + Twine(config.br) + " must be a multiple of 16 (one warp per 16 rows)");
  if (config.bc % 16 || config.bc < 16)
    return fail("Bc = " + Twine(config.bc) + " must be a multiple of 16");
  // rows-per-warp=auto: the rule in flashc/Config/KernelRules.h.
  bool plainScores = kernel.getBody().walk([](Operation *op) {
                       return isa<flash::MaskOp, flash::ScoreModOp>(op) ? WalkResult::interrupt()
                                                                         : WalkResult::advance();
                     }).wasInterrupted() == false;
  if (rowsPerWarp == 0)
    rowsPerWarp = config::defaultRowsPerWarp(config.br, config.bc, d, plainScores);
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
    config.qInRegisters = config::keepsQueryInRegisters(config.rowBlocks(), d);
  else if (qInRegisters == "always")
    config.qInRegisters = true;
  else if (qInRegisters == "never")
    config.qInRegisters = false;
  else
    return fail("q-in-registers must be auto, always or never");
  int64_t sharedBytes = sm80::PaddedLayout(config).sharedBytes();
  if (sharedBytes > kMaxSharedBytes)
    return fail("the tiles need " + Twine(sharedBytes) +
                " bytes of shared memory, more than a block can have");
  return config;
}

struct ConvertFlashToSM80Pass
    : flashc::impl::ConvertFlashToSM80Base<ConvertFlashToSM80Pass> {
  using Base::Base;

  void runOnOperation() override {
    auto makeEmitter = [&](flash::KernelOp kernel,
                           gpu::GPUModuleOp gpuModule) -> std::unique_ptr<KernelEmitter> {
      FailureOr<KernelConfig> config = chooseConfig(kernel, numWarps, rowsPerWarp, qInRegisters);
      if (failed(config))
        return nullptr;
      return std::make_unique<sm80::SM80Emitter>(kernel, *config, gpuModule);
    };
    if (failed(sm80::lowerBackwardKernels(getOperation(), "flash-to-sm80", deterministic,
                                           stageAuxGrads)) ||
        failed(lowerFlashKernels(getOperation(), flash::GemmKind::MmaSync, makeEmitter)))
      signalPassFailure();
  }
};

} // namespace
