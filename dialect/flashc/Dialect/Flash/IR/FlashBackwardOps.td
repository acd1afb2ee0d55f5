//===- FlashBackwardOps.td - The backward pass ------------*- tablegen -*-===//
//
// Gradients of attention in matrix form, per (query tile, key block):
//
//   Δ  = rowsum(dO ∘ O)                       (preprocess, once per row)
//   S  = scale·Q·Kᵀ, then score mod and mask  (recomputed, as in the forward)
//   P  = exp(S − LSE)                         (0 where LSE or S is −inf)
//   dP = dO·Vᵀ
//   dZ = P ∘ (dP − Δ)                         gradient of the modded score
//   dS = dZ ∘ ∂score/∂s                       through the score mod
//   dV += Pᵀ·dO     dK += dSᵀ·Q     dQ += dS·K    (scale applied once)
//
// Included by FlashOps.td (one op library). Shapes: Br, Bc and D from the
// enclosing kernel's `#flash.tile`.
//
//===----------------------------------------------------------------------===//

#ifndef FLASH_BACKWARD_OPS_TD
#define FLASH_BACKWARD_OPS_TD

def Flash_BackwardKernelOp : Flash_Op<"backward_kernel", [
    Symbol, IsolatedFromAbove, Flash_KernelSignatureInterface,
    SingleBlockImplicitTerminator<"ReturnOp">,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "The backward pass of one attention variant";
  let description = [{
    Two programs with the variant's signature (the attributes of
    `flash.kernel`):

    - `preprocess` runs once per (batch `b`, query head `h`, query tile `qt`)
      and stores Δ = rowsum(dO ∘ O) with `flash.store_delta`;
    - `main` runs once per (batch `b`, key/value head `kv_head`, key block
      `kt`) — the transposed loop order of FlashAttention-2's backward. It
      keeps dK and dV of its key block in registers while it walks the query
      heads of its KV group and their query tiles, adds dQ into an f32
      accumulator (`flash.query_grad_add`) and stores dK and dV at the end.

    After `main`, dQ is converted from its f32 accumulator to the element
    type. Aux tensor gradients (`flash.aux_grad_add`) are f32 arrays of the
    tensor's shape. The interpreter runs preprocess over its grid, then main;
    GPU backends make one kernel of each plus the conversion.

    `block_summary` (optional), as on `flash.kernel`: the mask reads aux
    tensors, and `main` reads a run-time summary of the backward's own
    Br x Bc tiling through `flash.block_class` (query tile qt of query head
    h, key block kt): the query tiles it empties are skipped, the full ones
    drop the mask. GPU backends compute it with a fourth kernel first.

    `ordered_query_grads`: GPU backends add dQ in the deterministic mode's
    key-block order (its semaphores and the wgmma dQ writer) though
    determinism was not asked for, because that order measured faster for
    this variant (config::defaultQueryGradAdds); where the writer
    cannot serve the tile (one warpgroup of keys, no room for the staged
    dQ tile) they add in any order. The results are the
    same as the default's up to the order of f32 adds (and bitwise the same
    from run to run); the interpreter, which adds in one order anyway,
    ignores it.

    `query_grad_writer`: GPU backends add dQ through the dQ writer
    warpgroup, in any order, though no writer was asked for, because it
    measured faster for this variant (config::defaultQueryGradAdds); where
    the writer cannot serve the tile the body's threads add. It excludes
    `ordered_query_grads`, which takes the writer anyway.
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Flash_TileConfigAttr:$config,
    TypeAttrOf<AnyFloat>:$element_type,
    DefaultValuedAttr<TypedArrayAttrBase<Flash_ParamAttr, "parameters">, "{}">:$params,
    DefaultValuedAttr<TypedArrayAttrBase<Flash_AuxTensorAttr, "aux tensors">, "{}">:$tensors,
    DenseI64ArrayAttr:$static_sizes,
    DenseI64ArrayAttr:$dim_classes,
    OptionalAttr<Flash_BlockSummaryAttr>:$block_summary,
    UnitAttr:$ordered_query_grads,
    UnitAttr:$query_grad_writer
  );
  let regions = (region SizedRegion<1>:$preprocess, SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword `preprocess` $preprocess `main` $body";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getPreprocessBlock() { return getPreprocess().front(); }
    ::mlir::Block &getMainBlock() { return getBody().front(); }
    ::mlir::BlockArgument getBatch() { return getMainBlock().getArgument(0); }
    ::mlir::BlockArgument getKvHead() { return getMainBlock().getArgument(1); }
    ::mlir::BlockArgument getKeyTile() { return getMainBlock().getArgument(2); }
  }];
}

//===----------------------------------------------------------------------===//
// Loads and stores
//===----------------------------------------------------------------------===//

def Flash_LoadRowsOp : Flash_Op<"load_rows", [MemoryEffects<[MemRead]>]> {
  let summary = "Loads the Br x D tile of O or dO for (b, h, qt)";
  let description = [{
    Like `flash.load_q` for the forward's output or its gradient (both
    [B, H, N, D] in the kernel's element type); rows past the query length
    read as zero.
  }];
  let arguments = (ins Flash_RowOperand:$operand, Index:$batch, Index:$head,
                       Index:$query_tile);
  let results = (outs Flash_Tile:$result);
  let assemblyFormat = "$operand $batch `,` $head `,` $query_tile attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Flash_LoadRowStatOp : Flash_Op<"load_row_stat", [MemoryEffects<[MemRead]>]> {
  let summary = "Loads LSE or Δ of the Br rows of (b, h, qt)";
  let description = [{
    Rows past the query length read LSE = -inf and Δ = 0, so the
    fully-masked-row guard of `flash.recompute_probs` makes them contribute
    nothing.
  }];
  let arguments = (ins Flash_RowStat:$stat, Index:$batch, Index:$head, Index:$query_tile);
  let results = (outs Flash_RowVector:$result);
  let assemblyFormat = "$stat $batch `,` $head `,` $query_tile attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Flash_StoreDeltaOp : Flash_Op<"store_delta", [
    MemoryEffects<[MemWrite]>, HasParent<"BackwardKernelOp">]> {
  let summary = "Stores Δ of the Br rows of (b, h, qt) (preprocess)";
  let description = [{ Rows past the query length are not written. }];
  let arguments = (ins Flash_RowVector:$delta, Index:$batch, Index:$head,
                       Index:$query_tile);
  let assemblyFormat = [{
    $delta `at` ` ` `(` $batch `,` $head `,` $query_tile `)` attr-dict `:` type($delta)
  }];
  let hasVerifier = 1;
}

def Flash_StoreKeyGradsOp : Flash_Op<"store_key_grads", [
    MemoryEffects<[MemWrite]>, HasParent<"BackwardKernelOp">,
    AllTypesMatch<["key_grad", "value_grad"]>]> {
  let summary = "Stores dK = key_scale·A_K and dV = A_V for (b, kv_head, kt)";
  let description = [{
    The Bc x D f32 accumulators of one key block, converted to the element
    type. `key_scale` is the softmax scale: dK accumulates dSᵀ·Q with dS the
    gradient of the scaled score, so the scale is applied once here. Rows
    past the key length are not written.
  }];
  let arguments = (ins Flash_F32Tile:$key_grad, Flash_F32Tile:$value_grad,
                       Index:$batch, Index:$kv_head, Index:$key_tile, F32Attr:$key_scale);
  let assemblyFormat = [{
    $key_grad `,` $value_grad `at` ` ` `(` $batch `,` $kv_head `,` $key_tile `)`
    attr-dict `:` type($key_grad)
  }];
  let hasVerifier = 1;
}

def Flash_QueryGradAddOp : Flash_Op<"query_grad_add", [MemoryEffects<[MemWrite]>]> {
  let summary = "dQ(b, h, qt) += scale·dS·K in the f32 accumulator";
  let description = [{
    Br x Bc times Bc x D. Every key block of the KV group adds into the same
    rows, so GPU backends add atomically (or, deterministically, in key-block
    order); rows past the query length are not written.
  }];
  let arguments = (ins Flash_F32Tile:$score_grad, Flash_Tile:$key, Index:$batch,
                       Index:$head, Index:$query_tile, F32Attr:$scale);
  let assemblyFormat = [{
    $score_grad `,` $key `at` ` ` `(` $batch `,` $head `,` $query_tile `)` attr-dict
    `:` type($score_grad) `,` type($key)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile math
//===----------------------------------------------------------------------===//

def Flash_RowDotOp : Flash_Op<"row_dot", [Pure, AllTypesMatch<["lhs", "rhs"]>]> {
  let summary = "Δ = rowsum(A ∘ B) in f32";
  let arguments = (ins Flash_Tile:$lhs, Flash_Tile:$rhs);
  let results = (outs Flash_RowVector:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)";
  let hasVerifier = 1;
}

def Flash_RecomputeProbsOp : Flash_Op<"recompute_probs", [
    Pure, AllTypesMatch<["scores", "result"]>]> {
  let summary = "P = exp(S − LSE) from the forward's log-sum-exp";
  let description = [{
    The normalized probabilities without a second softmax pass. The
    fully-masked-row guard: a row whose LSE is −inf saw no key in the
    forward and gets P = 0 (never exp(−inf + inf) = NaN); masked elements
    (S = −inf) get 0.

    `score_scale` (set by flash-fold-backward-scale) multiplies the scores
    first: P = exp(score_scale·S − LSE). It is set only where the scores are
    a `flash.qk_dot`'s (its scale moved here) through masks alone, so for
    finite Q and K they are finite or −inf and a backend may guard a row
    through its exponent offset instead of selecting per element.
  }];
  let arguments = (ins Flash_F32Tile:$scores, Flash_RowVector:$lse,
                       OptionalAttr<F32Attr>:$score_scale);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = "$scores `,` $lse attr-dict `:` type($scores) `,` type($lse)";
  let hasVerifier = 1;
}

def Flash_OutputGradDotOp : Flash_Op<"output_grad_dot", [Pure]> {
  let summary = "dP = dO·Vᵀ for one (query tile, key block)";
  let description = [{ Br x D times (Bc x D)ᵀ with f32 accumulation. }];
  let arguments = (ins Flash_Tile:$output_grad, Flash_Tile:$value);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = [{
    $output_grad `,` $value attr-dict `:` type($output_grad) `,` type($value) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Flash_SoftmaxGradOp : Flash_Op<"softmax_grad", [
    Pure, AllTypesMatch<["probs", "prob_grad", "result"]>]> {
  let summary = "dZ = P ∘ (dP − Δ): the gradient of the (modified) score";
  let description = [{ Elements with P = 0 give exactly 0. }];
  let arguments = (ins Flash_F32Tile:$probs, Flash_F32Tile:$prob_grad,
                       Flash_RowVector:$delta);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = [{
    $probs `,` $prob_grad `,` $delta attr-dict `:` type($probs) `,` type($delta)
  }];
  let hasVerifier = 1;
}

def Flash_ScoreModGradOp : Flash_Op<"score_mod_grad", [
    RecursiveMemoryEffects, AllTypesMatch<["grads", "scores", "result"]>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "The chain rule through a score modification";
  let description = [{
    The region maps (g, s: f32, b, h, i, j: i32) to g·∂score/∂s, where g is
    the gradient of the modified score (from `flash.softmax_grad`) and s the
    scaled score before the modification. It may add g·∂score/∂t into the
    gradient of a float aux tensor t it reads (`flash.aux_grad_add`).
    Elements with g = 0 (masked, or in rows that see no key) give 0 and do
    not run the region, so a derivative that is not finite where the
    probability is 0 cannot poison a gradient.
  }];
  let arguments = (ins Flash_F32Tile:$grads, Flash_F32Tile:$scores, Index:$batch,
                       Index:$head, Index:$query_tile, Index:$key_tile);
  let results = (outs Flash_F32Tile:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $grads `,` $scores `at` ` ` `(` $batch `,` $head `,` $query_tile `,` $key_tile `)`
    attr-dict `:` type($scores) $body
  }];
  let hasRegionVerifier = 1;
}

def Flash_AuxGradAddOp : Flash_Op<"aux_grad_add", [
    MemoryEffects<[MemWrite]>, HasParent<"ScoreModGradOp">]> {
  let summary = "Adds a value into one element of an aux tensor's gradient";
  let description = [{
    `flash.aux_grad_add "bias"[%h, %r] %v : f32` — the scatter-add of a
    learnable tensor's gradient. Indices outside the tensor add nothing
    (the reads there returned 0). GPU backends add atomically, or in a fixed
    order in deterministic mode.
  }];
  let arguments = (ins StrAttr:$tensor, Variadic<I32>:$indices, F32:$value);
  let assemblyFormat = "$tensor `[` $indices `]` $value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Flash_AccumulateTransposedOp : Flash_Op<"accumulate_transposed", [
    Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "A ← A + Xᵀ·R for the key-side gradients";
  let description = [{
    Bc x D accumulator, X a Br x Bc f32 tile, R a Br x D tile of the element
    type: dV += Pᵀ·dO and dK += dSᵀ·Q. X is rounded to the element type
    first, as the tensor-core GEMM consumes it.
  }];
  let arguments = (ins Flash_F32Tile:$acc, Flash_F32Tile:$lhs, Flash_Tile:$rows);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = [{
    $acc `,` $lhs `,` $rows attr-dict `:` type($acc) `,` type($lhs) `,` type($rows)
  }];
  let hasVerifier = 1;
}

#endif // FLASH_BACKWARD_OPS_TD
