//===- Passes.td - flash to sm80 (mma.sync) lowering ---------*- tablegen -*-===//

#ifndef FLASHC_CONVERSION_FLASHTOSM80_PASSES_TD
#define FLASHC_CONVERSION_FLASHTOSM80_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertFlashToSM80 : Pass<"flash-to-sm80", "::mlir::ModuleOp"> {
  let summary = "Lower flash.kernel to a FlashAttention-2 forward kernel (mma.sync, ldmatrix, cp.async)";
  let description = [{
    Replaces every `flash.kernel` of the module by a `gpu.func` kernel of the
    same name inside one `gpu.module @flashc_kernels` (the module gets
    `gpu.container_module`). The kernel body is written with the nvvm, llvm,
    arith and scf dialects at the level of one thread:

    - Grid (ceil(N/Br), H, B); Br/R warps, each owning R = 16 or 32 query
      rows (`rows-per-warp`): with R = 32 a warp computes two m16 row blocks
      and every K/V fragment it loads with ldmatrix feeds both, halving the
      shared-memory reads per mma. With a mask, CTA x runs query tile
      ceil(N/Br) - 1 - x (longest first under a causal mask).
    - The Q tile is copied to shared memory with 16-byte
      `cp.async.cg.shared.global` and moved to registers with `ldmatrix`
      (kept in registers while R/16·D <= 128, re-read per block otherwise).
    - K and V blocks stream through shared memory with cp.async; the copy of
      V(kt) overlaps S = Q·Kᵀ and the copy of K(kt+1) overlaps P·V
      (FlashAttention-2's schedule).
    - S = Q·Kᵀ and A += P·V run on `mma.sync.m16n8k16` (bf16 or f16 inputs,
      f32 accumulation); K fragments come from `ldmatrix`, V fragments from
      `ldmatrix.trans`, P stays in registers (the C fragment of S, packed in
      pairs, is the A fragment of P·V).
    - Score-mod and mask regions are cloned per accumulator element with
      (b, h, i, j) from the thread's fragment coordinates; the online softmax
      keeps m and l in registers and reduces rows across each quad with
      `shfl.sync.bfly`; exponentials are `ex2.approx.ftz.f32`.
    - When the loop is the FlashAttention recurrence and its scores pass a
      `flash.mask`, a key block no element of which survives is skipped
      (exact: such a block leaves m, l and A unchanged). A mask
      `classified(%all, %any)` (flash-classify-tiles) decides with %any,
      whose scalar slice is lowered ahead of the block, and skips the
      per-element predicate when %all holds; an unclassified mask is first
      evaluated alone by the CTA, which votes with `bar.red.or`.

    The kernel ABI (parameter order) and launch rule are written on the
    `gpu.module` as `flashc.launch` (see flashc/Target/NVPTX/EmitPTX.h).
    The kernel is an `llvm.func` with `nvvm.kernel` (a gpu.func would make
    convert-gpu-to-nvvm turn llvm.intr.sqrt/fabs into libdevice calls); its
    body still holds scf/arith ops: run `lowerToLLVM` (convert-scf-to-cf,
    convert-arith-to-llvm, convert-cf-to-llvm, reconcile-unrealized-casts)
    before translation.
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::scf::SCFDialect",
  ];
  let options = [
    Option<"numWarps", "num-warps", "int64_t", /*default=*/"0",
           "Warps per block; 0 derives Br/R (R = rows-per-warp)">,
    Option<"rowsPerWarp", "rows-per-warp", "int64_t", /*default=*/"0",
           "Query rows per warp, 16 or 32 (two m16 row blocks); 0 = auto: "
           "32 when D + Bc <= 160 and Br is a multiple of 128, else 16">,
    Option<"qInRegisters", "q-in-registers", "std::string", /*default=*/"\"auto\"",
           "Keep the Q fragments in registers for the whole kernel: auto "
           "(when R/16 * D <= 128), always or never">,
    Option<"deterministic", "deterministic", "bool", /*default=*/"false",
           "Backward kernels: dQ adds in key-block order (a semaphore per "
           "query tile), so dQ is bitwise the same from run to run">,
    Option<"stageAuxGrads", "stage-aux-grads", "bool", /*default=*/"false",
           "Backward kernels: sum a tile's non-uniform aux gradient adds in "
           "shared memory first (one global add per entry; not yet validated "
           "on a GPU, hence off by default)">,
  ];
}

#endif // FLASHC_CONVERSION_FLASHTOSM80_PASSES_TD
