//===- FlashToSM90Pass.cpp - flash-to-sm90 ---------------------------------===//
//
// Checks each kernel against what the wgmma backend supports, sizes the CTA
// (one warpgroup per 64 query rows) and emits it through SM90Emitter.
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToSM90/Passes.h"

#include "SM90Emitter.h"

#include "flashc/Config/KernelRules.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace flashc {
#define GEN_PASS_DEF_CONVERTFLASHTOSM90
#include "flashc/Conversion/FlashToSM90/Passes.h.inc"
} // namespace flashc

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;
using namespace flashc::sm90;

std::optional<int64_t> SM90Emitter::registerCap() {
  if (hopper.warpSpecialized || config.numThreads != 128 || config.headDim > 64)
    return std::nullopt;
  bool scored = false, masksAtKey = false;
  kernel.walk([&](Operation *op) {
    if (isa<flash::ScoreModOp>(op))
      scored = true;
    if (auto mask = dyn_cast<flash::MaskOp>(op))
      masksAtKey |= regionLoadsAt(mask, mask.getBody().front().getArgument(3));
  });
  if (scored || !masksAtKey)
    return std::nullopt;
  return 128;
}

namespace {

/// Whether `loops` (all of the kernel's) are one loop in the kernel's entry
/// block that can defer its P·V (what warp specialization needs).
static bool specializable(flash::KernelOp kernel, ArrayRef<scf::ForOp> loops) {
  return loops.size() == 1 && loops.front()->getBlock() == &kernel.getBody().front() &&
         sm90::deferrableAccumulate(loops.front());
}

FailureOr<HopperConfig> chooseConfig(flash::KernelOp kernel,
                                     const ConvertFlashToSM90Options &options) {
  StringRef kvCopy = options.kvCopy, warpSpecialize = options.warpSpecialize;
  auto fail = [&](const Twine &message) -> FailureOr<HopperConfig> {
    kernel.emitOpError() << "flash-to-sm90: " << message;
    return failure();
  };
  FailureOr<KernelConfig> base = baseConfig(kernel, "flash-to-sm90", flash::GemmKind::Wgmma);
  if (failed(base))
    return failure();
  HopperConfig config;
  static_cast<KernelConfig &>(config) = *base;
  if (config.br % 64 || config.br < 64 || config.br > 256)
    return fail("Br = " + Twine(config.br) +
                " must be 64, 128, 192 or 256 (one warpgroup per 64 query rows)");
  if (config.bc % 16 || config.bc < 16 || config.bc > 256)
    return fail("Bc = " + Twine(config.bc) +
                " must be a multiple of 16 of at most 256 (the N of wgmma m64nNk16)");
  config.rowsPerWarp = 16;
  config.numWarps = config.br / 16;
  config.numThreads = config.numWarps * 32;
  config.qInRegisters = false; // wgmma reads Q from shared memory
  if (kvCopy != "tma" && kvCopy != "cp.async")
    return fail("kv-copy must be tma or cp.async, got '" + kvCopy + "'");
  if (options.pagedLastBlock != "gather" && options.pagedLastBlock != "tma")
    return fail("paged-last-block must be gather or tma, got '" + options.pagedLastBlock + "'");
  // A paged cache takes TMA where its pages and the blocks nest (one box
  // per page of the block); the block a sequence ends in is gathered by
  // cp.async instead, whose zero fill keeps the stale (maybe NaN) rows past
  // the end of its last page out of P·V (TensorMemoryAccess.cpp). (Packed
  // varlen keys take TMA: past a sequence's end a box brings the next
  // sequence's rows, finite by the launch contract, and zeros past the
  // packed rows.)
  flash::PagedKVAttr paged = kernel.getPagedKvAttr();
  config.kvTensorMaps = config::kvCopiesByTma(kvCopy, paged ? paged.getPage() : 0, config.bc);
  config.pagedLastBlockByTma = paged && options.pagedLastBlock == "tma";
  SmallVector<scf::ForOp> loops;
  kernel.walk([&](scf::ForOp loop) { loops.push_back(loop); });
  // The TMA barriers count phases from the kernel's start, the loop from its
  // first block: a second K/V loop would start at the wrong parity.
  if (config.kvTensorMaps) {
    int64_t kvLoops = llvm::count_if(loops, [](scf::ForOp loop) {
      return !loop.getBody()->getOps<flash::LoadKVOp>().empty();
    });
    if (kvLoops > 1)
      return fail("kv-copy=tma supports one loop over K/V blocks per kernel, found " +
                  Twine(kvLoops) + " (use kv-copy=cp.async)");
  }
  if (warpSpecialize != "auto" && warpSpecialize != "on" && warpSpecialize != "off")
    return fail("warp-specialize must be auto, on or off, got '" + warpSpecialize + "'");
  // The second V buffer only where a key loop can use it, and only if the
  // tiles still fit.
  if (options.overlapSoftmax && config.kvTensorMaps) {
    config.deferPV = llvm::any_of(loops, [](scf::ForOp loop) {
      return bool(sm90::deferrableAccumulate(loop));
    });
    if (config.sharedBytes() > kMaxSharedBytes)
      config.deferPV = false;
  }
  // A producer warpgroup and up to three consumer warpgroups (the register
  // file then gives each consumer thread at least 160 registers); otherwise,
  // or when the rings do not fit, the kernel is built without it. auto:
  // config::warpSpecializesByDefault (two or more consumers, which then
  // ping-pong), over a paged cache where config::warpSpecializationApplies.
  bool specialize =
      warpSpecialize == "on" ||
      (warpSpecialize == "auto" && config::warpSpecializesByDefault(config.br) &&
       config::warpSpecializationApplies(paged ? paged.getPage() : 0, kvCopy,
                                         config.headDim, config.bc));
  if (specialize) {
    HopperConfig specialized = config;
    specialized.warpSpecialized = true;
    specialized.deferPV = true;
    specialized.numWarps += 4;
    specialized.numThreads += 128;
    specialized.pingPong = options.pingPong && config::pingPongApplies(config.br);
    // A split_keys kernel keeps its grid of (query tile, split) CTAs, a
    // packed_heads kernel its rows mapped once per CTA.
    specialized.persistent =
        !kernel.getSplitKeys() && !kernel.getPackedHeads() &&
        config::persistentGridApplies(bool(kernel.getVarlenAttr()), bool(paged),
                                      !kernel.getTensors().empty()) &&
        config::persistentGridAsked(options.persistent, options.persistentWithTensors,
                                    !kernel.getTensors().empty()) &&
        config::persistentGridFits(config.headDim, config.bc);
    StringRef why;
    if (!config.kvTensorMaps)
      why = "it needs kv-copy=tma";
    else if (config.br > 192)
      why = "Br is above 192 (at most three consumer warpgroups)";
    else if (!specializable(kernel, loops))
      why = "the key loop is not one top-level loop of the plain recurrence with classified "
            "masks";
    else if (specialized.sharedBytes() > kMaxSharedBytes)
      why = "its K/V rings do not fit in shared memory";
    if (why.empty())
      config = specialized;
    else if (warpSpecialize == "on")
      kernel.emitWarning() << "flash-to-sm90: not warp-specialized: " << why;
  }
  if (config.sharedBytes() > kMaxSharedBytes)
    return fail("the tiles need " + Twine(config.sharedBytes()) +
                " bytes of shared memory, more than a block can have");
  return config;
}

struct ConvertFlashToSM90Pass
    : flashc::impl::ConvertFlashToSM90Base<ConvertFlashToSM90Pass> {
  using Base::Base;

  void runOnOperation() override {
    auto makeEmitter = [&](flash::KernelOp kernel,
                           gpu::GPUModuleOp gpuModule) -> std::unique_ptr<KernelEmitter> {
      ConvertFlashToSM90Options options;
      options.kvCopy = kvCopy;
      options.overlapSoftmax = overlapSoftmax;
      options.warpSpecialize = warpSpecialize;
      options.pagedLastBlock = pagedLastBlock;
      options.pingPong = pingPong;
      options.persistent = persistent;
      options.persistentWithTensors = persistentWithTensors;
      FailureOr<HopperConfig> config = chooseConfig(kernel, options);
      if (failed(config))
        return nullptr;
      return std::make_unique<sm90::SM90Emitter>(kernel, *config, gpuModule);
    };
    if (failed(sm90::lowerBackwardKernels(getOperation(), deterministic, stageAuxGrads,
                                               deferTurns, queryGradWriter,
                                               rotateQueryTiles, overlapAccumulates,
                                               mergeBarriers)) ||
        failed(lowerFlashKernels(getOperation(), flash::GemmKind::Wgmma, makeEmitter)))
      signalPassFailure();
  }
};

} // namespace
