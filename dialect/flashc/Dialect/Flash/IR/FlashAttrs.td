//===- FlashAttrs.td - Attributes and enums of flash --------*- tablegen -*-===//

#ifndef FLASH_ATTRS_TD
#define FLASH_ATTRS_TD

include "flashc/Dialect/Flash/IR/FlashDialect.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// The sizes a kernel is generic over. Their values at run time come from the
// launch (the shape of q, k and v); `flash.dim` reads them.
def Flash_DimRole : I32EnumAttr<"DimRole", "a problem dimension", [
    I32EnumAttrCase<"Batch", 0, "batch">,
    I32EnumAttrCase<"Heads", 1, "heads">,
    I32EnumAttrCase<"KVHeads", 2, "kv_heads">,
    I32EnumAttrCase<"QueryLen", 3, "query_len">,
    I32EnumAttrCase<"KeyLen", 4, "key_len">,
    I32EnumAttrCase<"HeadDim", 5, "head_dim">,
  ]> {
  let cppNamespace = "::flashc::flash";
}

// Which of the key-side tensors a `flash.load_kv` reads.
def Flash_KVOperand : I32EnumAttr<"KVOperand", "key or value", [
    I32EnumAttrCase<"Key", 0, "key">,
    I32EnumAttrCase<"Value", 1, "value">,
  ]> {
  let cppNamespace = "::flashc::flash";
}

// Which query-side tensor of the forward a `flash.load_rows` reads in the
// backward pass (both [B, H, N, D] in the kernel's element type).
def Flash_RowOperand : I32EnumAttr<"RowOperand", "a [B, H, N, D] tensor of the backward", [
    I32EnumAttrCase<"Output", 0, "output">,
    I32EnumAttrCase<"OutputGrad", 1, "output_grad">,
  ]> {
  let cppNamespace = "::flashc::flash";
}

// Per-row f32 statistics the backward pass reads ([B, H, N]): the forward's
// log-sum-exp and Δ = rowsum(dO ∘ O) from the preprocess.
def Flash_RowStat : I32EnumAttr<"RowStat", "a per-row statistic of the backward", [
    I32EnumAttrCase<"Lse", 0, "lse">,
    I32EnumAttrCase<"Delta", 1, "delta">,
  ]> {
  let cppNamespace = "::flashc::flash";
}

// The tensor-core instructions of a lowered kernel's GEMMs.
def Flash_GemmKind : I32EnumAttr<"GemmKind", "GEMM instruction family", [
    I32EnumAttrCase<"MmaSync", 0, "mma.sync">,
    I32EnumAttrCase<"Wgmma", 1, "wgmma">,
  ]> {
  let cppNamespace = "::flashc::flash";
}

// How a lowered kernel's CTAs map to query tiles.
def Flash_GridKind : I32EnumAttr<"GridKind", "launch grid of a lowered kernel", [
    // (ceil(N / block_rows), H, B): one CTA per query tile.
    I32EnumAttrCase<"PerTile", 0, "per_tile">,
    // (min(tiles, CTAs resident at once), 1, 1): each CTA loops over tiles.
    I32EnumAttrCase<"Persistent", 1, "persistent">,
    // (ceil(M / block_cols), HKV, B): one CTA per key block, a warp per 16
    // of its keys (the backward's main kernel).
    I32EnumAttrCase<"PerKeyTile", 2, "per_key_tile">,
    // (ceil(N / block_rows), H, B) with threads independent of the rows (the
    // backward's preprocess and dQ conversion).
    I32EnumAttrCase<"PerRowTile", 3, "per_row_tile">,
    // (ceil(ceil(M / block_cols) / warps), ceil(N / block_rows), batches x
    // heads of the summary): one CTA per query tile and `warps` key blocks,
    // the kernel computing a forward kernel's block summary.
    I32EnumAttrCase<"BlockSummary", 4, "block_summary">,
    // (ceil(N / block_rows) · S, H, B): one CTA per query tile and key split
    // (a split_keys kernel; the launch picks S and passes it).
    I32EnumAttrCase<"PerSplitTile", 5, "per_split_tile">,
    // (ceil(B · H · N / rows per CTA), 1, 1) with threads independent of the
    // tile: a split_keys kernel's combine step, a warp per row of O.
    I32EnumAttrCase<"SplitCombine", 6, "split_combine">,
  ]> {
  let cppNamespace = "::flashc::flash";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Flash_TileConfigAttr : Flash_Attr<"TileConfig", "tile"> {
  let summary = "Tile shape of one program: Br query rows, Bc key rows, D";
  let description = [{
    `#flash.tile<br = 64, bc = 64, head_dim = 128>`: each program owns `br`
    query rows and streams key blocks of `bc` rows; `head_dim` is D. Every
    tile type in the kernel body is derived from these three numbers.
  }];
  let parameters = (ins "int64_t":$br, "int64_t":$bc, "int64_t":$headDim);
  let assemblyFormat = "`<` `br` `=` $br `,` `bc` `=` $bc `,` `head_dim` `=` $headDim `>`";
  let genVerifyDecl = 1;
}

def Flash_ParamAttr : Flash_Attr<"Param", "param"> {
  let summary = "A runtime scalar parameter and its default";
  let description = [{
    `#flash.param<"window" = 1024 : i32>`: a scalar the launch may set; the
    default is used when it does not. Only i32 and f32 parameters exist.
  }];
  let parameters = (ins "::mlir::StringAttr":$name, "::mlir::TypedAttr":$defaultValue);
  let assemblyFormat = "`<` $name `=` $defaultValue `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    ::mlir::Type getType() const { return getDefaultValue().getType(); }
  }];
}

def Flash_AuxTensorAttr : Flash_Attr<"AuxTensor", "aux_tensor"> {
  let summary = "An auxiliary input tensor read by masks and score mods";
  let description = [{
    `#flash.aux_tensor<"doc" : i32 [batch, query_len]>`: per-token document
    ids, per-head slopes, per-batch lengths. Each extent is a problem
    dimension or a fixed size (`[heads, 8]`). Reads outside the tensor give 0.
  }];
  let parameters = (ins "::mlir::StringAttr":$name, "::mlir::Type":$elementType,
                        ArrayRefParameter<"int64_t">:$extents);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Extents are encoded as `size >= 1` (fixed) or `-1 - role` (a
    /// DimRole), so one int64 carries both cases.
    static int64_t encodeRole(DimRole role) { return -1 - static_cast<int64_t>(role); }
    static bool isRole(int64_t extent) { return extent < 0; }
    static DimRole decodeRole(int64_t extent) { return static_cast<DimRole>(-1 - extent); }
    int64_t getRank() const { return getExtents().size(); }
  }];
}

def Flash_BlockSummaryAttr : Flash_Attr<"BlockSummary", "block_summary"> {
  let summary = "The run-time block summary a kernel's mask reads";
  let description = [{
    `#flash.block_summary<per_batch = true, per_head = false>` on a
    flash.kernel whose mask reads aux tensors: before the kernel, a summary
    pass classifies every (query tile, key block) of the kernel's Br x Bc
    tiling as empty (0), partial (1) or full (2) by evaluating the mask over
    the tile's elements inside the problem (i < N, j < M), and
    `flash.block_class` reads the class. The summary is one byte per
    (b, h, qt, kt), dense row-major over [B or 1, H or 1, ceil(N / Br),
    ceil(M / Bc)]: a mask that reads neither b nor h has one summary that
    serves every batch entry and head.
  }];
  let parameters = (ins "bool":$per_batch, "bool":$per_head);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Flash_PagedKVAttr : Flash_Attr<"PagedKV", "paged_kv"> {
  let summary = "K and V live in a paged cache addressed by a block table";
  let description = [{
    `#flash.paged_kv<page = 16, table = "block_table", lengths = "kv_len">`
    on a flash.kernel: K and V are caches of `page`-key pages, [pages, page,
    HKV, D] each (vLLM's layout), and key j of sequence b is row j % page
    of page table[b, j / page]. The launch passes the table (i32 [B,
    blocks]), the lengths (i32 [B]), the table's row length and the number
    of pages; sequence b has min(lengths[b], M) keys, and inside the kernel
    instance of batch entry b `flash.dim key_len` is that count, so the key
    loop, the key bounds and the masks see each sequence's own length. The
    names are the inputs' names in the kernel's ABI.
  }];
  let parameters = (ins "int64_t":$page, "::mlir::StringAttr":$table,
                        "::mlir::StringAttr":$lengths);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Flash_VarlenAttr : Flash_Attr<"Varlen", "varlen"> {
  let summary = "A packed batch of ragged sequences (cu_seqlens)";
  let description = [{
    `#flash.varlen<queries = "cu_q", keys = "cu_k">` on a flash.kernel:
    FlashAttention-2's varlen convention. Where `queries` names offsets
    (i32 [B + 1]), sequence b's queries are rows queries[b] to
    queries[b + 1] - 1 of token-major [total, H, D] tensors q and o, its
    LSE is f32 [H, total], and inside its kernel instances `flash.dim
    query_len` is that count (at most the launch's N, the longest); `keys`
    does the same for k, v and `flash.dim key_len`. An empty name leaves
    that side dense (or, for the keys, in a paged cache). The names are the
    offsets' names in the kernel's ABI.
  }];
  let parameters = (ins "::mlir::StringAttr":$queries, "::mlir::StringAttr":$keys);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Flash_LaunchAttr : Flash_Attr<"Launch", "launch"> {
  let summary = "What a launcher needs to know about one lowered kernel";
  let description = [{
    Written by the GPU lowerings (flash-to-sm80, flash-to-sm90) for every
    kernel they emit, as the value of its entry in the `flashc.launch`
    dictionary of `gpu.module @flashc_kernels`; read back by PTX emission
    (flashc/Target/NVPTX/EmitPTX.h, `readLaunchInfo`) into the kernel
    package's manifest.

    ```
    #flash.launch<gemm = wgmma, grid = persistent, threads_per_block = 384,
                  dynamic_shared_bytes = 99360, block_rows = 128,
                  block_cols = 128, head_dim = 128, num_warps = 12,
                  rows_per_warp = 16, element_type = bf16, tensor_maps = 3,
                  params = ["window"], param_types = [i32], tensors = []>
    ```

    The grid is `(ceil(N / block_rows), H, B)` per tile (or per row tile),
    `(min(tiles, CTAs resident at once), 1, 1)` when persistent, and
    `(ceil(M / block_cols) · column_slices, HKV, B)` per key tile (a
    backward main kernel whose dK and dV do not fit in registers at once
    splits D into `column_slices` ranges, one CTA each; printed only when
    above 1); the block is `(threads_per_block, 1, 1)`. `tensor_maps` CUtensorMaps follow the
    aux tensor pointers in the ABI (2: k and v; 3: q, k and v, which only a
    persistent grid takes). `params` and `param_types` name the run-time
    scalars in ABI order, `tensors` the aux tensors.
  }];
  let parameters = (ins
    EnumParameter<Flash_GemmKind>:$gemm,
    EnumParameter<Flash_GridKind>:$grid,
    "int64_t":$threads_per_block,
    "int64_t":$dynamic_shared_bytes,
    "int64_t":$block_rows,
    "int64_t":$block_cols,
    "int64_t":$head_dim,
    "int64_t":$num_warps,
    "int64_t":$rows_per_warp,
    "::mlir::Type":$element_type,
    "int64_t":$tensor_maps,
    "::mlir::ArrayAttr":$params,
    "::mlir::ArrayAttr":$param_types,
    "::mlir::ArrayAttr":$tensors,
    DefaultValuedParameter<"int64_t", "1">:$column_slices
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // FLASH_ATTRS_TD
