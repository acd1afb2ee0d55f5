//===- Derivative.cpp - Symbolic derivatives of score expressions ---------===//
//
// Forward-mode differentiation over the syntax tree. Every rule builds its
// result through the smart constructors below, which fold what is known at
// compile time (x·0, x·1, x + 0, -(-x), select(c, 0, 0), literal arithmetic),
// so `s / 30` differentiates to the literal 1/30 and an ALiBi bias to 1.
// Rules at points where the function is not differentiable take one side:
// abs'(0) = +1, min/max pass the derivative of the operand they return
// (the left one on ties), and select differentiates the branch it takes.
//
//===----------------------------------------------------------------------===//

#include "flashc/Frontend/Derivative.h"

#include <cmath>

using namespace flashc::frontend;

namespace {

using ExprPtr = std::unique_ptr<Expr>;

ExprPtr floatLiteral(double value, llvm::SMLoc loc) {
  auto node = std::make_unique<Expr>(ExprKind::FloatLiteral, loc);
  node->type = ScalarType::Float;
  node->floatValue = value;
  return node;
}

bool isLiteral(const Expr &expr) {
  return expr.kind == ExprKind::FloatLiteral || expr.kind == ExprKind::IntLiteral;
}

double literalValue(const Expr &expr) {
  return expr.kind == ExprKind::FloatLiteral ? expr.floatValue
                                             : static_cast<double>(expr.intValue);
}

bool isZero(const Expr &expr) { return isLiteral(expr) && literalValue(expr) == 0.0; }
bool isOne(const Expr &expr) { return isLiteral(expr) && literalValue(expr) == 1.0; }

/// Structural equality (same tree), used to merge equal select branches.
bool sameTree(const Expr &a, const Expr &b) {
  if (a.kind != b.kind || a.type != b.type || a.operands.size() != b.operands.size())
    return false;
  switch (a.kind) {
  case ExprKind::IntLiteral:
    if (a.intValue != b.intValue)
      return false;
    break;
  case ExprKind::FloatLiteral:
    // Bitwise, so 0.0 and -0.0 (and NaNs) are told apart.
    if (std::signbit(a.floatValue) != std::signbit(b.floatValue) ||
        !(a.floatValue == b.floatValue))
      return false;
    break;
  case ExprKind::BoolLiteral:
    if (a.boolValue != b.boolValue)
      return false;
    break;
  case ExprKind::Param:
  case ExprKind::Index:
  case ExprKind::DimSize:
    if (a.declIndex != b.declIndex || a.dimRole != b.dimRole || a.name != b.name)
      return false;
    break;
  case ExprKind::Unary:
    if (a.unaryOp != b.unaryOp)
      return false;
    break;
  case ExprKind::Binary:
    if (a.binaryOp != b.binaryOp)
      return false;
    break;
  case ExprKind::Call:
    if (a.builtin != b.builtin)
      return false;
    break;
  default:
    break;
  }
  for (size_t n = 0; n < a.operands.size(); ++n)
    if (!sameTree(*a.operands[n], *b.operands[n]))
      return false;
  return true;
}

ExprPtr binary(BinaryOp op, ExprPtr a, ExprPtr b, llvm::SMLoc loc) {
  auto node = std::make_unique<Expr>(ExprKind::Binary, loc);
  node->type = ScalarType::Float;
  node->binaryOp = op;
  node->operands.push_back(std::move(a));
  node->operands.push_back(std::move(b));
  return node;
}

/// `a` as a Float expression: an Int literal becomes a float literal, other
/// Int expressions become `a + 0.0` (the language has no cast; a Float node
/// promotes its Int operand).
ExprPtr asFloat(ExprPtr a, llvm::SMLoc loc) {
  if (a->type == ScalarType::Float)
    return a;
  if (isLiteral(*a))
    return floatLiteral(literalValue(*a), loc);
  return binary(BinaryOp::Add, std::move(a), floatLiteral(0, loc), loc);
}

ExprPtr neg(ExprPtr a, llvm::SMLoc loc) {
  if (isLiteral(*a))
    return floatLiteral(-literalValue(*a), loc);
  a = asFloat(std::move(a), loc);
  if (a->kind == ExprKind::Unary && a->unaryOp == UnaryOp::Neg &&
      a->operands[0]->type == ScalarType::Float)
    return std::move(a->operands[0]);
  auto node = std::make_unique<Expr>(ExprKind::Unary, loc);
  node->type = ScalarType::Float;
  node->unaryOp = UnaryOp::Neg;
  node->operands.push_back(std::move(a));
  return node;
}

ExprPtr add(ExprPtr a, ExprPtr b, llvm::SMLoc loc) {
  if (isLiteral(*a) && isLiteral(*b))
    return floatLiteral(literalValue(*a) + literalValue(*b), loc);
  if (isZero(*a))
    return asFloat(std::move(b), loc);
  if (isZero(*b))
    return asFloat(std::move(a), loc);
  return binary(BinaryOp::Add, std::move(a), std::move(b), loc);
}

ExprPtr sub(ExprPtr a, ExprPtr b, llvm::SMLoc loc) {
  if (isLiteral(*a) && isLiteral(*b))
    return floatLiteral(literalValue(*a) - literalValue(*b), loc);
  if (isZero(*b))
    return asFloat(std::move(a), loc);
  if (isZero(*a))
    return neg(std::move(b), loc);
  return binary(BinaryOp::Sub, std::move(a), std::move(b), loc);
}

/// The product in f32 arithmetic: an Int operand is promoted by the node.
ExprPtr mul(ExprPtr a, ExprPtr b, llvm::SMLoc loc) {
  if (isLiteral(*a) && isLiteral(*b))
    return floatLiteral(literalValue(*a) * literalValue(*b), loc);
  if (isZero(*a) || isZero(*b))
    return floatLiteral(0, loc);
  if (isOne(*a))
    return asFloat(std::move(b), loc);
  if (isOne(*b))
    return asFloat(std::move(a), loc);
  if (isLiteral(*a) && literalValue(*a) == -1.0)
    return neg(std::move(b), loc);
  if (isLiteral(*b) && literalValue(*b) == -1.0)
    return neg(std::move(a), loc);
  return binary(BinaryOp::Mul, std::move(a), std::move(b), loc);
}

ExprPtr div(ExprPtr a, ExprPtr b, llvm::SMLoc loc) {
  if (isLiteral(*a) && isLiteral(*b) && literalValue(*b) != 0)
    return floatLiteral(literalValue(*a) / literalValue(*b), loc);
  if (isZero(*a))
    return floatLiteral(0, loc);
  if (isOne(*b))
    return asFloat(std::move(a), loc);
  return binary(BinaryOp::Div, std::move(a), std::move(b), loc);
}

ExprPtr call(Builtin fn, std::vector<ExprPtr> args, llvm::SMLoc loc) {
  auto node = std::make_unique<Expr>(ExprKind::Call, loc);
  node->type = ScalarType::Float;
  node->builtin = fn;
  node->operands = std::move(args);
  return node;
}

ExprPtr select(ExprPtr condition, ExprPtr whenTrue, ExprPtr whenFalse, llvm::SMLoc loc) {
  if (sameTree(*whenTrue, *whenFalse))
    return whenTrue;
  if (condition->kind == ExprKind::BoolLiteral)
    return condition->boolValue ? std::move(whenTrue) : std::move(whenFalse);
  std::vector<ExprPtr> args;
  args.push_back(std::move(condition));
  args.push_back(std::move(whenTrue));
  args.push_back(std::move(whenFalse));
  return call(Builtin::Select, std::move(args), loc);
}

ExprPtr compare(BinaryOp op, ExprPtr a, ExprPtr b, llvm::SMLoc loc) {
  auto node = binary(op, std::move(a), std::move(b), loc);
  node->type = ScalarType::Bool;
  return node;
}

class Differentiator {
public:
  Differentiator(const Expr *wrt, int64_t budget) : wrt(wrt), budget(budget) {}

  /// Whether the copies made so far exceeded the budget (the result is then
  /// meaningless: rules stop copying and return 0).
  bool exhausted() const { return budget < 0; }

  ExprPtr derive(const Expr &expr) {
    llvm::SMLoc loc = expr.loc;
    if (expr.type != ScalarType::Float || exhausted())
      return floatLiteral(0, loc); // Int and Bool are piecewise constant
    switch (expr.kind) {
    case ExprKind::Score:
      return floatLiteral(wrt == nullptr ? 1 : 0, loc);
    case ExprKind::Index:
      return floatLiteral(&expr == wrt ? 1 : 0, loc);
    case ExprKind::FloatLiteral:
    case ExprKind::Param:
    case ExprKind::DimSize:
    case ExprKind::IntLiteral:
    case ExprKind::BoolLiteral:
    case ExprKind::Batch:
    case ExprKind::Head:
    case ExprKind::Query:
    case ExprKind::Key:
      return floatLiteral(0, loc);
    case ExprKind::Unary:
      return neg(derive(*expr.operands[0]), loc); // Float unary is '-'
    case ExprKind::Binary:
      return deriveBinary(expr);
    case ExprKind::Call:
      return deriveCall(expr);
    }
    return floatLiteral(0, loc);
  }

private:
  ExprPtr deriveBinary(const Expr &expr) {
    const Expr &a = *expr.operands[0], &b = *expr.operands[1];
    llvm::SMLoc loc = expr.loc;
    switch (expr.binaryOp) {
    case BinaryOp::Add:
      return add(derive(a), derive(b), loc);
    case BinaryOp::Sub:
      return sub(derive(a), derive(b), loc);
    case BinaryOp::Mul: // (a·b)' = a'·b + a·b'
      return add(mul(derive(a), copy(b), loc), mul(copy(a), derive(b), loc), loc);
    case BinaryOp::Div: { // (a/b)' = a'/b - a·b'/b²
      ExprPtr da = derive(a), db = derive(b);
      if (isZero(*db))
        return div(std::move(da), copy(b), loc);
      ExprPtr second = div(mul(copy(a), std::move(db), loc),
                           mul(copy(b), copy(b), loc), loc);
      return sub(div(std::move(da), copy(b), loc), std::move(second), loc);
    }
    default:
      return floatLiteral(0, loc); // comparisons and logic are not Float
    }
  }

  ExprPtr deriveCall(const Expr &expr) {
    llvm::SMLoc loc = expr.loc;
    const Expr &a = *expr.operands[0];
    switch (expr.builtin) {
    case Builtin::Select:
      return select(copy(a), derive(*expr.operands[1]), derive(*expr.operands[2]), loc);
    case Builtin::Min:
    case Builtin::Max: {
      const Expr &b = *expr.operands[1];
      ExprPtr da = derive(a), db = derive(b);
      if (sameTree(*da, *db))
        return da;
      BinaryOp op = expr.builtin == Builtin::Min ? BinaryOp::Le : BinaryOp::Ge;
      return select(compare(op, copy(a), copy(b), loc), std::move(da), std::move(db), loc);
    }
    case Builtin::Abs: {
      ExprPtr da = derive(a);
      if (isZero(*da))
        return da;
      ExprPtr negated = neg(copy(*da), loc);
      return select(compare(BinaryOp::Lt, copy(a), floatLiteral(0, loc), loc),
                    std::move(negated), std::move(da), loc);
    }
    case Builtin::Exp: // exp(a)' = exp(a)·a'
      return mul(copy(expr), derive(a), loc);
    case Builtin::Log: // log(a)' = a'/a
      return div(derive(a), copy(a), loc);
    case Builtin::Tanh: { // tanh(a)' = (1 - tanh(a)²)·a'
      ExprPtr da = derive(a);
      if (isZero(*da))
        return da;
      ExprPtr square = mul(copy(expr), copy(expr), loc);
      return mul(sub(floatLiteral(1, loc), std::move(square), loc), std::move(da), loc);
    }
    case Builtin::Sqrt: // sqrt(a)' = a'/(2·sqrt(a))
      return div(derive(a), mul(floatLiteral(2, loc), copy(expr), loc), loc);
    }
    return floatLiteral(0, loc);
  }

  /// A copy of `expr` charged to the budget: repeated chain rules through
  /// nested calls copy their operands again at every level (quadratic in
  /// the depth), so the cost is bounded before the result's size is known.
  ExprPtr copy(const Expr &expr) {
    budget -= countNodes(expr);
    return exhausted() ? floatLiteral(0, expr.loc) : clone(expr);
  }

  const Expr *wrt;
  int64_t budget;
};

void collectTensorReads(const Expr &expr, const Variant &variant,
                        std::vector<const Expr *> &reads) {
  if (expr.kind == ExprKind::Index && expr.type == ScalarType::Float)
    reads.push_back(&expr);
  for (const auto &operand : expr.operands)
    collectTensorReads(*operand, variant, reads);
}

} // namespace

std::unique_ptr<Expr> flashc::frontend::clone(const Expr &expr) {
  auto copy = std::make_unique<Expr>(expr.kind, expr.loc);
  copy->type = expr.type;
  copy->intValue = expr.intValue;
  copy->floatValue = expr.floatValue;
  copy->boolValue = expr.boolValue;
  copy->name = expr.name;
  copy->declIndex = expr.declIndex;
  copy->dimRole = expr.dimRole;
  copy->unaryOp = expr.unaryOp;
  copy->binaryOp = expr.binaryOp;
  copy->builtin = expr.builtin;
  for (const auto &operand : expr.operands)
    copy->operands.push_back(clone(*operand));
  return copy;
}

int64_t flashc::frontend::countNodes(const Expr &expr) {
  int64_t count = 1;
  for (const auto &operand : expr.operands)
    count += countNodes(*operand);
  return count;
}

std::unique_ptr<Expr> flashc::frontend::differentiate(const Expr &expr, const Expr *wrt) {
  Differentiator differentiator(wrt, 8 * kMaxDerivativeNodes);
  ExprPtr result = differentiator.derive(expr);
  return differentiator.exhausted() ? nullptr : std::move(result);
}

std::optional<ScoreDerivatives>
flashc::frontend::differentiateScore(const Variant &variant, llvm::SourceMgr &sourceMgr) {
  ScoreDerivatives result;
  if (!variant.score)
    return result;
  auto checkSize = [&](const Expr *derivative, const std::string &what) {
    int64_t nodes = derivative ? countNodes(*derivative) : -1;
    if (derivative && nodes <= kMaxDerivativeNodes)
      return true;
    std::string size = derivative ? "has " + std::to_string(nodes) + " nodes"
                                  : "needs more than " +
                                        std::to_string(8 * kMaxDerivativeNodes) +
                                        " nodes of copies";
    sourceMgr.PrintMessage(startOf(*variant.score), llvm::SourceMgr::DK_Error,
                           "cannot form the backward pass of variant '" + variant.name +
                               "': the derivative of its score with respect to " + what +
                               " " + size + " (at most " +
                               std::to_string(kMaxDerivativeNodes) +
                               "); simplify the score expression");
    return false;
  };
  result.wrtScore = differentiate(*variant.score, nullptr);
  if (!checkSize(result.wrtScore.get(), "s"))
    return std::nullopt;
  std::vector<const Expr *> reads;
  collectTensorReads(*variant.score, variant, reads);
  for (const Expr *read : reads) {
    ScoreDerivatives::TensorRead entry{read, differentiate(*variant.score, read)};
    if (!checkSize(entry.partial.get(), "'" + read->name + "'"))
      return std::nullopt;
    result.tensorReads.push_back(std::move(entry));
  }
  return result;
}
