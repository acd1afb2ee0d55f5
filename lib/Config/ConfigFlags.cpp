//===- ConfigFlags.cpp - The kernel configuration's command-line flags ----===//

#include "flashc/Config/ConfigFlags.h"
#include "flashc/Target/NVPTX/EmitPTX.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Config/llvm-config.h"

using namespace flashc;
using namespace flashc::config;
namespace cl = llvm::cl;

ConfigFlags::ConfigFlags(cl::OptionCategory &category)
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
                              "auto (default: for Br >= 128; over a paged cache where its "
                              "pages nest with the key blocks, at D <= 128), on or off"),
                     cl::init("auto"), cl::cat(category)),
      pingPong("ping-pong",
               cl::desc("With --warp-specialize and Br >= 128: the consumer warpgroups take "
                        "turns issuing their GEMMs (default on)"),
               cl::init(true), cl::cat(category)),
      pagedLastBlock("paged-last-block",
                     cl::desc("A one-warpgroup wgmma kernel over a paged cache whose pages nest "
                              "with the key blocks (TMA): how the block a sequence ends in "
                              "arrives, gather (default: every thread by cp.async) or tma "
                              "(TMA boxes, its rows past the sequence zeroed; 128 registers "
                              "instead of 150-170; not yet run on a GPU)"),
                     cl::init("gather"), cl::cat(category)),
      persistent("persistent",
                 cl::desc("Warp-specialized kernels: a persistent grid, one CTA per SM slot "
                          "looping over query tiles (default: when --shape gives N; above "
                          "N = 8192 not for variants with aux tensors)"),
                 cl::init(true), cl::cat(category)),
      rowsPerWarp("rows-per-warp",
                  cl::desc("Query rows per warp in the sm80 kernel: 16, 32, or 0 = auto"),
                  cl::init(0), cl::cat(category)),
      splitKeys("split-keys",
                cl::desc("Forward kernels whose key range the launch may split over several "
                         "CTAs, merged by LSE (flash-decoding; default: when --shape gives "
                         "N <= 16)"),
                cl::init(false), cl::cat(category)),
      packGqa("pack-gqa",
              cl::desc("Forward kernels of GQA variants put the query heads of one KV group "
                       "into the rows of a tile, so K and V are read once per group (packed "
                       "GQA; default: when --shape gives N <= 16)"),
              cl::init(false), cl::cat(category)),
      paged("paged",
            cl::desc("The page, in keys, of the paged K/V cache of variants with a 'paged' "
                     "item that give no 'page' (1 to 4096; one that gives a page must agree)"),
            cl::value_desc("PAGE"), cl::init(0), cl::cat(category)) {}

ConfigRequest ConfigFlags::request() const {
  ConfigRequest request;
  if (gemm.getNumOccurrences())
    request.gemm = gemm;
  if (kvCopy.getNumOccurrences())
    request.kvCopy = kvCopy;
  if (overlapSoftmax.getNumOccurrences())
    request.overlapSoftmax = overlapSoftmax;
  if (warpSpecialize.getNumOccurrences())
    request.warpSpecialize = warpSpecialize;
  if (pingPong.getNumOccurrences())
    request.pingPong = pingPong;
  if (pagedLastBlock.getNumOccurrences())
    request.pagedLastBlock = pagedLastBlock;
  if (persistent.getNumOccurrences())
    request.persistent = persistent;
  if (rowsPerWarp.getNumOccurrences())
    request.rowsPerWarp = rowsPerWarp;
  if (splitKeys.getNumOccurrences())
    request.splitKeys = splitKeys;
  if (packGqa.getNumOccurrences())
    request.packHeads = packGqa;
  if (paged.getNumOccurrences())
    request.pageSize = paged;
  return request;
}

BackwardFlags::BackwardFlags(cl::OptionCategory &category)
    : deterministic("deterministic",
                    cl::desc("With --bwd: dQ added in key-block order and aux gradients in "
                             "fixed point, bitwise the same from run to run (flash-run checks "
                             "3 runs; on wgmma at D >= 128 and D <= 64 full and prefix "
                             "masks without a score mod or tensors add dQ in that order by "
                             "default, where it measured faster: not unmasked at D <= 64 "
                             "and a known N <= 8192)"),
                    cl::cat(category)),
      stageAuxGrads("stage-aux-grads",
                    cl::desc("With --bwd: sum each tile's aux gradient adds in shared memory "
                             "first (experimental: checked on the H200, its speed not yet "
                             "measured)"),
                    cl::cat(category)),
      deferTurns("defer-turns",
                 cl::desc("With --bwd --deterministic on wgmma, without the dQ writer: "
                          "wait for a query tile's dQ turn, add the tile and pass the turn "
                          "on during the CTA's next tile instead of at the tile's end "
                          "(experimental: correct on the H100, slower than the writer)"),
                 cl::cat(category)),
      queryGradWriter("dq-writer",
                      cl::desc("With --bwd on wgmma (two or more warpgroups, dQ added by bulk "
                               "reduce): a warpgroup beside them whose warp adds the staged dQ "
                               "tiles, with --deterministic also waiting for and passing on "
                               "their turns (default: on with --deterministic, where it "
                               "applies, and where dQ is added in key-block order by default: "
                               "D >= 128 and D <= 64, full and prefix masks without a score mod or "
                               "tensors; in any order unmasked at D <= 64 and a known N <= "
                               "8192; giving --dq-writer either way turns both defaults off)"),
                      cl::cat(category)),
      rotateQueryTiles(
          "bwd-rotate-tiles",
          cl::desc("With --bwd on wgmma, without --deterministic: each key block's walk over "
                   "the query tiles starts at a tile of its own (key block x Bc/Br) and "
                   "wraps, so the CTAs of one head do not add into the same dQ tile at "
                   "once (experimental: measured 2-4% slower than the default)"),
          cl::cat(category)),
      overlapAccumulates(
          "bwd-overlap-accumulates",
          cl::desc("With --bwd on wgmma: the dV and dK products stay in flight until their "
                   "accumulators are read, dV under dS = P(dP - delta) (where dP is not "
                   "issued beside S: D > 64), dK under the dS store, the barrier and the "
                   "dQ product (default on: measured 1.02-1.06x faster at D = 128 on the "
                   "H100)"),
          cl::init(true), cl::cat(category)),
      mergeBarriers("bwd-merge-barriers",
                    cl::desc("With --bwd on wgmma: which per-tile barriers of the main kernel "
                             "merge. 0: none; 1: the dQ writer's staging-free barrier publishes "
                             "dS too; 2: also a pipelined tile's Q and dO copies are acquired at "
                             "the barrier that starts the tile; 3: also three stages of Q and "
                             "dO, the tile after next copied once dQ is staged, the next tile's "
                             "acquired at the dS barrier (no barrier at a tile's start). "
                             "Default: 3 at D <= 64 (measured 1-2.5% faster on the H100), 2 above"),
                    cl::init(-1), cl::cat(category)),
      blockSummary("bwd-block-summary",
                   cl::desc("With --bwd: a mask that reads aux tensors reads a run-time block "
                            "summary of the backward's tiling, so the query tiles it empties "
                            "are skipped and the full ones unmasked (default on; "
                            "--bwd-block-summary=false computes every tile the intervals "
                            "leave)"),
                   cl::init(true), cl::cat(category)),
      tile("bwd-tile",
           cl::desc("With --bwd: the backward kernels' tile, e.g. Br=32,Bc=64, apart from "
                    "the forward's --tile (default: by head dim, GEMM kind and variant)"),
           cl::value_desc("Br=..,Bc=.."), cl::cat(category)) {}

llvm::Error BackwardFlags::request(bool backward, ConfigRequest &request) const {
  if (blockSummary.getNumOccurrences() && !backward)
    return llvm::createStringError("--bwd-block-summary applies to the backward: add --bwd");
  request.backwardBlockSummary = blockSummary;
  request.deterministicBackward = deterministic;
  // The caller chose how dQ is added.
  request.queryGradAddsByDefault = !queryGradWriter.getNumOccurrences() && !deferTurns &&
                                       !rotateQueryTiles;
  if (tile.empty())
    return llvm::Error::success();
  if (!backward)
    return llvm::createStringError("--bwd-tile applies to the backward: add --bwd");
  return parseTile(tile, request, /*backward=*/true);
}

llvm::Error BackwardFlags::apply(bool backward, nvptx::TargetOptions &target) const {
  for (const cl::opt<bool> *flag :
       {&deterministic, &stageAuxGrads, &deferTurns, &queryGradWriter, &rotateQueryTiles,
        &overlapAccumulates})
    // (--bwd-overlap-accumulates is on by default: given at all.)
    if ((flag == &overlapAccumulates ? flag->getNumOccurrences() > 0 : bool(*flag)) && !backward)
      return llvm::createStringError("--" + flag->ArgStr + " applies to the backward: add --bwd");
  if (deferTurns && !deterministic)
    return llvm::createStringError("--defer-turns applies to the deterministic backward: add "
                                   "--deterministic");
  if (deferTurns && queryGradWriter)
    return llvm::createStringError("--defer-turns and --dq-writer exclude each other: the "
                                   "writer already takes the turns off the body's barriers");
  if (rotateQueryTiles && deterministic)
    return llvm::createStringError("--bwd-rotate-tiles does not apply to --deterministic: "
                                   "the dQ turns fix the order of the query tiles");
  target.rotateQueryTiles = rotateQueryTiles;
  target.overlapAccumulates = overlapAccumulates;
  if (mergeBarriers.getNumOccurrences()) {
    if (!backward)
      return llvm::createStringError("--bwd-merge-barriers applies to the backward: add --bwd");
    if (mergeBarriers < 0 || mergeBarriers > 3)
      return llvm::createStringError("--bwd-merge-barriers must be 0, 1, 2 or 3, got " +
                                     std::to_string(mergeBarriers));
  }
  target.mergeBarriers = mergeBarriers;
  target.deterministic = deterministic;
  target.stageAuxGrads = stageAuxGrads;
  target.deferTurns = deferTurns;
  // The writer takes the turns off the body's barriers: measured 0.89-0.97x
  // the default's time against 1.33-1.48x without it (H100, D = 128,
  // bench/results/2026-12-05e-h100-dq-writer). Without the turns it bought
  // nothing at D = 128 (1.00-1.02x), so the default keeps the body's own
  // adds. (A kernel marked ordered_query_grads takes turns and the writer
  // without --deterministic; one marked query_grad_writer, unmasked at D
  // <= 64 and N <= 8192, the writer alone: config::defaultQueryGradAdds.)
  target.queryGradWriter = queryGradWriter.getNumOccurrences()
                               ? queryGradWriter
                               : deterministic && !deferTurns;
  return llvm::Error::success();
}

llvm::Error config::parseTile(llvm::StringRef spec, ConfigRequest &request, bool backward) {
  llvm::StringRef flag = backward ? "--bwd-tile" : "--tile";
  llvm::SmallVector<llvm::StringRef> items;
  spec.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, text] = item.split('=');
    key = key.trim();
    int64_t value;
    if (key != "Br" && key != "Bc")
      return llvm::createStringError(flag + ": unknown key '" + key +
                                     "' (expected one of Br, Bc)");
    if (text.trim().getAsInteger(10, value) || value < 1)
      return llvm::createStringError(flag + ": '" + item + "' is not " + key +
                                     "=<positive integer>");
    if (backward)
      (key == "Br" ? request.backwardBlockRows : request.backwardBlockCols) = value;
    else
      (key == "Br" ? request.blockRows : request.blockCols) = value;
  }
  return llvm::Error::success();
}

void config::setVersionPrinter(llvm::StringRef tool) {
  cl::SetVersionPrinter([name = tool.str()](llvm::raw_ostream &os) {
    os << name << ": flashc " FLASHC_VERSION " (LLVM " LLVM_VERSION_STRING ")\n";
  });
}
