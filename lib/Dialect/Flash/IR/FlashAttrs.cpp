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
