//===- Elementwise.cpp - Score mods, masks, aux loads, math ----------------===//
//
// flash.score_mod and flash.mask regions are cloned once per score element
// a thread holds (Bc/4 · 2 per tile), with (b, h, i, j) computed from the
// fragment coordinates: i = qt·Br + warp·16 + g (+8), j = kt·Bc + 8·nt + 2t
// (+1) (a packed_heads kernel maps the row to its own h and i once per CTA:
// KernelEmitter::queryRow). LLVM's CSE merges what only depends on (b, h, i).
//
// A mask `classified(%all_visible, %any_visible)` (flash-classify-tiles)
// skips the predicate on tiles it fully shows (one uniform scf.if); its
// any_visible decides which key blocks are skipped (KeyLoop.cpp).
//
// Math ops are expanded to PTX approximations so that no libdevice call is
// left in the kernel (accuracy relative to the interpreter's libm):
//   exp(x)  = ex2.approx.ftz(x·log2 e)      ~2 ulp + rounding of x·log2 e
//   exp2(x) = ex2.approx.ftz(x)              ~2 ulp (denormal results -> 0)
//   log(x)  = lg2.approx.ftz(x)·ln 2         abs. error ~2^-22
//   log2(x) = lg2.approx.ftz(x)
//   tanh(x) = sign(x)·(1 - 2/(exp2(2|x|·log2 e) + 1)), and an odd Taylor
//             polynomial for |x| < 2^-4; abs. error ~1e-7
//   sqrt    = sqrt.rn.f32 (exact), rsqrt = 1/sqrt.rn (div.rn)
//
//===----------------------------------------------------------------------===//

#include "flashc/Conversion/FlashToNVVM/KernelEmitter.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace flashc;
using namespace flashc::lowering;

static constexpr double kLog2E = 1.4426950408889634;
static constexpr double kLn2 = 0.6931471805599453;

Value KernelEmitter::fullTileFact(flash::MaskOp mask) {
  Value allVisible = mask.getAllVisible();
  if (unmasksSummaryFullTiles())
    return allVisible;
  // flash-classify-tiles writes `intervals | (block_class == full)`: keep
  // the intervals' part.
  auto either = allVisible.getDefiningOp<arith::OrIOp>();
  auto isFull = either ? either.getRhs().getDefiningOp<arith::CmpIOp>() : arith::CmpIOp();
  if (isFull && isFull.getLhs().getDefiningOp<flash::BlockClassOp>())
    return either.getLhs();
  return allVisible;
}

LogicalResult KernelEmitter::lowerElementRegion(Operation *op, bool isMask) {
  Value scoresValue = op->getOperand(0);
  auto scoresIt = tiles.find(scoresValue);
  if (scoresIt == tiles.end() || scoresIt->second.kind != TileValue::Kind::Accum)
    return error(op, "expects a score tile held in registers");
  Value batch = lookupScalar(op->getOperand(1)), head = lookupScalar(op->getOperand(2)),
        queryTile = lookupScalar(op->getOperand(3)), keyTile = lookupScalar(op->getOperand(4));
  if (!batch || !head || !queryTile || !keyTile)
    return error(op, "unknown (b, h, qt, kt) operands");
  const TileValue &scores = scoresIt->second;
  TileValue result = scores;
  // A classified mask is the identity on a tile it fully shows: one uniform
  // branch around the per-element predicate.
  scf::IfOp fullTile;
  auto mask = dyn_cast<flash::MaskOp>(op);
  if (isMask && mask && mask.isClassified()) {
    Value allVisible = lookupScalar(fullTileFact(mask));
    if (!allVisible)
      return error(op, "unknown all_visible operand");
    SmallVector<Type> types(scores.regs.size(), b.getF32Type());
    fullTile = scf::IfOp::create(b, loc, types, allVisible, /*withElseRegion=*/true);
    b.setInsertionPointToStart(fullTile.thenBlock());
    scf::YieldOp::create(b, loc, scores.regs);
    b.setInsertionPointToStart(fullTile.elseBlock());
  }
  Value firstKey = mul(keyTile, i32(scores.cols));
  Value negInf = f32(-std::numeric_limits<double>::infinity());
  int64_t nTiles = scores.cols / 8;
  // A mask's loads at the key (doc[b, j] on a partial tile) are predicated
  // (EmitterCore::beginColumnLoads) where predicatesMaskKeyLoads(); score
  // mods keep the clamped form (predicated, their loads at every element
  // took 50 more registers at D = 64).
  Block &region = op->getRegion(0).front();
  bool predicated =
      isMask && predicatesMaskKeyLoads() && regionLoadsAt(op, region.getArgument(3));
  if (predicated)
    beginColumnLoads(region.getArgument(0), firstKey);
  auto end = llvm::make_scope_exit([&] { endColumnLoads(); });
  for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
    for (int64_t nt = 0; nt < nTiles; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        Value &element = result.regs[(mb * nTiles + nt) * 4 + e];
        SmallVector<Value, 1> leading;
        if (!isMask)
          leading.push_back(element);
        QueryRow row = queryRow(head, queryTile, mb, e);
        Value key = predicated ? columnIndex(8 * nt + (e & 1))
                               : add(firstKey, fragmentCol(nt, e));
        FailureOr<Value> yielded =
            emitRegionElement(op, leading, batch, row.head, row.position, key);
        if (failed(yielded))
          return failure();
        element = isMask ? select(*yielded, element, negInf) : *yielded;
      }
  if (fullTile) {
    scf::YieldOp::create(b, loc, result.regs);
    b.setInsertionPointAfter(fullTile);
    result.regs.assign(fullTile.getResults().begin(), fullTile.getResults().end());
  }
  tiles[op->getResult(0)] = std::move(result);
  return success();
}

LogicalResult KernelEmitter::lowerMaskKeyBounds(flash::MaskKeyBoundsOp op) {
  auto scoresIt = tiles.find(op.getScores());
  if (scoresIt == tiles.end() || scoresIt->second.kind != TileValue::Kind::Accum)
    return error(op, "expects a score tile held in registers");
  Value keyTile = lookupScalar(op.getKeyTile()), length = lookupScalar(op.getKeyLen());
  if (!keyTile || !length)
    return error(op, "unknown key tile or key length");
  const TileValue &scores = scoresIt->second;
  Value firstKey = mul(keyTile, i32(scores.cols));
  // Only a block that runs past the key length pays for the selects; the
  // condition is uniform across the block, so the branch never diverges.
  Value partial = cmpI(arith::CmpIPredicate::sgt, add(firstKey, i32(scores.cols)), length);
  SmallVector<Type> types(scores.regs.size(), b.getF32Type());
  auto branch = scf::IfOp::create(b, loc, types, partial, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Value negInf = f32(-std::numeric_limits<double>::infinity());
    SmallVector<Value> masked;
    int64_t nTiles = scores.cols / 8;
    for (int64_t mb = 0; mb < config.rowBlocks(); ++mb)
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t e = 0; e < 4; ++e) {
          Value key = add(firstKey, fragmentCol(nt, e));
          masked.push_back(select(cmpI(arith::CmpIPredicate::slt, key, length),
                                  scores.regs[(mb * nTiles + nt) * 4 + e], negInf));
        }
    scf::YieldOp::create(b, loc, masked);
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, scores.regs);
  }
  TileValue result = scores;
  result.regs.assign(branch.getResults().begin(), branch.getResults().end());
  tiles[op.getResult()] = std::move(result);
  return success();
}

void EmitterCore::beginColumnLoads(Value batchArgument, Value firstColumn) {
  batchArgumentInside = batchArgument;
  columnBase = add(firstColumn, mul(threadInGroup, i32(2)));
  wideColumnBase = toI64(columnBase);
}

void EmitterCore::endColumnLoads() {
  batchArgumentInside = columnBase = wideColumnBase = Value();
  wideColumns.clear();
}

Value EmitterCore::columnIndex(int64_t column) {
  assert(columnBase && "columnIndex outside beginColumnLoads");
  Value index = add(columnBase, i32(column));
  wideColumns[index] =
      arith::AddIOp::create(b, loc, wideColumnBase, i64(column), arith::IntegerOverflowFlags::nsw);
  return index;
}

bool EmitterCore::regionLoadsAt(Operation *op, Value argument) {
  bool found = false;
  op->getRegion(0).walk([&](flash::AuxLoadOp load) {
    found |= llvm::is_contained(load.getIndices(), argument);
  });
  return found;
}

LogicalResult EmitterCore::auxElementIndex(Operation *op, flash::AuxTensorAttr decl,
                                           ArrayRef<Value> indices, Value &valid,
                                           Value &linear, ArrayRef<bool> knownInside) {
  if (static_cast<int64_t>(indices.size()) != decl.getRank())
    return error(op, "index count does not match the tensor's rank");
  // Dense row-major; any index outside the tensor reads 0.
  valid = Value();
  linear = i64(0);
  for (auto [k, position, extent] : llvm::enumerate(indices, decl.getExtents())) {
    Value size = flash::AuxTensorAttr::isRole(extent)
                     ? launchSizeOf(flash::AuxTensorAttr::decodeRole(extent))
                     : i32(extent);
    if (k >= knownInside.size() || !knownInside[k]) {
      // One unsigned compare checks 0 <= position < size.
      Value inside = cmpI(arith::CmpIPredicate::ult, position, size);
      valid = valid ? Value(arith::AndIOp::create(b, loc, valid, inside)) : inside;
    }
    Value wide = wideColumns.lookup(position);
    linear = add(mul(linear, toI64(size)), wide ? wide : toI64(position));
  }
  return success();
}

FailureOr<Value> EmitterCore::lowerAuxLoad(flash::AuxLoadOp op) {
  SmallVector<Value> indices;
  SmallVector<bool> knownInside;
  flash::AuxTensorAttr decl = signature.lookupTensor(op.getTensor());
  for (auto [k, index] : llvm::enumerate(op.getIndices())) {
    indices.push_back(lookupScalar(index));
    bool batchExtent = decl && k < decl.getExtents().size() &&
                       decl.getExtents()[k] == flash::AuxTensorAttr::encodeRole(flash::DimRole::Batch);
    knownInside.push_back(batchArgumentInside && index == batchArgumentInside && batchExtent);
  }
  return lowerAuxLoadAt(op, indices, knownInside);
}

FailureOr<Value> EmitterCore::lowerAuxLoadAt(flash::AuxLoadOp op, ArrayRef<Value> indices,
                                             ArrayRef<bool> knownInside) {
  flash::AuxTensorAttr decl = signature.lookupTensor(op.getTensor());
  Value pointer = auxPointers.lookup(op.getTensor());
  if (!decl || !pointer)
    return error(op, "unknown aux tensor '") << op.getTensor() << "'";
  Value valid, linear;
  if (failed(auxElementIndex(op, decl, indices, valid, linear, knownInside)))
    return failure();
  Type elementType = decl.getElementType();
  Type resultType = op.getType();
  if (elementType != resultType && (!resultType.isF32() || !isa<FloatType>(elementType)))
    return error(op, "aux tensor element type does not convert to the result type");
  auto converted = [&](Value loaded) -> Value {
    return elementType == resultType ? loaded
                                     : Value(LLVM::FPExtOp::create(b, loc, resultType, loaded));
  };
  unsigned alignment = elementType.getIntOrFloatBitWidth() / 8;
  // At a tile's column inside beginColumnLoads(): a load under its
  // predicate (0 outside) at the unclamped address.
  bool atColumn = llvm::any_of(indices, [&](Value index) { return wideColumns.contains(index); });
  if (valid && atColumn) {
    auto vectorOf = [](Type element) { return VectorType::get({1}, element); };
    Value first = i32(0);
    Value mask = LLVM::InsertElementOp::create(
        b, loc, LLVM::PoisonOp::create(b, loc, vectorOf(b.getI1Type())), valid, first);
    Value zeros = LLVM::ZeroOp::create(b, loc, vectorOf(elementType));
    Value lane = LLVM::MaskedLoadOp::create(b, loc, vectorOf(elementType),
                                            gepElements(pointer, linear, elementType), mask,
                                            zeros, b.getI32IntegerAttr(alignment), UnitAttr());
    return converted(LLVM::ExtractElementOp::create(b, loc, lane, first));
  }
  Value address = gepElements(pointer, valid ? select(valid, linear, i64(0)) : linear, elementType);
  Value loaded = converted(LLVM::LoadOp::create(b, loc, elementType, address, alignment,
                                                /*isVolatile=*/false, /*isNonTemporal=*/false,
                                                /*isInvariant=*/true));
  if (!valid)
    return loaded;
  Value zero = resultType.isF32() ? f32(0.0) : i32(0);
  return select(valid, loaded, zero);
}

FailureOr<Value> EmitterCore::lowerMathOp(Operation *op) {
  Value x = lookupScalar(op->getOperand(0));
  Type type = op->getResult(0).getType();
  if (!type.isF32() && !isa<math::AbsIOp>(op))
    return error(op, "math ops are supported on f32 only");
  return llvm::TypeSwitch<Operation *, FailureOr<Value>>(op)
      .Case([&](math::ExpOp) { return exp2Approx(fmul(x, f32(kLog2E))); })
      .Case([&](math::Exp2Op) { return exp2Approx(x); })
      .Case([&](math::LogOp) { return fmul(log2Approx(x), f32(kLn2)); })
      .Case([&](math::Log2Op) { return log2Approx(x); })
      .Case([&](math::SqrtOp) -> Value { return LLVM::SqrtOp::create(b, loc, x); })
      .Case([&](math::RsqrtOp) -> Value {
        return arith::DivFOp::create(b, loc, f32(1.0), LLVM::SqrtOp::create(b, loc, x));
      })
      .Case([&](math::AbsFOp) -> Value { return LLVM::FAbsOp::create(b, loc, x); })
      .Case([&](math::AbsIOp) -> Value {
        return LLVM::AbsOp::create(b, loc, x.getType(), x, /*is_int_min_poison=*/false);
      })
      .Case([&](math::TanhOp) -> Value {
        Value magnitude = LLVM::FAbsOp::create(b, loc, x);
        // 1 - 2/(e^{2|x|} + 1): e^{2|x|} -> inf gives 1, never NaN.
        Value e2x = exp2Approx(fmul(magnitude, f32(2.0 * kLog2E)));
        Value large = arith::SubFOp::create(
            b, loc, f32(1.0),
            arith::DivFOp::create(b, loc, f32(2.0), fadd(e2x, f32(1.0))));
        // |x| < 2^-4: x - x^3/3 + 2x^5/15 (next term 17x^7/315 < 1e-10).
        Value x2 = fmul(magnitude, magnitude);
        Value poly = fma(x2, f32(2.0 / 15.0), f32(-1.0 / 3.0));
        poly = fma(poly, x2, f32(1.0));
        Value small = fmul(poly, magnitude);
        Value isSmall =
            arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, magnitude, f32(0.0625));
        Value tanhAbs = select(isSmall, small, large);
        return LLVM::CopySignOp::create(b, loc, tanhAbs, x);
      })
      .Default([&](Operation *other) -> FailureOr<Value> {
        return error(other, "unsupported math operation");
      });
}
