//===- FlashOps.td - Operations of the flash dialect --------*- tablegen -*-===//
//
// Shapes below: Br query rows, Bc key rows and head dim D, all taken from the
// enclosing kernel's `#flash.tile`. "Tile" means a static 2-D tensor, "row
// vector" a static 1-D tensor with one entry per query row.
//
//===----------------------------------------------------------------------===//

#ifndef FLASH_OPS_TD
#define FLASH_OPS_TD

include "flashc/Dialect/Flash/IR/FlashDialect.td"
include "flashc/Dialect/Flash/IR/FlashAttrs.td"
include "flashc/Dialect/Flash/IR/FlashInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"

def Flash_Tile : 2DTensorOf<[BF16, F16, F32]>;
def Flash_F32Tile : 2DTensorOf<[F32]>;
def Flash_RowVector : 1DTensorOf<[F32]>;
def Flash_Scalar : AnyTypeOf<[I32, F32]>;

//===----------------------------------------------------------------------===//
// Kernel structure
//===----------------------------------------------------------------------===//

def Flash_KernelOp : Flash_Op<"kernel", [
    Symbol, IsolatedFromAbove, Flash_KernelSignatureInterface,
    SingleBlockImplicitTerminator<"ReturnOp">,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "One attention variant, written as the work of one program";
  let description = [{
    The body runs once per (batch `b`, query head `h`, query tile `qt`); its
    three index block arguments are those coordinates. The attributes are the
    variant's signature:

    - `config`: the tile shape (`#flash.tile<br, bc, head_dim>`);
    - `element_type`: the element type of q, k, v and O in memory;
    - `params`, `tensors`: runtime scalars and auxiliary tensors;
    - `static_sizes`: per DimRole, a size the source fixed, or -1;
    - `dim_classes`: per DimRole, the smallest role it must equal at run time
      (self-attention ties key_len to query_len, MHA kv_heads to heads);
    - `block_summary` (optional): the mask reads a run-time block summary
      (`#flash.block_summary`, `flash.block_class`);
    - `split_keys` (unit): the key range may be split at run time
      (flash-decoding). The body then takes a fourth index argument, the
      split `s` of the launch's S (a run-time count, 1 or more); it walks
      the key blocks `flash.split_key_range` gives it and stores through
      `flash.store ... split %s`. With S > 1 every split stores its partial
      O (f32, normalized) and LSE, and a combine step merges the S partials
      of each row by their LSE (O = Σ exp(LSE_s − LSE)·O_s, LSE = log Σ
      exp(LSE_s)); with S = 1 the store is the plain one.
    - `packed_heads` (unit): packed GQA for decoding. The query heads of
      one KV group share the rows of a tile, so K and V are read once per
      group: `h` is then the KV head (in [0, HKV)), and row `r` of query
      tile `qt` is packed row p = qt·Br + r of the group's G·N rows
      (G = H / HKV), which holds query position i = p / G of query head
      h·G + p mod G. flash.load_q, flash.store and the score_mod and mask
      regions map every row so (the regions still see the query head and
      i); rows p >= G·N are padding. Incompatible with a block summary
      (its tiles are per query head) and with flash.kv_head (h already is
      the KV head).
    - `paged_kv` (optional): K and V live in a paged cache
      (`#flash.paged_kv`); `flash.dim key_len` is the kernel instance's own
      sequence length. Incompatible with a block summary (its tiles assume
      one M for every sequence).
    - `varlen` (optional): packed ragged sequences (`#flash.varlen`);
      `flash.dim query_len` (with packed queries) and `flash.dim key_len`
      (with packed keys) are the kernel instance's own sequence lengths.
      Incompatible with a block summary, and packed queries with
      `split_keys` and `packed_heads` (their partial states and packed rows
      are laid out by the launch's N), and packed keys with `paged_kv`.

    GPU backends turn the body into a kernel whose grid covers every
    (b, h, qt) (and split); the interpreter runs the same loop nest on the
    host.
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
    UnitAttr:$split_keys,
    UnitAttr:$packed_heads,
    OptionalAttr<Flash_PagedKVAttr>:$paged_kv,
    OptionalAttr<Flash_VarlenAttr>:$varlen
  );
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getEntryBlock() { return getBody().front(); }
    ::mlir::BlockArgument getBatch() { return getEntryBlock().getArgument(0); }
    ::mlir::BlockArgument getHead() { return getEntryBlock().getArgument(1); }
    ::mlir::BlockArgument getQueryTile() { return getEntryBlock().getArgument(2); }
    /// The key split (split_keys kernels only).
    ::mlir::BlockArgument getSplit() { return getEntryBlock().getArgument(3); }
  }];
}

def Flash_ReturnOp : Flash_Op<"return", [
    Pure, Terminator, ParentOneOf<["KernelOp", "BackwardKernelOp"]>]> {
  let summary = "Ends a kernel body";
  let assemblyFormat = "attr-dict";
}

def Flash_YieldOp : Flash_Op<"yield", [
    Pure, Terminator, ParentOneOf<["ScoreModOp", "MaskOp", "ScoreModGradOp"]>]> {
  let summary = "Yields the element value of a score-mod or mask region";
  let arguments = (ins AnyTypeOf<[F32, I1]>:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Scalars the kernel reads
//===----------------------------------------------------------------------===//

def Flash_DimOp : Flash_Op<"dim", [Pure]> {
  let summary = "The run-time size of a problem dimension";
  let description = [{
    `%m = flash.dim key_len : index` reads M from the launch. Lowers to a
    kernel parameter.
  }];
  let arguments = (ins Flash_DimRole:$role);
  let results = (outs AnySignlessIntegerOrIndex:$result);
  let assemblyFormat = "$role attr-dict `:` type($result)";
}

def Flash_ParamOp : Flash_Op<"param", [Pure]> {
  let summary = "The value of a runtime scalar parameter";
  let description = [{
    `%w = flash.param "window" : i32`; the name must be declared in the
    kernel's `params` with the same type. Lowers to a kernel parameter.
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Flash_Scalar:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Flash_AuxLoadOp : Flash_Op<"aux_load", [Pure]> {
  let summary = "Reads one element of an auxiliary tensor";
  let description = [{
    `%d = flash.aux_load "doc"[%b, %i] : i32`. Integer tensors read as i32,
    floating-point ones (bf16, f16, f32) as f32. An index outside the tensor
    reads 0, so masks may index with padded positions; GPU lowering emits a
    predicated global load.
  }];
  let arguments = (ins StrAttr:$tensor, Variadic<I32>:$indices);
  let results = (outs Flash_Scalar:$result);
  let assemblyFormat = "$tensor `[` $indices `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Flash_BlockClassOp : Flash_Op<"block_class", [Pure]> {
  let summary = "The run-time class of one (query tile, key block) of the mask";
  let description = [{
    `%c = flash.block_class %b, %h, %qt, %kt` reads the kernel's block
    summary (see `#flash.block_summary`): 0 when no element of the tile
    inside the problem is visible, 2 when every one is, 1 otherwise.
    `flash-classify-tiles` combines it with what it proves about a mask that
    reads aux tensors. Pure: the summary does not change during the kernel.
  }];
  let arguments = (ins Index:$batch, Index:$head, Index:$query_tile, Index:$key_tile);
  let results = (outs I32:$result);
  let assemblyFormat = "$batch `,` $head `,` $query_tile `,` $key_tile attr-dict";
  let hasVerifier = 1;
}

def Flash_KVHeadOp : Flash_Op<"kv_head", [Pure]> {
  let summary = "The key/value head that query head `h` reads (GQA/MQA)";
  let description = [{
    `h floordiv (heads / kv_heads)`: with kv_heads == heads this is `h`, with
    kv_heads == 1 (MQA) it is 0.
  }];
  let arguments = (ins Index:$head);
  let results = (outs Index:$result);
  let assemblyFormat = "$head attr-dict";
}

//===----------------------------------------------------------------------===//
// Tile movement
//===----------------------------------------------------------------------===//

def Flash_LoadQOp : Flash_Op<"load_q", [MemoryEffects<[MemRead]>]> {
  let summary = "Loads the Br x D query tile of (b, h, qt)";
  let description = [{
    Rows `qt*Br + r` past the query length read as zero (a packed_heads
    kernel's rows are its group's packed rows: see flash.kernel). Lowers to
    ldmatrix/cp.async (sm80) or a TMA load (sm90).
  }];
  let arguments = (ins Index:$batch, Index:$head, Index:$query_tile);
  let results = (outs Flash_Tile:$result);
  let assemblyFormat = "$batch `,` $head `,` $query_tile attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Flash_LoadKVOp : Flash_Op<"load_kv", [MemoryEffects<[MemRead]>]> {
  let summary = "Loads the Bc x D key or value block `kt` of (b, kv_head)";
  let description = [{
    Rows past the key length read as zero; `flash.mask_key_bounds` keeps
    them out of the softmax. Lowers to a cp.async / TMA ring buffer stage.
  }];
  let arguments = (ins Flash_KVOperand:$operand, Index:$batch, Index:$kv_head,
                       Index:$key_tile);
  let results = (outs Flash_Tile:$result);
  let assemblyFormat = "$operand $batch `,` $kv_head `,` $key_tile attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Flash_StoreOp : Flash_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "Stores the O tile and its LSE row vector for (b, h, qt)";
  let description = [{
    O is converted to the kernel's element type; LSE stays f32. Rows past the
    query length are not written. In a `split_keys` kernel the store names
    its split: with more than one split at run time it writes the split's
    partial O (f32) and LSE for the combine step instead.
  }];
  let arguments = (ins Flash_F32Tile:$output, Flash_RowVector:$lse,
                       Index:$batch, Index:$head, Index:$query_tile,
                       Optional<Index>:$split);
  let assemblyFormat = [{
    $output `,` $lse `at` ` ` `(` $batch `,` $head `,` $query_tile `)`
    (`split` $split^)? attr-dict `:` type($output) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def Flash_SplitKeyRangeOp : Flash_Op<"split_key_range", [Pure]> {
  let summary = "The key blocks of one split of a split_keys kernel";
  let description = [{
    `%lo, %hi = flash.split_key_range %s of %blocks` : split `s` of the
    launch's S splits takes key blocks [⌊blocks·s/S⌋, ⌊blocks·(s+1)/S⌋):
    consecutive, disjoint, covering [0, blocks), as even as integers allow
    (a split is empty when S > blocks). S is a run-time count (a kernel
    parameter on the GPU, the interpreter's `keySplits`).
  }];
  let arguments = (ins Index:$split, Index:$blocks);
  let results = (outs Index:$lower, Index:$upper);
  let assemblyFormat = "$split `of` $blocks attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Scores
//===----------------------------------------------------------------------===//

def Flash_QKDotOp : Flash_Op<"qk_dot", [Pure]> {
  let summary = "S = scale * Q Kᵀ for one (query tile, key block)";
  let description = [{
    Br x D times (Bc x D)ᵀ with f32 accumulation. Lowers to mma.sync
    m16n8k16 (sm80) or wgmma.mma_async with both operands in shared memory
    (sm90). `flash-fold-scale` may move the scale into the softmax's exp2.
  }];
  let arguments = (ins Flash_Tile:$query, Flash_Tile:$key, F32Attr:$scale);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = [{
    $query `,` $key attr-dict `:` type($query) `,` type($key) `->` type($result)
  }];
  let hasVerifier = 1;
}

class Flash_ElementwiseRegionOp<string mnemonic, list<Trait> traits = []>
    : Flash_Op<mnemonic, !listconcat([Pure, AllTypesMatch<["scores", "result"]>,
        DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>],
        traits)> {
  let results = (outs Flash_F32Tile:$result);
  let regions = (region SizedRegion<1>:$body);
  let hasRegionVerifier = 1;
}

def Flash_ScoreModOp : Flash_ElementwiseRegionOp<"score_mod"> {
  let summary = "Applies a score modification to every element of S";
  let description = [{
    The region maps (s: f32, b, h, i, j: i32) to the new f32 score, where
    `i = qt*Br + row` and `j = kt*Bc + col` are global positions (in a
    packed_heads kernel each row's own query head and position: see
    flash.kernel). It is
    inlined into the element loop of the score tile (registers on the GPU).
  }];
  let arguments = (ins Flash_F32Tile:$scores, Index:$batch, Index:$head,
                       Index:$query_tile, Index:$key_tile);
  let assemblyFormat = [{
    $scores `at` ` ` `(` $batch `,` $head `,` $query_tile `,` $key_tile `)`
    attr-dict `:` type($scores) $body
  }];
}

def Flash_MaskOp : Flash_ElementwiseRegionOp<"mask", [AttrSizedOperandSegments]> {
  let summary = "Sets to -inf every element of S whose predicate is false";
  let description = [{
    The region maps (b, h, i, j: i32) to i1: true keeps the score (i and
    j as in flash.score_mod).

    `flash-classify-tiles` adds two tile-level facts proved by interval
    analysis of the region over the tile's (i, j) ranges:
    `classified(%all_visible, %any_visible)`. When `%all_visible` holds the
    mask is the identity on this tile and backends skip the per-element
    predicate; when `%any_visible` is false every element becomes -inf and
    backends skip the whole key block. Both are conservative: a tile that
    cannot be proved either way is partial and evaluates the region.

    It may also add one fact per group of equal row bands:
    `row_groups(%g0, %g1, ...)`, %gk false meaning that no element of rows
    [k·Br/G, (k+1)·Br/G) survives. A backend whose warpgroups own those
    bands lets each skip the key blocks that are empty for its rows only.
  }];
  let arguments = (ins Flash_F32Tile:$scores, Index:$batch, Index:$head,
                       Index:$query_tile, Index:$key_tile,
                       Optional<I1>:$all_visible, Optional<I1>:$any_visible,
                       Variadic<I1>:$rows_visible);
  let assemblyFormat = [{
    $scores `at` ` ` `(` $batch `,` $head `,` $query_tile `,` $key_tile `)`
    (`classified` `(` $all_visible^ `,` $any_visible `)`)?
    (`row_groups` `(` $rows_visible^ `)`)?
    attr-dict `:` type($scores) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isClassified() { return static_cast<bool>(getAllVisible()); }
    /// Whether the region reads an aux tensor (what a block summary is for).
    bool readsAuxTensors() {
      return getBody().walk([](AuxLoadOp) { return ::mlir::WalkResult::interrupt(); })
          .wasInterrupted();
    }
  }];
}

def Flash_MaskKeyBoundsOp : Flash_Op<"mask_key_bounds", [
    Pure, AllTypesMatch<["scores", "result"]>]> {
  let summary = "Sets to -inf the columns of S at keys j >= key_len";
  let description = [{
    The last key block may run past the key length; its padded columns must
    not enter the softmax. Needed only on the last block.
  }];
  let arguments = (ins Flash_F32Tile:$scores, Index:$key_tile, Index:$key_len);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = "$scores `,` $key_tile `,` $key_len attr-dict `:` type($scores)";
}

//===----------------------------------------------------------------------===//
// Online softmax and accumulation
//===----------------------------------------------------------------------===//

def Flash_OnlineSoftmaxOp : Flash_Op<"online_softmax", [
    Pure, AllTypesMatch<["max", "sum", "new_max", "new_sum", "alpha"]>,
    AllTypesMatch<["scores", "probs"]>]> {
  let summary = "One step of the online softmax over a Br x Bc score tile";
  let description = [{
    ```
    m'    = max(m, rowmax S)
    m_ref = (m' == -inf) ? 0 : m'          fully-masked-row guard
    P     = exp(S - m_ref)                 α = exp(m - m_ref)
    l'    = α·l + rowsum P
    ```
    With `exp2_scale = c` (set by `flash-fold-scale`) the exponentials are
    `exp2(c·(S - m_ref))` and `exp2(c·(m - m_ref))`: one FMA and an ex2.approx
    per element on the GPU. The guard makes a row that has seen no key give
    α = 0 and P = 0 instead of NaN.
  }];
  let arguments = (ins Flash_F32Tile:$scores, Flash_RowVector:$max,
                       Flash_RowVector:$sum, OptionalAttr<F32Attr>:$exp2_scale);
  let results = (outs Flash_RowVector:$new_max, Flash_RowVector:$new_sum,
                      Flash_F32Tile:$probs, Flash_RowVector:$alpha);
  let assemblyFormat = [{
    $scores `,` $max `,` $sum attr-dict `:` type($scores) `,` type($max)
  }];
  let hasVerifier = 1;
}

def Flash_RescaleOp : Flash_Op<"rescale", [Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "A ← diag(α)·A";
  let description = [{
    Multiplies each accumulator row by its α. On the GPU every thread scales
    the accumulator registers it owns; `flash-fuse-rescale` merges it with the
    following `flash.pv_accumulate`.
  }];
  let arguments = (ins Flash_F32Tile:$acc, Flash_RowVector:$alpha);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = "$acc `,` $alpha attr-dict `:` type($acc) `,` type($alpha)";
  let hasVerifier = 1;
}

def Flash_PVAccumulateOp : Flash_Op<"pv_accumulate", [
    Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "A ← A + P·V";
  let description = [{
    Br x Bc times Bc x D, accumulated in f32 on tensor cores; P is rounded
    to the value element type first (mma.sync / wgmma with P in registers).
  }];
  let arguments = (ins Flash_F32Tile:$acc, Flash_F32Tile:$probs, Flash_Tile:$value);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = [{
    $acc `,` $probs `,` $value attr-dict `:` type($acc) `,` type($probs) `,` type($value)
  }];
  let hasVerifier = 1;
}

def Flash_RescaleAccumulateOp : Flash_Op<"rescale_accumulate", [
    Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "A ← diag(α)·A + P·V in one op";
  let description = [{
    The fused form produced by `flash-fuse-rescale`: the rescale rides on the
    accumulator registers right before the tensor-core GEMM that adds P·V,
    so the accumulator is read and written once per key block.
  }];
  let arguments = (ins Flash_F32Tile:$acc, Flash_RowVector:$alpha,
                       Flash_F32Tile:$probs, Flash_Tile:$value);
  let results = (outs Flash_F32Tile:$result);
  let assemblyFormat = [{
    $acc `,` $alpha `,` $probs `,` $value attr-dict
    `:` type($acc) `,` type($alpha) `,` type($probs) `,` type($value)
  }];
  let hasVerifier = 1;
}

def Flash_FinalizeOp : Flash_Op<"finalize", [
    Pure, AllTypesMatch<["acc", "output"]>, AllTypesMatch<["max", "sum", "lse"]>]> {
  let summary = "O = diag(l)⁻¹·A and LSE = m + log l, once at the end";
  let description = [{
    The FlashAttention-2 deferred division. `max_scale` converts the running
    maximum to natural-log units when `flash-fold-scale` moved the scale into
    exp2 (LSE = max_scale·m + log l). A row with l = 0 saw no key: O = 0 and
    LSE = -inf.
  }];
  let arguments = (ins Flash_F32Tile:$acc, Flash_RowVector:$max, Flash_RowVector:$sum,
                       DefaultValuedAttr<F32Attr, "1.0f">:$max_scale);
  let results = (outs Flash_F32Tile:$output, Flash_RowVector:$lse);
  let assemblyFormat = [{
    $acc `,` $max `,` $sum attr-dict `:` type($acc) `,` type($max)
  }];
  let hasVerifier = 1;
}

include "flashc/Dialect/Flash/IR/FlashBackwardOps.td"

#endif // FLASH_OPS_TD
