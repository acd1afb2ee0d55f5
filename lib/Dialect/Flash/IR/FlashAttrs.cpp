//===- FlashAttrs.cpp - Attributes of the flash dialect -------------------===//

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace flashc::flash;

#include "flashc/Dialect/Flash/IR/FlashEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "flashc/Dialect/Flash/IR/FlashAttrs.cpp.inc"

void FlashDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "flashc/Dialect/Flash/IR/FlashAttrs.cpp.inc"
      >();
}

LogicalResult
TileConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t br, int64_t bc, int64_t headDim) {
  if (br <= 0 || bc <= 0 || headDim <= 0)
    return emitError() << "tile sizes must be positive, got br = " << br
                       << ", bc = " << bc << ", head_dim = " << headDim;
  return success();
}

LogicalResult ParamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringAttr name, TypedAttr defaultValue) {
  if (!name || name.getValue().empty())
    return emitError() << "parameter needs a name";
  Type type = defaultValue.getType();
  if (!(isa<IntegerAttr>(defaultValue) && type.isSignlessInteger(32)) &&
      !(isa<FloatAttr>(defaultValue) && type.isF32()))
    return emitError() << "parameter '" << name.getValue()
                       << "' must have an i32 or f32 default, got " << type;
  return success();
}

LogicalResult PagedKVAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t page,
                                  StringAttr table, StringAttr lengths) {
  // The front end's bound: page indices times the page stay in 32 bits.
  if (page < 1 || page > 4096)
    return emitError() << "page of " << page << " keys is out of range (1 to 4096)";
  if (!table || table.getValue().empty() || !lengths || lengths.getValue().empty())
    return emitError() << "the block table and the lengths need names";
  if (table == lengths)
    return emitError() << "the block table and the lengths need two names";
  return success();
}

LogicalResult VarlenAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringAttr queries, StringAttr keys) {
  bool packsQueries = queries && !queries.getValue().empty();
  bool packsKeys = keys && !keys.getValue().empty();
  if (!packsQueries && !packsKeys)
    return emitError() << "a varlen batch packs the queries, the keys or both: name their offsets";
  return success();
}

LogicalResult AuxTensorAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    StringAttr name, Type elementType,
                                    ArrayRef<int64_t> extents) {
  if (!name || name.getValue().empty())
    return emitError() << "aux tensor needs a name";
  if (!elementType.isSignlessInteger(32) && !elementType.isF32() &&
      !elementType.isBF16() && !elementType.isF16())
    return emitError() << "aux tensor '" << name.getValue()
                       << "' has unsupported element type " << elementType;
  if (extents.empty() || extents.size() > 4)
    return emitError() << "aux tensor '" << name.getValue()
                       << "' must have rank 1 to 4, got " << extents.size();
  for (int64_t extent : extents) {
    if (extent == 0 || (isRole(extent) && -1 - extent >= kNumDimRoles))
      return emitError() << "aux tensor '" << name.getValue()
                         << "' has an invalid extent " << extent;
  }
  return success();
}

// #flash.aux_tensor<"doc" : i32 [batch, query_len]>
Attribute AuxTensorAttr::parse(AsmParser &parser, Type) {
  std::string name;
  Type elementType;
  if (parser.parseLess() || parser.parseString(&name) || parser.parseColon() ||
      parser.parseType(elementType))
    return {};
  SmallVector<int64_t> extents;
  auto parseExtent = [&]() -> ParseResult {
    int64_t size;
    OptionalParseResult sizeResult = parser.parseOptionalInteger(size);
    if (sizeResult.has_value()) {
      if (failed(*sizeResult))
        return failure();
      if (size < 1)
        return parser.emitError(parser.getCurrentLocation(),
                                "fixed extents must be positive");
      extents.push_back(size);
      return success();
    }
    StringRef keyword;
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword))
      return failure();
    std::optional<DimRole> role = symbolizeDimRole(keyword);
    if (!role)
      return parser.emitError(loc, "expected a dimension role or a size, got '")
             << keyword << "'";
    extents.push_back(encodeRole(*role));
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseExtent) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<AuxTensorAttr>(
      parser.getContext(), StringAttr::get(parser.getContext(), name),
      elementType, extents);
}

void AuxTensorAttr::print(AsmPrinter &printer) const {
  printer << "<\"" << getName().getValue() << "\" : " << getElementType()
          << " [";
  llvm::interleaveComma(getExtents(), printer, [&](int64_t extent) {
    if (isRole(extent))
      printer << stringifyDimRole(decodeRole(extent));
    else
      printer << extent;
  });
  printer << "]>";
}

LogicalResult LaunchAttr::verify(function_ref<InFlightDiagnostic()> emitError, GemmKind gemm,
                                 GridKind grid, int64_t threadsPerBlock,
                                 int64_t dynamicSharedBytes, int64_t blockRows,
                                 int64_t blockCols, int64_t headDim, int64_t numWarps,
                                 int64_t rowsPerWarp, Type elementType, int64_t tensorMaps,
                                 ArrayAttr params, ArrayAttr paramTypes, ArrayAttr tensors,
                                 int64_t columnSlices) {
  if (columnSlices < 1 || headDim % columnSlices)
    return emitError() << "column_slices = " << columnSlices << " must be positive and divide "
                       << "head_dim = " << headDim;
  if (columnSlices != 1 && grid != GridKind::PerKeyTile)
    return emitError() << "only a per-key-tile kernel splits D into column slices, got grid = "
                       << stringifyGridKind(grid) << " with column_slices = " << columnSlices;
  if (blockRows <= 0 || blockCols <= 0 || headDim <= 0)
    return emitError() << "tile sizes must be positive, got block_rows = " << blockRows
                       << ", block_cols = " << blockCols << ", head_dim = " << headDim;
  if (rowsPerWarp != 16 && rowsPerWarp != 32)
    return emitError() << "rows_per_warp must be 16 or 32, got " << rowsPerWarp;
  if (numWarps <= 0 || threadsPerBlock != 32 * numWarps)
    return emitError() << "threads_per_block = " << threadsPerBlock << " must be 32 x num_warps ("
                       << numWarps << ")";
  if (threadsPerBlock > 1024)
    return emitError() << "threads_per_block = " << threadsPerBlock
                       << " is more than a block can have (1024)";
  // Every warp owns rows_per_warp query rows of the tile; a warp-specialized
  // wgmma kernel adds one producer warpgroup (4 warps) that owns none. A
  // per-key-tile kernel has a warp per rows_per_warp keys; the threads of a
  // per-row-tile or block-summary kernel do not follow the rows.
  int64_t owned = grid == GridKind::PerKeyTile ? blockCols : blockRows;
  int64_t computeWarps = owned / rowsPerWarp;
  bool rowsCovered = grid == GridKind::PerRowTile || grid == GridKind::BlockSummary ||
                     grid == GridKind::SplitCombine ||
                     (owned % rowsPerWarp == 0 &&
                      (numWarps == computeWarps ||
                       (gemm == GemmKind::Wgmma && numWarps == computeWarps + 4)));
  if (!rowsCovered)
    return emitError() << "num_warps = " << numWarps << " does not cover "
                       << (grid == GridKind::PerKeyTile ? "block_cols = " : "block_rows = ")
                       << owned << " at " << rowsPerWarp << " rows per warp";
  if (dynamicSharedBytes < 0)
    return emitError() << "dynamic_shared_bytes must not be negative";
  if (!elementType || (!elementType.isBF16() && !elementType.isF16()))
    return emitError() << "element_type must be bf16 or f16, got " << elementType;
  if (tensorMaps != 0 && tensorMaps != 2 && tensorMaps != 3)
    return emitError() << "tensor_maps must be 0 (none), 2 (k, v) or 3 (q, k, v), got "
                       << tensorMaps;
  if (tensorMaps && gemm != GemmKind::Wgmma)
    return emitError() << "only the wgmma kernel takes tensor maps";
  if ((grid == GridKind::Persistent) != (tensorMaps == 3))
    return emitError() << "a persistent grid takes the tensor maps of q, k and v (3), and only "
                          "it does; got grid = "
                       << stringifyGridKind(grid) << " with tensor_maps = " << tensorMaps;
  if (!params || !paramTypes || !tensors)
    return emitError() << "params, param_types and tensors must be arrays";
  if (params.size() != paramTypes.size())
    return emitError() << params.size() << " params but " << paramTypes.size()
                       << " param_types";
  for (auto [name, type] : llvm::zip(params, paramTypes)) {
    auto typeAttr = dyn_cast<TypeAttr>(type);
    if (!isa<StringAttr>(name) || !typeAttr)
      return emitError() << "params must be strings and param_types types";
    if (!typeAttr.getValue().isSignlessInteger(32) && !typeAttr.getValue().isF32())
      return emitError() << "parameter " << name << " must be i32 or f32, got "
                         << typeAttr.getValue();
  }
  for (Attribute name : tensors)
    if (!isa<StringAttr>(name))
      return emitError() << "tensors must be names (strings), got " << name;
  return success();
}
