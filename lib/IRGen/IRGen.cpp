//===- IRGen.cpp - Lower checked .flash variants to flash IR --------------===//
//
// Each variant becomes one `flash.kernel` in the FlashAttention-2 form: load
// the query tile, stream key blocks through scf.for carrying (m, l, A), then
// finalize once and store. Score and mask expressions become the regions of
// flash.score_mod / flash.mask, one scalar op per expression node.
//
//===----------------------------------------------------------------------===//

#include "flashc/IRGen/IRGen.h"
#include "flashc/Frontend/Derivative.h"
#include "flashc/Frontend/Frontend.h"

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace flashc;
using namespace flashc::frontend;

namespace {

flash::DimRole toFlashRole(DimRole role) {
  return static_cast<flash::DimRole>(static_cast<int>(role));
}

Type toMLIRType(MLIRContext *ctx, ElementType type) {
  switch (type) {
  case ElementType::BF16:
    return BFloat16Type::get(ctx);
  case ElementType::F16:
    return Float16Type::get(ctx);
  case ElementType::F32:
    return Float32Type::get(ctx);
  case ElementType::I32:
    return IntegerType::get(ctx, 32);
  }
  llvm_unreachable("unknown element type");
}

/// Emits one kernel. Expressions are emitted into the region being built;
/// `regionArgs` maps s/b/h/i/j to its block arguments.
class KernelEmitter {
public:
  KernelEmitter(OpBuilder &builder, const Variant &variant,
                llvm::SourceMgr &sourceMgr, StringAttr fileName)
      : builder(builder), variant(variant), sourceMgr(sourceMgr),
        fileName(fileName) {}

  /// The forward kernel; `packHeads`: the query heads of a KV group share
  /// its tiles' rows (packed GQA); `splitKeys`: its key range may be split at run
  /// time (flash.kernel's split_keys).
  void emit(int64_t br, int64_t bc, int64_t headDim, bool splitKeys, bool packHeads);
  /// The backward kernel: `derivatives` of the variant's score (empty when
  /// it has none).
  void emitBackward(int64_t br, int64_t bc, int64_t headDim,
                    const ScoreDerivatives &derivatives);

private:
  Location loc(llvm::SMLoc smLoc) {
    if (!smLoc.isValid())
      return builder.getUnknownLoc();
    auto [line, col] = sourceMgr.getLineAndColumn(smLoc);
    return FileLineColLoc::get(fileName, line, col);
  }

  Value emitExpr(const Expr &expr);
  Value emitBinary(const Expr &expr);
  Value emitCall(const Expr &expr);
  /// Converts an i32 operand to f32 when the node computes in f32.
  Value promote(Value value, ScalarType to, Location at);
  Value intConstant(int64_t value, Location at) {
    return arith::ConstantIntOp::create(builder, at, value, 32);
  }
  Value floatConstant(double value, Location at) {
    return arith::ConstantOp::create(builder, at,
                                     builder.getF32FloatAttr(static_cast<float>(value)));
  }
  /// Emits the body of a score_mod (withScore) or mask region.
  void emitRegion(Operation *op, const Expr &expr, bool withScore);
  /// The variant's signature attributes, shared by both kernel ops.
  struct Signature {
    flash::TileConfigAttr config;
    TypeAttr elementType;
    ArrayAttr params, tensors;
    DenseI64ArrayAttr staticSizes, dimClasses;
  };
  Signature signature(int64_t br, int64_t bc, int64_t headDim);
  /// Creates the kernel op with the variant's signature attributes.
  flash::KernelOp createKernel(Location at, int64_t br, int64_t bc, int64_t headDim);
  /// The score, mod and mask of one (query tile, key block): the scaled
  /// scores (what a score mod reads) and the modified, masked ones ready for
  /// a softmax.
  struct Scores {
    Value scaled, masked;
  };
  Scores emitScores(Value q, Value k, Value b, Value h, Value qt, Value kt, Value keyLen,
                    double scale, int64_t br, int64_t bc);
  /// The score_mod_grad region: g·∂score/∂s, and g·∂score/∂t added into the
  /// gradient of each float aux tensor t the score reads.
  void emitScoreGradRegion(flash::ScoreModGradOp op, const ScoreDerivatives &derivatives);

  OpBuilder &builder;
  const Variant &variant;
  llvm::SourceMgr &sourceMgr;
  StringAttr fileName;
  // Region arguments in the order s, b, h, i, j (s absent in masks).
  Value score, batchIndex, headIndex, queryIndex, keyIndex;
};

Value KernelEmitter::promote(Value value, ScalarType to, Location at) {
  if (to == ScalarType::Float && value.getType().isInteger(32))
    return arith::SIToFPOp::create(builder, at, builder.getF32Type(), value);
  return value;
}

Value KernelEmitter::emitExpr(const Expr &expr) {
  Location at = loc(expr.loc);
  switch (expr.kind) {
  case ExprKind::IntLiteral:
    return intConstant(expr.intValue, at);
  case ExprKind::FloatLiteral:
    return floatConstant(expr.floatValue, at);
  case ExprKind::BoolLiteral:
    return arith::ConstantIntOp::create(builder, at, expr.boolValue ? 1 : 0, 1);
  case ExprKind::Score:
    return score;
  case ExprKind::Batch:
    return batchIndex;
  case ExprKind::Head:
    return headIndex;
  case ExprKind::Query:
    return queryIndex;
  case ExprKind::Key:
    return keyIndex;
  case ExprKind::Param: {
    const ParamDecl &param = variant.params[expr.declIndex];
    Type type = param.type == ScalarType::Int ? Type(builder.getI32Type())
                                              : Type(builder.getF32Type());
    return flash::ParamOp::create(builder, at, type, param.name);
  }
  case ExprKind::DimSize:
    return flash::DimOp::create(builder, at, builder.getI32Type(),
                                toFlashRole(expr.dimRole));
  case ExprKind::Unary: {
    Value operand = emitExpr(*expr.operands[0]);
    if (expr.unaryOp == UnaryOp::Not) {
      Value one = arith::ConstantIntOp::create(builder, at, 1, 1);
      return arith::XOrIOp::create(builder, at, operand, one);
    }
    if (expr.type == ScalarType::Float)
      return arith::NegFOp::create(builder, at, promote(operand, ScalarType::Float, at));
    return arith::SubIOp::create(builder, at, intConstant(0, at), operand);
  }
  case ExprKind::Binary:
    return emitBinary(expr);
  case ExprKind::Call:
    return emitCall(expr);
  case ExprKind::Index: {
    SmallVector<Value> indices;
    for (const auto &operand : expr.operands)
      indices.push_back(emitExpr(*operand));
    const TensorDecl &tensor = variant.tensors[expr.declIndex];
    Type type = tensor.elementType == ElementType::I32 ? Type(builder.getI32Type())
                                                       : Type(builder.getF32Type());
    return flash::AuxLoadOp::create(builder, at, type, tensor.name, indices);
  }
  }
  llvm_unreachable("unknown expression kind");
}

/// Integer `/` and `%` divide by (rhs == 0 ? 1 : rhs) and then select 0, so
/// division by zero gives 0 on every backend instead of undefined behaviour.
static Value emitSafeIntDivision(OpBuilder &builder, Location at, BinaryOp op,
                                 Value lhs, Value rhs) {
  Value zero = arith::ConstantIntOp::create(builder, at, 0, 32);
  Value one = arith::ConstantIntOp::create(builder, at, 1, 32);
  Value isZero = arith::CmpIOp::create(builder, at, arith::CmpIPredicate::eq, rhs, zero);
  Value divisor = arith::SelectOp::create(builder, at, isZero, one, rhs);
  Value result = op == BinaryOp::Div
                     ? Value(arith::DivSIOp::create(builder, at, lhs, divisor))
                     : Value(arith::RemSIOp::create(builder, at, lhs, divisor));
  return arith::SelectOp::create(builder, at, isZero, zero, result);
}

Value KernelEmitter::emitBinary(const Expr &expr) {
  Location at = loc(expr.loc);
  Value lhs = emitExpr(*expr.operands[0]);
  Value rhs = emitExpr(*expr.operands[1]);
  BinaryOp op = expr.binaryOp;

  if (op == BinaryOp::And)
    return arith::AndIOp::create(builder, at, lhs, rhs);
  if (op == BinaryOp::Or)
    return arith::OrIOp::create(builder, at, lhs, rhs);

  bool isComparison = op == BinaryOp::Lt || op == BinaryOp::Le || op == BinaryOp::Gt ||
                      op == BinaryOp::Ge || op == BinaryOp::Eq || op == BinaryOp::Ne;
  // The type operands compute in: the node's own type for arithmetic, the
  // promoted operand type for comparisons.
  bool inFloat = isComparison ? (expr.operands[0]->type == ScalarType::Float ||
                                 expr.operands[1]->type == ScalarType::Float)
                              : expr.type == ScalarType::Float;
  if (inFloat) {
    lhs = promote(lhs, ScalarType::Float, at);
    rhs = promote(rhs, ScalarType::Float, at);
  }

  if (isComparison) {
    if (inFloat) {
      // Ordered predicates (false on NaN), except != which is true on NaN.
      arith::CmpFPredicate predicate;
      switch (op) {
      case BinaryOp::Lt: predicate = arith::CmpFPredicate::OLT; break;
      case BinaryOp::Le: predicate = arith::CmpFPredicate::OLE; break;
      case BinaryOp::Gt: predicate = arith::CmpFPredicate::OGT; break;
      case BinaryOp::Ge: predicate = arith::CmpFPredicate::OGE; break;
      case BinaryOp::Eq: predicate = arith::CmpFPredicate::OEQ; break;
      default: predicate = arith::CmpFPredicate::UNE; break;
      }
      return arith::CmpFOp::create(builder, at, predicate, lhs, rhs);
    }
    arith::CmpIPredicate predicate;
    switch (op) {
    case BinaryOp::Lt: predicate = arith::CmpIPredicate::slt; break;
    case BinaryOp::Le: predicate = arith::CmpIPredicate::sle; break;
    case BinaryOp::Gt: predicate = arith::CmpIPredicate::sgt; break;
    case BinaryOp::Ge: predicate = arith::CmpIPredicate::sge; break;
    case BinaryOp::Eq: predicate = arith::CmpIPredicate::eq; break;
    default: predicate = arith::CmpIPredicate::ne; break;
    }
    return arith::CmpIOp::create(builder, at, predicate, lhs, rhs);
  }

  if (inFloat) {
    switch (op) {
    case BinaryOp::Add: return arith::AddFOp::create(builder, at, lhs, rhs);
    case BinaryOp::Sub: return arith::SubFOp::create(builder, at, lhs, rhs);
    case BinaryOp::Mul: return arith::MulFOp::create(builder, at, lhs, rhs);
    case BinaryOp::Div: return arith::DivFOp::create(builder, at, lhs, rhs);
    default: break;
    }
    llvm_unreachable("Sema allows only + - * / on floats");
  }
  switch (op) {
  case BinaryOp::Add: return arith::AddIOp::create(builder, at, lhs, rhs);
  case BinaryOp::Sub: return arith::SubIOp::create(builder, at, lhs, rhs);
  case BinaryOp::Mul: return arith::MulIOp::create(builder, at, lhs, rhs);
  case BinaryOp::Div:
  case BinaryOp::Mod:
    return emitSafeIntDivision(builder, at, op, lhs, rhs);
  default: break;
  }
  llvm_unreachable("unhandled binary operator");
}

Value KernelEmitter::emitCall(const Expr &expr) {
  Location at = loc(expr.loc);
  SmallVector<Value> args;
  for (const auto &operand : expr.operands)
    args.push_back(emitExpr(*operand));
  bool inFloat = expr.type == ScalarType::Float;
  switch (expr.builtin) {
  case Builtin::Min:
  case Builtin::Max: {
    Value a = promote(args[0], expr.type, at), b = promote(args[1], expr.type, at);
    bool isMin = expr.builtin == Builtin::Min;
    if (inFloat)
      return isMin ? Value(arith::MinNumFOp::create(builder, at, a, b))
                   : Value(arith::MaxNumFOp::create(builder, at, a, b));
    return isMin ? Value(arith::MinSIOp::create(builder, at, a, b))
                 : Value(arith::MaxSIOp::create(builder, at, a, b));
  }
  case Builtin::Abs:
    if (inFloat)
      return math::AbsFOp::create(builder, at, promote(args[0], expr.type, at));
    return math::AbsIOp::create(builder, at, args[0]);
  case Builtin::Exp:
    return math::ExpOp::create(builder, at, promote(args[0], ScalarType::Float, at));
  case Builtin::Log:
    return math::LogOp::create(builder, at, promote(args[0], ScalarType::Float, at));
  case Builtin::Tanh:
    return math::TanhOp::create(builder, at, promote(args[0], ScalarType::Float, at));
  case Builtin::Sqrt:
    return math::SqrtOp::create(builder, at, promote(args[0], ScalarType::Float, at));
  case Builtin::Select:
    return arith::SelectOp::create(builder, at, args[0],
                                   promote(args[1], expr.type, at),
                                   promote(args[2], expr.type, at));
  }
  llvm_unreachable("unknown builtin");
}

void KernelEmitter::emitRegion(Operation *op, const Expr &expr, bool withScore) {
  Region &region = op->getRegion(0);
  Block *block = builder.createBlock(&region);
  Type i32 = builder.getI32Type();
  Location at = loc(expr.loc);
  if (withScore)
    score = block->addArgument(builder.getF32Type(), at);
  batchIndex = block->addArgument(i32, at);
  headIndex = block->addArgument(i32, at);
  queryIndex = block->addArgument(i32, at);
  keyIndex = block->addArgument(i32, at);
  Value result = emitExpr(expr);
  if (withScore)
    result = promote(result, ScalarType::Float, at);
  flash::YieldOp::create(builder, at, result);
  builder.setInsertionPointAfter(op);
}

KernelEmitter::Signature KernelEmitter::signature(int64_t br, int64_t bc, int64_t headDim) {
  MLIRContext *ctx = builder.getContext();
  SmallVector<Attribute> params, tensors;
  for (const ParamDecl &param : variant.params) {
    TypedAttr value =
        param.type == ScalarType::Int
            ? TypedAttr(builder.getI32IntegerAttr(static_cast<int32_t>(param.defaultValue)))
            : TypedAttr(builder.getF32FloatAttr(static_cast<float>(param.defaultValue)));
    params.push_back(flash::ParamAttr::get(ctx, builder.getStringAttr(param.name), value));
  }
  for (const TensorDecl &tensor : variant.tensors) {
    SmallVector<int64_t> extents;
    for (const Dim &dim : tensor.shape) {
      if (dim.isFixed()) {
        extents.push_back(dim.value);
        continue;
      }
      // Sema resolved the symbol to a role; find it.
      for (int role = 0; role < flash::kNumDimRoles; ++role) {
        if (variant.dims[role].symbol == dim.symbol) {
          extents.push_back(flash::AuxTensorAttr::encodeRole(
              static_cast<flash::DimRole>(role)));
          break;
        }
      }
    }
    tensors.push_back(flash::AuxTensorAttr::get(
        ctx, builder.getStringAttr(tensor.name),
        toMLIRType(ctx, tensor.elementType), extents));
  }

  SmallVector<int64_t> staticSizes, classes;
  for (int role = 0; role < flash::kNumDimRoles; ++role) {
    const Dim &dim = variant.dims[role];
    staticSizes.push_back(dim.isFixed() ? dim.value : -1);
    int cls = role;
    for (int other = 0; other < role; ++other) {
      const Dim &earlier = variant.dims[other];
      if (!dim.isFixed() && !earlier.isFixed() && earlier.symbol == dim.symbol) {
        cls = other;
        break;
      }
    }
    classes.push_back(cls);
  }
  staticSizes[static_cast<int>(DimRole::HeadDim)] = headDim;

  return {flash::TileConfigAttr::get(ctx, br, bc, headDim),
          TypeAttr::get(toMLIRType(ctx, variant.q.elementType)),
          builder.getArrayAttr(params),
          builder.getArrayAttr(tensors),
          builder.getDenseI64ArrayAttr(staticSizes),
          builder.getDenseI64ArrayAttr(classes)};
}

flash::KernelOp KernelEmitter::createKernel(Location at, int64_t br, int64_t bc,
                                            int64_t headDim) {
  Signature sig = signature(br, bc, headDim);
  return flash::KernelOp::create(builder, at, builder.getStringAttr(variant.name), sig.config,
                                 sig.elementType, sig.params, sig.tensors, sig.staticSizes,
                                 sig.dimClasses, /*block_summary=*/nullptr,
                                 /*split_keys=*/nullptr, /*packed_heads=*/nullptr,
                                 /*paged_kv=*/nullptr, /*varlen=*/nullptr);
}

KernelEmitter::Scores KernelEmitter::emitScores(Value q, Value k, Value b, Value h, Value qt,
                                                Value kt, Value keyLen, double scale,
                                                int64_t br, int64_t bc) {
  Location at = loc(variant.loc);
  auto scoreTile = RankedTensorType::get({br, bc}, builder.getF32Type());
  Scores result;
  Value s = flash::QKDotOp::create(builder, at, scoreTile, q, k,
                                   builder.getF32FloatAttr(static_cast<float>(scale)));
  result.scaled = s;
  if (variant.score) {
    auto scoreMod = flash::ScoreModOp::create(builder, loc(variant.score->loc),
                                              scoreTile, s, b, h, qt, kt);
    emitRegion(scoreMod, *variant.score, /*withScore=*/true);
    s = scoreMod.getResult();
  }
  if (variant.mask) {
    auto mask = flash::MaskOp::create(builder, loc(variant.mask->loc), scoreTile, s,
                                      b, h, qt, kt, /*all_visible=*/Value(),
                                      /*any_visible=*/Value(), /*rows_visible=*/ValueRange());
    emitRegion(mask, *variant.mask, /*withScore=*/false);
    s = mask.getResult();
  }
  result.masked = flash::MaskKeyBoundsOp::create(builder, at, scoreTile, s, kt, keyLen);
  return result;
}

void KernelEmitter::emit(int64_t br, int64_t bc, int64_t headDim, bool splitKeys,
                         bool packHeads) {
  MLIRContext *ctx = builder.getContext();
  Location at = loc(variant.loc);
  Type element = toMLIRType(ctx, variant.q.elementType);
  Type f32 = builder.getF32Type();
  auto queryTile = RankedTensorType::get({br, headDim}, element);
  auto keyTile = RankedTensorType::get({bc, headDim}, element);
  auto scoreTile = RankedTensorType::get({br, bc}, f32);
  auto accTile = RankedTensorType::get({br, headDim}, f32);
  auto rowVector = RankedTensorType::get({br}, f32);

  flash::KernelOp kernel = createKernel(at, br, bc, headDim);

  OpBuilder::InsertionGuard guard(builder);
  Type index = builder.getIndexType();
  if (splitKeys)
    kernel.setSplitKeys(true);
  if (packHeads)
    kernel.setPackedHeads(true);
  SmallVector<Type> argTypes(splitKeys ? 4 : 3, index);
  SmallVector<Location> argLocs(argTypes.size(), at);
  Block *body = builder.createBlock(&kernel.getBody(), {}, argTypes, argLocs);
  Value b = body->getArgument(0), h = body->getArgument(1), qt = body->getArgument(2);
  Value split = splitKeys ? body->getArgument(3) : Value();

  Value q = flash::LoadQOp::create(builder, at, queryTile, b, h, qt);
  // A packed kernel's head argument is the KV head already.
  Value kvHead = packHeads ? h : flash::KVHeadOp::create(builder, at, builder.getIndexType(), h);
  Value keyLen = flash::DimOp::create(builder, at, index, flash::DimRole::KeyLen);
  Value c0 = arith::ConstantIndexOp::create(builder, at, 0);
  Value c1 = arith::ConstantIndexOp::create(builder, at, 1);
  Value cBc = arith::ConstantIndexOp::create(builder, at, bc);
  Value numKeyTiles = arith::CeilDivUIOp::create(builder, at, keyLen, cBc);
  auto splat = [&](RankedTensorType type, float value) -> Value {
    return arith::ConstantOp::create(
        builder, at, DenseElementsAttr::get(type, builder.getF32FloatAttr(value)));
  };
  Value m0 = splat(rowVector, -std::numeric_limits<float>::infinity());
  Value l0 = splat(rowVector, 0.0f);
  Value a0 = splat(accTile, 0.0f);

  double scale = evaluateScale(variant, headDim);
  Value firstKeyTile = c0, endKeyTile = numKeyTiles;
  if (splitKeys) {
    auto range = flash::SplitKeyRangeOp::create(builder, at, index, index, split, numKeyTiles);
    firstKeyTile = range.getLower();
    endKeyTile = range.getUpper();
  }
  auto loop = scf::ForOp::create(builder, at, firstKeyTile, endKeyTile, c1,
                                 ValueRange{m0, l0, a0});
  builder.setInsertionPointToStart(loop.getBody());
  Value kt = loop.getInductionVar();
  Value m = loop.getRegionIterArg(0), l = loop.getRegionIterArg(1),
        acc = loop.getRegionIterArg(2);
  Value k = flash::LoadKVOp::create(builder, at, keyTile, flash::KVOperand::Key, b, kvHead, kt);
  Value v = flash::LoadKVOp::create(builder, at, keyTile, flash::KVOperand::Value, b, kvHead, kt);
  Value s = emitScores(q, k, b, h, qt, kt, keyLen, scale, br, bc).masked;
  auto softmax = flash::OnlineSoftmaxOp::create(builder, at, rowVector, rowVector,
                                                scoreTile, rowVector, s, m, l,
                                                /*exp2_scale=*/FloatAttr());
  Value rescaled = flash::RescaleOp::create(builder, at, accTile, acc, softmax.getAlpha());
  Value accumulated = flash::PVAccumulateOp::create(builder, at, accTile, rescaled,
                                                    softmax.getProbs(), v);
  scf::YieldOp::create(builder, at,
                       ValueRange{softmax.getNewMax(), softmax.getNewSum(), accumulated});

  builder.setInsertionPointAfter(loop);
  auto finalize = flash::FinalizeOp::create(builder, at, accTile, rowVector,
                                            loop.getResult(2), loop.getResult(0),
                                            loop.getResult(1), builder.getF32FloatAttr(1.0f));
  flash::StoreOp::create(builder, at, finalize.getOutput(), finalize.getLse(), b, h, qt, split);
  flash::ReturnOp::create(builder, at);
}

/// Marks `kernel` (a flash.kernel or flash.backward_kernel) as reading a
/// run-time block summary when its mask reads aux tensors
/// (KernelOptions::blockSummary, KernelOptions::backwardBlockSummary).
template <typename KernelOpT>
void requestBlockSummary(KernelOpT kernel) {
  // Only a mask that reads aux tensors needs one: interval analysis alone
  // classifies the others (flash-classify-tiles).
  kernel.walk([&](flash::MaskOp mask) {
    if (mask.readsAuxTensors()) {
      Block &region = mask.getBody().front();
      kernel.setBlockSummaryAttr(flash::BlockSummaryAttr::get(
          kernel.getContext(), !region.getArgument(0).use_empty(),
          !region.getArgument(1).use_empty()));
    }
  });
}

void KernelEmitter::emitScoreGradRegion(flash::ScoreModGradOp op,
                                        const ScoreDerivatives &derivatives) {
  Location at = loc(variant.score->loc);
  Block *block = builder.createBlock(&op.getBody());
  Type i32 = builder.getI32Type(), f32 = builder.getF32Type();
  Value grad = block->addArgument(f32, at);
  score = block->addArgument(f32, at);
  batchIndex = block->addArgument(i32, at);
  headIndex = block->addArgument(i32, at);
  queryIndex = block->addArgument(i32, at);
  keyIndex = block->addArgument(i32, at);
  for (const ScoreDerivatives::TensorRead &read : derivatives.tensorReads) {
    SmallVector<Value> indices;
    for (const auto &operand : read.read->operands)
      indices.push_back(emitExpr(*operand));
    Value partial = promote(emitExpr(*read.partial), ScalarType::Float, at);
    Value contribution = arith::MulFOp::create(builder, loc(read.read->loc), grad, partial);
    flash::AuxGradAddOp::create(builder, loc(read.read->loc), read.read->name, indices,
                                contribution);
  }
  Value wrtScore = promote(emitExpr(*derivatives.wrtScore), ScalarType::Float, at);
  flash::YieldOp::create(builder, at, arith::MulFOp::create(builder, at, grad, wrtScore).getResult());
  builder.setInsertionPointAfter(op);
}

void KernelEmitter::emitBackward(int64_t br, int64_t bc, int64_t headDim,
                                 const ScoreDerivatives &derivatives) {
  MLIRContext *ctx = builder.getContext();
  Location at = loc(variant.loc);
  Type element = toMLIRType(ctx, variant.q.elementType);
  Type f32 = builder.getF32Type(), index = builder.getIndexType();
  auto queryTile = RankedTensorType::get({br, headDim}, element);
  auto keyTile = RankedTensorType::get({bc, headDim}, element);
  auto scoreTile = RankedTensorType::get({br, bc}, f32);
  auto keyAccTile = RankedTensorType::get({bc, headDim}, f32);
  auto rowVector = RankedTensorType::get({br}, f32);
  float scale = static_cast<float>(evaluateScale(variant, headDim));

  Signature sig = signature(br, bc, headDim);
  auto kernel = flash::BackwardKernelOp::create(
      builder, at, builder.getStringAttr(variant.name), sig.config, sig.elementType,
      sig.params, sig.tensors, sig.staticSizes, sig.dimClasses,
      /*block_summary=*/nullptr, /*ordered_query_grads=*/nullptr,
      /*query_grad_writer=*/nullptr);
  OpBuilder::InsertionGuard guard(builder);

  // preprocess(b, h, qt): Δ = rowsum(dO ∘ O).
  Block *pre = builder.createBlock(&kernel.getPreprocess(), {}, {index, index, index},
                                   {at, at, at});
  {
    Value b = pre->getArgument(0), h = pre->getArgument(1), qt = pre->getArgument(2);
    Value out = flash::LoadRowsOp::create(builder, at, queryTile, flash::RowOperand::Output,
                                          b, h, qt);
    Value outGrad = flash::LoadRowsOp::create(builder, at, queryTile,
                                              flash::RowOperand::OutputGrad, b, h, qt);
    Value delta = flash::RowDotOp::create(builder, at, rowVector, outGrad, out);
    flash::StoreDeltaOp::create(builder, at, delta, b, h, qt);
    flash::ReturnOp::create(builder, at);
  }

  // main(b, kv_head, kt): dK, dV of one key block over the query heads of
  // its group and all their query tiles.
  Block *body = builder.createBlock(&kernel.getBody(), {}, {index, index, index},
                                    {at, at, at});
  Value b = body->getArgument(0), kvHead = body->getArgument(1), kt = body->getArgument(2);
  Value k = flash::LoadKVOp::create(builder, at, keyTile, flash::KVOperand::Key, b, kvHead, kt);
  Value v = flash::LoadKVOp::create(builder, at, keyTile, flash::KVOperand::Value, b, kvHead, kt);
  Value heads = flash::DimOp::create(builder, at, index, flash::DimRole::Heads);
  Value kvHeads = flash::DimOp::create(builder, at, index, flash::DimRole::KVHeads);
  Value queryLen = flash::DimOp::create(builder, at, index, flash::DimRole::QueryLen);
  Value keyLen = flash::DimOp::create(builder, at, index, flash::DimRole::KeyLen);
  Value c0 = arith::ConstantIndexOp::create(builder, at, 0);
  Value c1 = arith::ConstantIndexOp::create(builder, at, 1);
  Value group = arith::DivUIOp::create(builder, at, heads, kvHeads);
  Value numQueryTiles = arith::CeilDivUIOp::create(
      builder, at, queryLen, arith::ConstantIndexOp::create(builder, at, br));
  Value zero = arith::ConstantOp::create(
      builder, at, DenseElementsAttr::get(keyAccTile, builder.getF32FloatAttr(0.0f)));

  auto headLoop = scf::ForOp::create(builder, at, c0, group, c1, ValueRange{zero, zero});
  builder.setInsertionPointToStart(headLoop.getBody());
  Value h = arith::AddIOp::create(builder, at,
                                  arith::MulIOp::create(builder, at, kvHead, group),
                                  headLoop.getInductionVar());
  auto tileLoop = scf::ForOp::create(builder, at, c0, numQueryTiles, c1,
                                     headLoop.getRegionIterArgs());
  builder.setInsertionPointToStart(tileLoop.getBody());
  Value qt = tileLoop.getInductionVar();
  Value keyGrad = tileLoop.getRegionIterArg(0), valueGrad = tileLoop.getRegionIterArg(1);
  Value q = flash::LoadQOp::create(builder, at, queryTile, b, h, qt);
  Value outGrad = flash::LoadRowsOp::create(builder, at, queryTile,
                                            flash::RowOperand::OutputGrad, b, h, qt);
  Value lse = flash::LoadRowStatOp::create(builder, at, rowVector, flash::RowStat::Lse, b, h, qt);
  Value delta =
      flash::LoadRowStatOp::create(builder, at, rowVector, flash::RowStat::Delta, b, h, qt);
  Scores scores = emitScores(q, k, b, h, qt, kt, keyLen, scale, br, bc);
  Value probs = flash::RecomputeProbsOp::create(builder, at, scoreTile, scores.masked, lse,
                                                /*score_scale=*/FloatAttr());
  Value probGrad = flash::OutputGradDotOp::create(builder, at, scoreTile, outGrad, v);
  Value scoreGrad =
      flash::SoftmaxGradOp::create(builder, at, scoreTile, probs, probGrad, delta);
  if (variant.score) {
    auto chain = flash::ScoreModGradOp::create(builder, loc(variant.score->loc), scoreTile,
                                               scoreGrad, scores.scaled, b, h, qt, kt);
    emitScoreGradRegion(chain, derivatives);
    scoreGrad = chain.getResult();
  }
  Value nextValueGrad =
      flash::AccumulateTransposedOp::create(builder, at, keyAccTile, valueGrad, probs, outGrad);
  Value nextKeyGrad =
      flash::AccumulateTransposedOp::create(builder, at, keyAccTile, keyGrad, scoreGrad, q);
  flash::QueryGradAddOp::create(builder, at, scoreGrad, k, b, h, qt,
                                builder.getF32FloatAttr(scale));
  scf::YieldOp::create(builder, at, ValueRange{nextKeyGrad, nextValueGrad});
  builder.setInsertionPointAfter(tileLoop);
  scf::YieldOp::create(builder, at, tileLoop.getResults());

  builder.setInsertionPointAfter(headLoop);
  flash::StoreKeyGradsOp::create(builder, at, headLoop.getResult(0), headLoop.getResult(1), b,
                                 kvHead, kt, builder.getF32FloatAttr(scale));
  flash::ReturnOp::create(builder, at);
}

} // namespace

/// Whether `expr` has one value for every input: literals and the sizes
/// the compilation fixes (the head dim, sizes the source fixes).
static bool isConstant(const Expr &expr, const Variant &variant) {
  switch (expr.kind) {
  case ExprKind::IntLiteral:
  case ExprKind::FloatLiteral:
  case ExprKind::BoolLiteral:
    return true;
  case ExprKind::DimSize:
    return expr.dimRole == DimRole::HeadDim || variant.dim(expr.dimRole).isFixed();
  case ExprKind::Unary:
  case ExprKind::Binary:
  case ExprKind::Call:
    return llvm::all_of(expr.operands, [&](const std::unique_ptr<Expr> &operand) {
      return isConstant(*operand, variant);
    });
  default:
    return false;
  }
}

static double evaluateConstant(const Expr &expr, const Variant &variant, int64_t headDim) {
  int64_t sizes[6];
  for (int role = 0; role < 6; ++role)
    sizes[role] = variant.dims[role].isFixed() ? variant.dims[role].value : -1;
  sizes[static_cast<int>(DimRole::HeadDim)] = headDim;
  EvalContext context;
  context.dimSizes = sizes;
  return evaluate(expr, context);
}

/// Warns at every largest constant float subexpression of `expr` that is
/// NaN or infinite for every input (`log(0.0)`, `0.0 / 0.0`): it is a typo
/// far more often than an intent.
static void warnNonFiniteConstants(const Expr &expr, const Variant &variant, int64_t headDim,
                                   llvm::SourceMgr &sourceMgr) {
  if (isConstant(expr, variant)) {
    if (expr.type != ScalarType::Float)
      return;
    double value = evaluateConstant(expr, variant, headDim);
    if (!std::isfinite(value))
      sourceMgr.PrintMessage(startOf(expr), llvm::SourceMgr::DK_Warning,
                             std::string("this expression is ") +
                                 (std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf") +
                                 " for every input");
    return;
  }
  for (const std::unique_ptr<Expr> &operand : expr.operands)
    warnNonFiniteConstants(*operand, variant, headDim, sourceMgr);
}

/// Suspicious constants: a scale that is 0 (uniform attention: `1 / 0` is 0
/// in integer arithmetic) warns, a scale or score that is NaN or +inf for
/// every input is an error (every output would be NaN), a score that is
/// -inf or a mask that is false for every input hides every key (O = 0,
/// LSE = -inf) and warns. Returns false after an error.
static bool checkConstants(const Variant &variant, int64_t headDim, llvm::SourceMgr &sourceMgr) {
  bool ok = true;
  double scale = evaluateScale(variant, headDim);
  llvm::SMLoc scaleLoc = variant.scale ? startOf(*variant.scale) : variant.loc;
  if (!std::isfinite(scale)) {
    sourceMgr.PrintMessage(scaleLoc, llvm::SourceMgr::DK_Error,
                           std::string("the scale is ") + (std::isnan(scale) ? "NaN" : "infinite") +
                               ": every score would be NaN");
    ok = false;
  } else if (scale == 0) {
    sourceMgr.PrintMessage(scaleLoc, llvm::SourceMgr::DK_Warning,
                           "the scale is 0: every score is 0 and every key weighs the same "
                           "(integer division truncates: write 1.0 / 8 rather than 1 / 8)");
  }
  if (variant.score) {
    if (isConstant(*variant.score, variant)) {
      double value = evaluateConstant(*variant.score, variant, headDim);
      if (std::isnan(value) || value == std::numeric_limits<double>::infinity()) {
        sourceMgr.PrintMessage(startOf(*variant.score), llvm::SourceMgr::DK_Error,
                               std::string("the score is ") + (std::isnan(value) ? "NaN" : "+inf") +
                                   " for every input: every output would be NaN");
        ok = false;
      } else if (value == -std::numeric_limits<double>::infinity()) {
        sourceMgr.PrintMessage(startOf(*variant.score), llvm::SourceMgr::DK_Warning,
                               "the score is -inf for every input: no key is visible (O = 0, "
                               "LSE = -inf)");
      }
    } else {
      warnNonFiniteConstants(*variant.score, variant, headDim, sourceMgr);
    }
  }
  if (variant.mask) {
    if (isConstant(*variant.mask, variant)) {
      if (evaluateConstant(*variant.mask, variant, headDim) == 0)
        sourceMgr.PrintMessage(startOf(*variant.mask), llvm::SourceMgr::DK_Warning,
                               "the mask is false for every input: no key is visible (O = 0, "
                               "LSE = -inf)");
    } else {
      warnNonFiniteConstants(*variant.mask, variant, headDim, sourceMgr);
    }
  }
  return ok;
}

std::optional<int64_t> frontend::resolveHeadDim(const Variant &variant,
                                                const KernelOptions &options) {
  const Dim &dim = variant.dim(DimRole::HeadDim);
  if (dim.isFixed()) {
    if (options.headDim && *options.headDim != dim.value)
      return std::nullopt;
    return dim.value;
  }
  return options.headDim.value_or(kDefaultHeadDim);
}

double frontend::evaluateScale(const Variant &variant, int64_t headDim) {
  if (!variant.scale)
    return 1.0 / std::sqrt(static_cast<double>(headDim));
  return evaluateConstant(*variant.scale, variant, headDim);
}

OwningOpRef<ModuleOp> frontend::emitFlashIR(MLIRContext &context, const Module &module,
                                            const KernelOptions &options,
                                            llvm::SourceMgr &sourceMgr,
                                            llvm::StringRef onlyVariant) {
  context.loadDialect<flash::FlashDialect, arith::ArithDialect, math::MathDialect,
                      scf::SCFDialect>();
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  StringAttr fileName = StringAttr::get(&context, buffer->getBufferIdentifier());
  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> result = ModuleOp::create(builder.getUnknownLoc());

  if (!onlyVariant.empty() && !module.lookup(onlyVariant)) {
    std::string names;
    for (const Variant &variant : module.variants)
      names += (names.empty() ? "'" : ", '") + variant.name + "'";
    sourceMgr.PrintMessage(llvm::SMLoc(), llvm::SourceMgr::DK_Error,
                           "no variant named '" + onlyVariant + "' (the file declares " +
                               names + ")");
    return nullptr;
  }
  if (options.blockRows < 0 || options.blockCols < 0) {
    sourceMgr.PrintMessage(llvm::SMLoc(), llvm::SourceMgr::DK_Error,
                           "tile sizes Br and Bc must be positive");
    return nullptr;
  }

  bool failed = false;
  for (const Variant &variant : module.variants) {
    if (!onlyVariant.empty() && variant.name != onlyVariant)
      continue;
    std::optional<int64_t> headDim = resolveHeadDim(variant, options);
    if (!headDim) {
      const Dim &dim = variant.dim(DimRole::HeadDim);
      sourceMgr.PrintMessage(dim.loc, llvm::SourceMgr::DK_Error,
                             "variant '" + variant.name + "' fixes the head dim to " +
                                 std::to_string(dim.value) + ", but D=" +
                                 std::to_string(*options.headDim) + " was requested");
      failed = true;
      continue;
    }
    if (*headDim < 1) {
      sourceMgr.PrintMessage(variant.loc, llvm::SourceMgr::DK_Error,
                             "head dim must be positive");
      failed = true;
      continue;
    }
    auto [br, bc] = options.tileFor ? options.tileFor(variant, *headDim)
                                    : std::make_pair(options.blockRows, options.blockCols);
    if (br <= 0 || bc <= 0) {
      sourceMgr.PrintMessage(variant.loc, llvm::SourceMgr::DK_Error,
                             "variant '" + variant.name + "' has no tile (Br = " +
                                 std::to_string(br) + ", Bc = " + std::to_string(bc) +
                                 "): tile sizes must be positive");
      failed = true;
      continue;
    }
    if (!checkConstants(variant, *headDim, sourceMgr)) {
      failed = true;
      continue;
    }
    std::optional<int64_t> page;
    if (const std::optional<PagedDecl> &paged = variant.paged) {
      page = paged->pageSize ? paged->pageSize : options.pageSize;
      std::string problem;
      if (options.backward)
        problem = "variant '" + variant.name +
                  "' keeps K and V in a paged cache, which only the forward pass reads "
                  "(the backward needs dense K and V)";
      else if (!page)
        problem = "variant '" + variant.name +
                  "' keeps K and V in a paged cache but gives no page size: write "
                  "'page 16' in its paged item or pass --paged 16";
      else if (options.pageSize && *options.pageSize != *page)
        problem = "variant '" + variant.name + "' has pages of " + std::to_string(*page) +
                  " keys, but --paged " + std::to_string(*options.pageSize) + " was given";
      else if (*page < 1 || *page > 4096)
        problem = "page of " + std::to_string(*page) + " keys is out of range (1 to 4096)";
      if (!problem.empty()) {
        sourceMgr.PrintMessage(paged->loc, llvm::SourceMgr::DK_Error, problem);
        failed = true;
        continue;
      }
    }
    bool varlen = variant.varlenQueries || variant.varlenKeys;
    if (varlen && options.backward) {
      sourceMgr.PrintMessage((variant.varlenQueries ? variant.varlenQueries : variant.varlenKeys)->loc,
                             llvm::SourceMgr::DK_Error,
                             "variant '" + variant.name +
                                 "' packs ragged sequences (varlen), which only the forward pass "
                                 "reads (the backward needs dense tensors)");
      failed = true;
      continue;
    }
    builder.setInsertionPointToEnd(result->getBody());
    if (options.backward) {
      std::optional<ScoreDerivatives> derivatives = differentiateScore(variant, sourceMgr);
      if (!derivatives) {
        failed = true;
        continue;
      }
      KernelEmitter(builder, variant, sourceMgr, fileName)
          .emitBackward(br, bc, *headDim, *derivatives);
      auto kernel = cast<flash::BackwardKernelOp>(result->getBody()->back());
      if (options.blockSummary && options.backwardBlockSummary)
        requestBlockSummary(kernel);
      config::QueryGradAdds adds = options.queryGradAddsFor
                                       ? options.queryGradAddsFor(variant, *headDim)
                                       : config::QueryGradAdds::AnyOrder;
      if (adds == config::QueryGradAdds::KeyBlockOrder)
        kernel.setOrderedQueryGrads(true);
      else if (adds == config::QueryGradAdds::Writer)
        kernel.setQueryGradWriter(true);
      continue;
    }
    // Only a variant whose KV heads may be fewer than its query heads has
    // groups to pack (MHA would pay the row mapping for nothing).
    // Packed queries keep one row per (query head, position) and the plain
    // store: split states and packed rows are laid out by the launch's N.
    bool packHeads = options.packHeads && variant.mayGroupHeads() && !variant.varlenQueries &&
                     (options.packSummarizedMasks || !options.blockSummary ||
                      !variant.maskReadsTensors());
    bool splitKeys = options.splitKeys && !variant.varlenQueries;
    KernelEmitter(builder, variant, sourceMgr, fileName)
        .emit(br, bc, *headDim, splitKeys, packHeads);
    auto kernel = cast<flash::KernelOp>(result->getBody()->back());
    if (page)
      kernel.setPagedKvAttr(flash::PagedKVAttr::get(&context, *page,
                                                    builder.getStringAttr(variant.paged->table),
                                                    builder.getStringAttr(variant.paged->lengths)));
    if (varlen) {
      auto offsetsOf = [&](const std::optional<VarlenDecl> &decl) {
        return builder.getStringAttr(decl ? decl->offsets : "");
      };
      kernel.setVarlenAttr(flash::VarlenAttr::get(&context, offsetsOf(variant.varlenQueries),
                                                  offsetsOf(variant.varlenKeys)));
    }
    // A packed kernel's tiles mix query heads, which a summary per (head,
    // tile) cannot describe; a paged one's sequences have lengths of their
    // own: their aux masks are evaluated per element.
    if (options.blockSummary && !packHeads && !page && !varlen)
      requestBlockSummary(kernel);
  }
  if (failed)
    return nullptr;
  // Invalid IR here is a front-end bug, never the user's: say so once, for
  // every tool, instead of letting a later pass or the interpreter trip.
  if (mlir::failed(verify(*result))) {
    sourceMgr.PrintMessage(llvm::SMLoc(), llvm::SourceMgr::DK_Error,
                           "internal error: the front end produced invalid flash IR");
    return nullptr;
  }
  return result;
}
