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

#endif // FLASH_ATTRS_TD
