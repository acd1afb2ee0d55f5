//===- Passes.td - flash to sm90 (wgmma) lowering ------------*- tablegen -*-===//

#ifndef FLASHC_CONVERSION_FLASHTOSM90_PASSES_TD
#define FLASHC_CONVERSION_FLASHTOSM90_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertFlashToSM90 : Pass<"flash-to-sm90", "::mlir::ModuleOp"> {
  let summary = "Lower flash.kernel to a Hopper forward kernel (wgmma, sm_90a)";
  let description = [{
    The Hopper lowering. It shares flash-to-sm80's walk over the kernel body
    (scalars, score-mod and mask regions, the online softmax, stores, key
    blocks skipped by a classified mask) and replaces what Hopper does
    differently:

    - Br/64 warpgroups (4 warps each) per CTA; warpgroup w owns query rows
      64w..64w+63 and warp i of it rows 16i..16i+15, so every tile is held
      in the m64nNk16 accumulator layout, which per warp is the mma.sync
      m16n8 layout the shared code already uses.
    - Q, K and V tiles live in shared memory as ceil(D/64) panels of
      rows x 128 bytes in the 128-byte swizzle (16-byte chunk c of row r at
      chunk c xor r mod 8), filled by cp.async, made visible to the tensor
      cores with `fence.proxy.async.shared::cta`.
    - S = Q·Kᵀ is `wgmma.mma_async` m64nBck16 with Q and K read through
      K-major shared-memory descriptors; A += P·V is m64nDk16 with P from
      registers (the S accumulator, packed in pairs) and V through an
      MN-major (transposed) descriptor. One `wgmma.commit_group` and
      `wgmma.wait_group 0` per GEMM; accumulators pass through the fences
      and the wait as tied asm operands so no instruction touches them
      while the tensor cores own them.
    - O leaves in 16-byte stores: each quad transposes its packed words
      (two `shfl.sync.bfly` stages) so that a thread holds 8 whole columns
      (o must be 16-byte aligned with strides of 8 elements).

    - With `kv-copy=tma` (the default) K and V blocks arrive by TMA
      (`cp.async.bulk.tensor.4d`, one 64-column box per panel, swizzled by
      the copy engine) issued by one thread and completing on one mbarrier
      per buffer; the two CUtensorMaps are grid-constant kernel parameters
      after the aux tensors. `kv-copy=cp.async` copies them with cp.async
      like Q.

    - With `overlap-softmax` (TMA only; off by default: see
      docs/ARCHITECTURE.md for when it pays) the key loop is
      software-pipelined: P·V of block j is issued right after Q·Kᵀ of
      block j + 1 and completes while block j + 1's softmax runs
      (`wgmma.wait_group 1`), with V double-buffered.
    - With `warp-specialize` (`auto`, the default, means for tiles of two
      or more warpgroups) the CTA gains a producer warpgroup: at the key
      loop it drops to 24 registers (40 in a persistent grid up to D = 128;
      `setmaxnreg.dec`) and one of its threads issues every K/V copy into two-slot rings with full and empty
      mbarriers; the consumer warpgroups raise their registers
      (`setmaxnreg.inc`), run the overlapped loop and release each slot by
      arriving on its empty barrier. With two or three consumer warpgroups
      they ping-pong (`ping-pong`, on by default): warpgroup w issues its
      GEMMs after `bar.sync 1 + w`, then lets the next one go with
      `bar.arrive`. With `persistent` (on by default in this pass; the
      tools flashc, flash-run and flashc-tune set it when they know N, and
      above N = 8192 only for kernels without aux tensors:
      `persistent-with-tensors`) the grid is one CTA per SM
      slot: the CTA splits once and loops over query tiles, Q comes by TMA
      too (a third tensor map, before k's) into a buffer with its own
      full/empty barriers, and the producer fetches the next tile's Q and
      K/V while the consumers finish the current one (the launch rule says
      `persistent`). At D = 256 only tiles up to Bc = 64 are persistent.
      With a mask classified per 64-row band (`row_groups`), each consumer
      warpgroup computes only the key blocks its own rows see and passes
      over the others (its GEMM turn, then a release of the K/V slots once
      they have landed).
      Kernels whose key loop is not at the
      top level or cannot defer P·V, and tiles whose rings do not fit, are
      built without it.

    Supported: bf16/f16, D = 64, 96, 128, 256, Br a multiple of 64 (at most
    256), Bc a multiple of 16 up to 256. Requires sm_90a.
  }];
  let options = [
    Option<"kvCopy", "kv-copy", "std::string", /*default=*/"\"tma\"",
           "How K and V blocks reach shared memory: tma or cp.async">,
    Option<"overlapSoftmax", "overlap-softmax", "bool", /*default=*/"false",
           "With kv-copy=tma: issue P·V of key block j after Q·Kᵀ of block "
           "j + 1 so it runs under block j + 1's softmax (two V buffers)">,
    Option<"warpSpecialize", "warp-specialize", "std::string", /*default=*/"\"auto\"",
           "With kv-copy=tma: a producer warpgroup (setmaxnreg 24 or 40) issues the "
           "K/V copies into two-slot rings; the Br/64 consumer warpgroups "
           "overlap softmax and P·V as with overlap-softmax. auto (the "
           "default): when Br >= 128; on; off">,
    Option<"pagedLastBlock", "paged-last-block", "std::string", /*default=*/"\"gather\"",
           "A one-warpgroup kernel over a paged cache whose blocks come by "
           "TMA, without overlap-softmax: how the block a sequence ends in "
           "arrives. gather (the default): every thread by cp.async with "
           "zero fill; tma: by TMA boxes like every other (warp 0, a box "
           "per lane), its rows past the sequence zeroed after the wait">,
    Option<"pingPong", "ping-pong", "bool", /*default=*/"true",
           "With warp-specialize and two or more consumer warpgroups: they "
           "take turns issuing their GEMMs (named barriers)">,
    Option<"persistent", "persistent", "bool", /*default=*/"true",
           "With warp-specialize: a persistent grid; each CTA loops over "
           "query tiles and the producer loads the next tile's Q (TMA) and "
           "K/V while the consumers finish the last (the tools decide it "
           "from N: config::persistentGridPays)">,
    Option<"persistentWithTensors", "persistent-with-tensors", "bool",
           /*default=*/"true",
           "With persistent: kernels that read aux tensors take the "
           "persistent grid too (the tools keep them on one CTA per tile "
           "above N = 8192)">,
    Option<"deterministic", "deterministic", "bool", /*default=*/"false",
           "Backward kernels: dQ adds in key-block order (a semaphore per "
           "query tile), so dQ is bitwise the same from run to run">,
    Option<"stageAuxGrads", "stage-aux-grads", "bool", /*default=*/"false",
           "Backward kernels: sum a tile's non-uniform aux gradient adds in "
           "shared memory first (one global add per entry; not yet validated "
           "on a GPU, hence off by default)">,
    Option<"deferTurns", "defer-turns", "bool", /*default=*/"false",
           "Deterministic backward kernels with bulk dQ adds: thread 0 waits "
           "for a query tile's turn, adds the tile and passes the turn on "
           "during its next tile's first dK/dV product instead of at the "
           "tile's end (experimental: correct on the H100, slower than "
           "dq-writer)">,
    Option<"queryGradWriter", "dq-writer", "bool", /*default=*/"false",
           "Backward kernels with bulk dQ adds and two or more warpgroups: one "
           "more warpgroup at 24 registers (setmaxnreg; the others take "
           "240) whose first warp adds the staged dQ tiles and, in "
           "deterministic mode, waits for and passes on their turns (flashc "
           "turns it on with --deterministic)">,
    Option<"rotateQueryTiles", "bwd-rotate-tiles", "bool", /*default=*/"false",
           "Backward kernels without turns: each key block's walk over the "
           "query tiles starts at its own tile and wraps (not yet run on a "
           "GPU, hence off by default)">,
    Option<"overlapAccumulates", "bwd-overlap-accumulates", "bool", /*default=*/"true",
           "Backward kernels: the dV and dK products stay in flight until "
           "their accumulators are read (dV under dS = P(dP - delta) where dP "
           "is not issued beside S, dK under the dS store, the barrier and the "
           "dQ product)">,
    Option<"mergeBarriers", "bwd-merge-barriers", "int64_t", /*default=*/"-1",
           "Backward main kernels (-1: the default, 2): 0 keeps every "
           "per-tile barrier; 1 lets the "
           "dQ writer's staging-free barrier publish dS too; 2 also acquires "
           "a pipelined tile's copies at the barrier that starts it; 3 also "
           "copies Q and dO into three stages, the tile after next right "
           "after the dS barrier">,
  ];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::scf::SCFDialect",
  ];
}

#endif // FLASHC_CONVERSION_FLASHTOSM90_PASSES_TD
