//===- TargetFlags.cpp - The GPU target's command-line flags --------------===//

#include "flashc/Target/NVPTX/TargetFlags.h"

#include "llvm/Config/llvm-config.h"

using namespace flashc::nvptx;
namespace cl = llvm::cl;

TargetFlags::TargetFlags(cl::OptionCategory &category)
    : gemm("gemm",
           cl::desc("Tensor-core instructions: auto (wgmma on sm_90a, mma.sync elsewhere), "
                    "mma.sync or wgmma"),
           cl::init("auto"), cl::cat(category)),
      kvCopy("kv-copy",
             cl::desc("How the wgmma kernel moves K and V blocks to shared memory: tma "
                      "(default) or cp.async"),
             cl::init("tma"), cl::cat(category)),
      overlapSoftmax("overlap-softmax",
                     cl::desc("wgmma kernel with TMA: issue P·V of key block j after Q·Kᵀ of "
                              "block j+1, so it runs under that block's softmax (default off)"),
                     cl::init(false), cl::cat(category)),
      warpSpecialize("warp-specialize",
                     cl::desc("wgmma kernel with TMA: a producer warpgroup issues the K/V "
                              "copies, Br/64 consumer warpgroups overlap softmax and P·V: "
                              "auto (default: for Br >= 128), on or off"),
                     cl::init("auto"), cl::cat(category)),
      pingPong("ping-pong",
               cl::desc("With --warp-specialize and Br >= 128: the consumer warpgroups take "
                        "turns issuing their GEMMs (default on)"),
               cl::init(true), cl::cat(category)),
      persistent("persistent",
                 cl::desc("Warp-specialized kernels: a persistent grid, one CTA per SM slot "
                          "looping over query tiles (default: when --shape gives N <= 8192)"),
                 cl::init(true), cl::cat(category)),
      rowsPerWarp("rows-per-warp",
                  cl::desc("Query rows per warp in the sm80 kernel: 16, 32, or 0 = auto"),
                  cl::init(0), cl::cat(category)) {}

bool TargetFlags::given() const {
  return gemm.getNumOccurrences() || kvCopy.getNumOccurrences() ||
         overlapSoftmax.getNumOccurrences() || warpSpecialize.getNumOccurrences() ||
         pingPong.getNumOccurrences() || persistent.getNumOccurrences() ||
         rowsPerWarp.getNumOccurrences();
}

bool TargetFlags::persistentGrid(std::optional<int64_t> queryLength) const {
  return persistent.getNumOccurrences() ? persistent : persistentGridPays(queryLength);
}

void TargetFlags::applyTo(TargetOptions &options, std::optional<int64_t> queryLength) const {
  options.gemm = gemm;
  options.kvCopy = kvCopy;
  options.overlapSoftmax = overlapSoftmax;
  options.warpSpecialize = warpSpecialize;
  options.pingPong = pingPong;
  options.persistent = persistentGrid(queryLength);
  options.rowsPerWarp = rowsPerWarp;
}

void flashc::nvptx::setVersionPrinter(llvm::StringRef tool) {
  cl::SetVersionPrinter([name = tool.str()](llvm::raw_ostream &os) {
    os << name << ": flashc " FLASHC_VERSION " (LLVM " LLVM_VERSION_STRING ")\n";
  });
}
