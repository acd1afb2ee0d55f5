//===- Passes.td - Passes over the flash dialect ------------*- tablegen -*-===//

#ifndef FLASH_TRANSFORMS_PASSES_TD
#define FLASH_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def FlashFuseRescale : Pass<"flash-fuse-rescale", "::flashc::flash::KernelOp"> {
  let summary = "Fuse diag(α)·A and A + P·V into flash.rescale_accumulate";
  let description = [{
    Rewrites `flash.pv_accumulate(flash.rescale(A, α), P, V)` into
    `flash.rescale_accumulate(A, α, P, V)` when the rescaled accumulator has
    no other use. The fused op lets a backend scale the accumulator registers
    right before the tensor-core GEMM accumulates into them, instead of
    materializing diag(α)·A.
  }];
  let dependentDialects = ["::flashc::flash::FlashDialect"];
}

def FlashFoldScale : Pass<"flash-fold-scale", "::flashc::flash::KernelOp"> {
  let summary = "Fold scale·log2(e) into one multiply and turn exp into exp2";
  let description = [{
    Sets `exp2_scale` on every `flash.online_softmax` so the exponentials run
    as exp2 (one FMA and an ex2.approx per element on the GPU).

    When every softmax reads its scores from a `flash.qk_dot` through masks
    only (no score modification in between) and the dot's scale is positive,
    the scale moves out of the dot: the dot computes raw Q·Kᵀ, the softmax
    uses `exp2_scale = scale·log2(e)` and `flash.finalize` gets
    `max_scale = scale` so LSE stays in natural-log units. With a score
    modification the scores must stay scaled, so only log2(e) is folded.
    Kernels already folded are left alone.
  }];
  let dependentDialects = ["::flashc::flash::FlashDialect"];
}

def FlashFoldBackwardScale
    : Pass<"flash-fold-backward-scale", "::flashc::flash::BackwardKernelOp"> {
  let summary = "Move the dot scale into flash.recompute_probs";
  let description = [{
    Where a `flash.recompute_probs` reads the scores of a `flash.qk_dot`
    through masks only (no score modification) and the dot's scale is
    positive, the dot computes raw Q·Kᵀ and the op gets `score_scale`:
    P = exp(scale·S − LSE) becomes one FMA and an ex2 per element on the GPU
    instead of a multiply more. Such scores are finite or −inf for finite
    inputs, so the backend guards a row that saw no key through the row's
    exponent offset (−inf) rather than a select per element. Ops already
    folded are left alone.
  }];
  let dependentDialects = ["::flashc::flash::FlashDialect"];
}

def FlashClassifyTiles : Pass<"flash-classify-tiles"> {
  let summary = "Prove per tile that a mask keeps every element, or none";
  let description = [{
    Evaluates each `flash.mask` region over intervals — the tile's query
    positions [qt·Br, qt·Br + Br − 1] and key positions [kt·Bc, kt·Bc + Bc − 1],
    with b, h, parameters and sizes exact — as scalar IR emitted in front of
    the mask, and attaches the results as `classified(%all_visible,
    %any_visible)`. Backends skip empty key blocks and drop the predicate on
    full ones; the interpreter does the same, so a wrong proof shows up as a
    mismatch with the fp64 reference. Affine masks (causal, sliding window,
    prefix-LM, chunked) classify exactly; data-dependent ones (document ids)
    stay partial. Integer bounds are tracked in i64 and widened to the whole
    i32 range where 32-bit wrap-around could occur.

    With `group-rows=R` (R dividing Br, Br > R) it also proves, per band of
    R query rows, that some element survives: `row_groups(%g0, ...)`. The
    flash pipeline uses R = 64, the rows of one wgmma warpgroup.
    It runs on any op (`flash.kernel`, `flash.backward_kernel`, a module):
    a mask means the same in the backward's transposed loop, where an empty
    tile contributes no gradient and a full one needs no predicate.
  }];
  let options = [
    Option<"groupRows", "group-rows", "int64_t", /*default=*/"0",
           "Also classify each band of this many query rows (row_groups); "
           "0: off">,
  ];
  let dependentDialects = ["::flashc::flash::FlashDialect", "::mlir::arith::ArithDialect"];
}

#endif // FLASH_TRANSFORMS_PASSES_TD
