//===- Evaluate.cpp - fp64 reference semantics of .flash expressions ------===//
//
// The reference meaning of a checked expression, evaluated in double:
//  - Bool is 0 or 1.
//  - Int is 32-bit two's complement: every Int result (literals, b/h/i/j,
//    dim sizes, params, i32 tensor elements and arithmetic) is computed in
//    int64 and wrapped to i32.
//  - Int `/` and `%` truncate toward zero (C semantics). Division or modulo
//    by zero yields 0 (no trap), and INT_MIN / -1 wraps to INT_MIN. The IR
//    generator lowers Int division the same way.
//  - A Float node promotes Int operands to double; Float math is double
//    math (the GPU computes in f32; the tolerance of the comparison is the
//    caller's business).
//  - Comparisons of an Int with a Float compare in double.
//  - Float min/max follow fmin/fmax (a NaN operand yields the other one).
//  - `&&`, `||` and select evaluate only what they need (no side effects
//    exist, so this is only a speed-up).
//
//===----------------------------------------------------------------------===//

#include "flashc/Frontend/Frontend.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace flashc::frontend;

namespace {

int64_t wrap32(int64_t value) {
  return static_cast<int64_t>(
      static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(value))));
}

/// An Int value carried in a double: exact for every i32. Values outside
/// the int64 range (impossible for checked Int expressions) saturate.
int64_t toInt(double value) {
  if (!(value == value))
    return 0;
  if (value >= 9.2e18)
    return INT64_MAX;
  if (value <= -9.2e18)
    return INT64_MIN;
  return static_cast<int64_t>(value);
}

double intResult(int64_t value) { return static_cast<double>(wrap32(value)); }

double evalBinary(const Expr &expr, const EvalContext &context) {
  const Expr &lhsExpr = *expr.operands[0];
  const Expr &rhsExpr = *expr.operands[1];
  switch (expr.binaryOp) {
  case BinaryOp::And:
    return evaluate(lhsExpr, context) != 0 && evaluate(rhsExpr, context) != 0
               ? 1
               : 0;
  case BinaryOp::Or:
    return evaluate(lhsExpr, context) != 0 || evaluate(rhsExpr, context) != 0
               ? 1
               : 0;
  default:
    break;
  }

  double lhs = evaluate(lhsExpr, context);
  double rhs = evaluate(rhsExpr, context);
  bool isInt = expr.type == ScalarType::Int;
  int64_t a = toInt(lhs), b = toInt(rhs);
  switch (expr.binaryOp) {
  case BinaryOp::Add:
    return isInt ? intResult(a + b) : lhs + rhs;
  case BinaryOp::Sub:
    return isInt ? intResult(a - b) : lhs - rhs;
  case BinaryOp::Mul:
    return isInt ? intResult(a * b) : lhs * rhs;
  case BinaryOp::Div:
    if (!isInt)
      return lhs / rhs;
    return b == 0 ? 0 : intResult(a / b); // i32 operands: no int64 overflow
  case BinaryOp::Mod:
    return b == 0 ? 0 : intResult(a % b);
  // Int operands are exact in double, so comparing doubles is exact for
  // Int/Int, Int/Float and Bool/Bool alike.
  case BinaryOp::Lt: return lhs < rhs ? 1 : 0;
  case BinaryOp::Le: return lhs <= rhs ? 1 : 0;
  case BinaryOp::Gt: return lhs > rhs ? 1 : 0;
  case BinaryOp::Ge: return lhs >= rhs ? 1 : 0;
  case BinaryOp::Eq: return lhs == rhs ? 1 : 0;
  case BinaryOp::Ne: return lhs != rhs ? 1 : 0;
  case BinaryOp::And:
  case BinaryOp::Or:
    break;
  }
  return 0;
}

double evalCall(const Expr &expr, const EvalContext &context) {
  bool isInt = expr.type == ScalarType::Int;
  auto arg = [&](size_t n) { return evaluate(*expr.operands[n], context); };
  switch (expr.builtin) {
  case Builtin::Select:
    return arg(0) != 0 ? arg(1) : arg(2);
  case Builtin::Min: {
    double a = arg(0), b = arg(1);
    return isInt ? intResult(std::min(toInt(a), toInt(b))) : std::fmin(a, b);
  }
  case Builtin::Max: {
    double a = arg(0), b = arg(1);
    return isInt ? intResult(std::max(toInt(a), toInt(b))) : std::fmax(a, b);
  }
  case Builtin::Abs: {
    double a = arg(0);
    // abs(INT_MIN) wraps to INT_MIN, like the i32 hardware.
    return isInt ? intResult(std::llabs(toInt(a))) : std::fabs(a);
  }
  case Builtin::Exp: return std::exp(arg(0));
  case Builtin::Log: return std::log(arg(0));
  case Builtin::Tanh: return std::tanh(arg(0));
  case Builtin::Sqrt: return std::sqrt(arg(0));
  }
  return 0;
}

} // namespace

double flashc::frontend::evaluate(const Expr &expr, const EvalContext &context) {
  switch (expr.kind) {
  case ExprKind::IntLiteral:
    return intResult(expr.intValue);
  case ExprKind::FloatLiteral:
    return expr.floatValue;
  case ExprKind::BoolLiteral:
    return expr.boolValue ? 1 : 0;
  case ExprKind::Score:
    return context.score;
  case ExprKind::Batch:
    return intResult(context.b);
  case ExprKind::Head:
    return intResult(context.h);
  case ExprKind::Query:
    return intResult(context.i);
  case ExprKind::Key:
    return intResult(context.j);
  case ExprKind::Param: {
    if (expr.declIndex < 0 ||
        static_cast<size_t>(expr.declIndex) >= context.params.size())
      return 0;
    double value = context.params[expr.declIndex];
    return expr.type == ScalarType::Int ? intResult(toInt(value)) : value;
  }
  case ExprKind::DimSize: {
    size_t role = static_cast<size_t>(expr.dimRole);
    return role < context.dimSizes.size() ? intResult(context.dimSizes[role])
                                          : 0;
  }
  case ExprKind::Unary: {
    double operand = evaluate(*expr.operands[0], context);
    if (expr.unaryOp == UnaryOp::Not)
      return operand != 0 ? 0 : 1;
    return expr.type == ScalarType::Int ? intResult(-toInt(operand)) : -operand;
  }
  case ExprKind::Binary:
    return evalBinary(expr, context);
  case ExprKind::Call:
    return evalCall(expr, context);
  case ExprKind::Index: {
    llvm::SmallVector<int64_t, 4> indices;
    for (const auto &operand : expr.operands)
      indices.push_back(toInt(evaluate(*operand, context)));
    if (!context.readTensor)
      return 0;
    double value = context.readTensor(expr.declIndex, indices);
    return expr.type == ScalarType::Int ? intResult(toInt(value)) : value;
  }
  }
  return 0;
}

Tangent flashc::frontend::evaluateTangent(const Expr &expr, const EvalContext &context,
                                          const Expr *wrt) {
  if (expr.type != ScalarType::Float)
    return {evaluate(expr, context), 0};
  auto operand = [&](size_t n) { return evaluateTangent(*expr.operands[n], context, wrt); };
  switch (expr.kind) {
  case ExprKind::Score:
    return {context.score, wrt == nullptr ? 1.0 : 0.0};
  case ExprKind::Index:
    return {evaluate(expr, context), &expr == wrt ? 1.0 : 0.0};
  case ExprKind::Unary: {
    Tangent a = operand(0);
    return {-a.value, -a.derivative};
  }
  case ExprKind::Binary: {
    Tangent a = operand(0), b = operand(1);
    switch (expr.binaryOp) {
    case BinaryOp::Add:
      return {a.value + b.value, a.derivative + b.derivative};
    case BinaryOp::Sub:
      return {a.value - b.value, a.derivative - b.derivative};
    case BinaryOp::Mul:
      return {a.value * b.value, a.derivative * b.value + a.value * b.derivative};
    case BinaryOp::Div:
      return {a.value / b.value,
              (a.derivative * b.value - a.value * b.derivative) / (b.value * b.value)};
    default:
      break;
    }
    break;
  }
  case ExprKind::Call: {
    switch (expr.builtin) {
    case Builtin::Select:
      return evaluate(*expr.operands[0], context) != 0 ? operand(1) : operand(2);
    case Builtin::Min: {
      Tangent a = operand(0), b = operand(1);
      return a.value <= b.value ? a : b;
    }
    case Builtin::Max: {
      Tangent a = operand(0), b = operand(1);
      return a.value >= b.value ? a : b;
    }
    case Builtin::Abs: {
      Tangent a = operand(0);
      return a.value < 0 ? Tangent{-a.value, -a.derivative} : a;
    }
    case Builtin::Exp: {
      Tangent a = operand(0);
      double e = std::exp(a.value);
      return {e, e * a.derivative};
    }
    case Builtin::Log: {
      Tangent a = operand(0);
      return {std::log(a.value), a.derivative / a.value};
    }
    case Builtin::Tanh: {
      Tangent a = operand(0);
      double t = std::tanh(a.value);
      return {t, (1 - t * t) * a.derivative};
    }
    case Builtin::Sqrt: {
      Tangent a = operand(0);
      double r = std::sqrt(a.value);
      return {r, a.derivative / (2 * r)};
    }
    }
    break;
  }
  default:
    break;
  }
  return {evaluate(expr, context), 0}; // literals, params, sizes
}

namespace {

/// A value and the scale of its f32 rounding error (roundingScale).
struct Scaled {
  double value, scale;
};

Scaled scaledEval(const Expr &expr, const EvalContext &context) {
  if (expr.type != ScalarType::Float)
    return {evaluate(expr, context), 0};
  auto operand = [&](size_t n) { return scaledEval(*expr.operands[n], context); };
  switch (expr.kind) {
  case ExprKind::Unary: {
    Scaled a = operand(0);
    return {-a.value, a.scale};
  }
  case ExprKind::Binary: {
    Scaled a = operand(0), b = operand(1);
    double r = evaluate(expr, context);
    switch (expr.binaryOp) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
      return {r, a.scale + b.scale + std::fabs(r)};
    case BinaryOp::Mul:
      return {r, a.scale * std::fabs(b.value) + std::fabs(a.value) * b.scale + std::fabs(r)};
    case BinaryOp::Div:
      return {r, a.scale / std::fabs(b.value) +
                     std::fabs(a.value) * b.scale / (b.value * b.value) + std::fabs(r)};
    default:
      return {r, std::fabs(r)};
    }
  }
  case ExprKind::Call: {
    if (expr.builtin == Builtin::Select)
      return evaluate(*expr.operands[0], context) != 0 ? operand(1) : operand(2);
    if (expr.builtin == Builtin::Min || expr.builtin == Builtin::Max) {
      Scaled a = operand(0), b = operand(1);
      bool left = expr.builtin == Builtin::Min ? a.value <= b.value : a.value >= b.value;
      return left ? a : b;
    }
    Scaled a = operand(0);
    double r = evaluate(expr, context);
    switch (expr.builtin) {
    case Builtin::Abs: return {r, a.scale};
    case Builtin::Exp: return {r, std::fabs(r) * (1 + a.scale)};
    case Builtin::Log: return {r, a.scale / std::fabs(a.value) + std::fabs(r)};
    case Builtin::Tanh: return {r, (1 - r * r) * a.scale + std::fabs(r)};
    case Builtin::Sqrt: return {r, a.scale / (2 * r) + r};
    default: return {r, std::fabs(r)};
    }
  }
  default: {
    double v = evaluate(expr, context); // s, literals, params, tensor reads
    return {v, std::fabs(v)};
  }
  }
}

} // namespace

double flashc::frontend::roundingScale(const Expr &expr, const EvalContext &context) {
  return scaledEval(expr, context).scale;
}
