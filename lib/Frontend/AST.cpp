//===- AST.cpp - Names and printing of the .flash syntax tree -------------===//

#include "flashc/Frontend/AST.h"

#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace flashc::frontend;

const char *flashc::frontend::toString(ElementType type) {
  switch (type) {
  case ElementType::BF16: return "bf16";
  case ElementType::F16: return "f16";
  case ElementType::F32: return "f32";
  case ElementType::I32: return "i32";
  }
  return "?";
}

const char *flashc::frontend::toString(ScalarType type) {
  switch (type) {
  case ScalarType::Int: return "int";
  case ScalarType::Float: return "float";
  case ScalarType::Bool: return "bool";
  }
  return "?";
}

const char *flashc::frontend::toString(DimRole role) {
  switch (role) {
  case DimRole::Batch: return "batch";
  case DimRole::Heads: return "heads";
  case DimRole::KVHeads: return "kv_heads";
  case DimRole::QueryLen: return "query_len";
  case DimRole::KeyLen: return "key_len";
  case DimRole::HeadDim: return "head_dim";
  }
  return "?";
}

const char *flashc::frontend::toString(UnaryOp op) {
  switch (op) {
  case UnaryOp::Neg: return "-";
  case UnaryOp::Not: return "!";
  }
  return "?";
}

const char *flashc::frontend::toString(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add: return "+";
  case BinaryOp::Sub: return "-";
  case BinaryOp::Mul: return "*";
  case BinaryOp::Div: return "/";
  case BinaryOp::Mod: return "%";
  case BinaryOp::Lt: return "<";
  case BinaryOp::Le: return "<=";
  case BinaryOp::Gt: return ">";
  case BinaryOp::Ge: return ">=";
  case BinaryOp::Eq: return "==";
  case BinaryOp::Ne: return "!=";
  case BinaryOp::And: return "&&";
  case BinaryOp::Or: return "||";
  }
  return "?";
}

const char *flashc::frontend::toString(Builtin fn) {
  switch (fn) {
  case Builtin::Min: return "min";
  case Builtin::Max: return "max";
  case Builtin::Abs: return "abs";
  case Builtin::Exp: return "exp";
  case Builtin::Log: return "log";
  case Builtin::Tanh: return "tanh";
  case Builtin::Sqrt: return "sqrt";
  case Builtin::Select: return "select";
  }
  return "?";
}

static bool readsTensor(const Expr &expr) {
  if (expr.kind == ExprKind::Index)
    return true;
  for (const std::unique_ptr<Expr> &operand : expr.operands)
    if (operand && readsTensor(*operand))
      return true;
  return false;
}

bool Variant::maskReadsTensors() const { return mask && readsTensor(*mask); }

const Variant *Module::lookup(llvm::StringRef name) const {
  for (const Variant &variant : variants)
    if (variant.name == name)
      return &variant;
  return nullptr;
}

std::optional<DimRole> Variant::roleOf(llvm::StringRef symbol) const {
  static const DimRole qRoles[4] = {DimRole::Batch, DimRole::Heads,
                                    DimRole::QueryLen, DimRole::HeadDim};
  static const DimRole kvRoles[4] = {DimRole::Batch, DimRole::KVHeads,
                                     DimRole::KeyLen, DimRole::HeadDim};
  std::optional<DimRole> best;
  auto visit = [&](const TensorDecl &decl, const DimRole *roles) {
    for (size_t n = 0; n < decl.shape.size() && n < 4; ++n) {
      if (decl.shape[n].isFixed() || decl.shape[n].symbol != symbol)
        continue;
      if (!best || static_cast<int>(roles[n]) < static_cast<int>(*best))
        best = roles[n];
    }
  };
  visit(q, qRoles);
  visit(k, kvRoles);
  visit(v, kvRoles);
  return best;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {

/// The shortest decimal that reads back as `value`, always with a '.' or an
/// exponent so that it lexes as a float.
std::string formatFloat(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char buffer[64];
  double magnitude = std::fabs(value);
  bool fixed = magnitude == 0 || (magnitude >= 1e-4 && magnitude < 1e15);
  bool found = false;
  // Plain decimals where they are short (50.0, 0.0025), else %g (1e-07).
  for (int decimals = 1; fixed && decimals <= 20 && !found; ++decimals) {
    std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
    found = std::strtod(buffer, nullptr) == value;
  }
  for (int precision = 1; precision <= 17 && !found; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    found = std::strtod(buffer, nullptr) == value;
  }
  std::string text = buffer;
  if (text.find_first_of(".eE") == std::string::npos)
    text += ".0";
  return text;
}

int precedence(const Expr &expr) {
  if (expr.kind == ExprKind::Unary)
    return 7;
  if (expr.kind != ExprKind::Binary)
    return 8;
  switch (expr.binaryOp) {
  case BinaryOp::Or: return 1;
  case BinaryOp::And: return 2;
  case BinaryOp::Eq:
  case BinaryOp::Ne: return 3;
  case BinaryOp::Lt:
  case BinaryOp::Le:
  case BinaryOp::Gt:
  case BinaryOp::Ge: return 4;
  case BinaryOp::Add:
  case BinaryOp::Sub: return 5;
  case BinaryOp::Mul:
  case BinaryOp::Div:
  case BinaryOp::Mod: return 6;
  }
  return 8;
}

void print(const Expr &expr, int minPrecedence, llvm::raw_ostream &os);

void printList(const Expr &expr, llvm::raw_ostream &os) {
  for (size_t n = 0; n < expr.operands.size(); ++n) {
    if (n)
      os << ", ";
    print(*expr.operands[n], 1, os);
  }
}

void print(const Expr &expr, int minPrecedence, llvm::raw_ostream &os) {
  int own = precedence(expr);
  bool parens = own < minPrecedence;
  if (parens)
    os << "(";
  switch (expr.kind) {
  case ExprKind::IntLiteral:
    os << expr.intValue;
    break;
  case ExprKind::FloatLiteral:
    os << formatFloat(expr.floatValue);
    break;
  case ExprKind::BoolLiteral:
    os << (expr.boolValue ? "true" : "false");
    break;
  case ExprKind::Score: os << "s"; break;
  case ExprKind::Batch: os << "b"; break;
  case ExprKind::Head: os << "h"; break;
  case ExprKind::Query: os << "i"; break;
  case ExprKind::Key: os << "j"; break;
  case ExprKind::Param:
  case ExprKind::DimSize:
    os << expr.name;
    break;
  case ExprKind::Unary: {
    os << toString(expr.unaryOp);
    // The parser folds `-` into a number that follows it (`-5` is one
    // literal), so a negation of a literal keeps its parentheses to parse
    // back as the same tree.
    const Expr &operand = *expr.operands[0];
    bool literal = expr.unaryOp == UnaryOp::Neg && (operand.kind == ExprKind::IntLiteral ||
                                                    operand.kind == ExprKind::FloatLiteral);
    if (literal)
      os << "(";
    print(operand, literal ? 1 : 7, os);
    if (literal)
      os << ")";
    break;
  }
  case ExprKind::Binary:
    // Left associative: the right operand needs parentheses at equal
    // precedence (`a - (b - c)`).
    print(*expr.operands[0], own, os);
    os << " " << toString(expr.binaryOp) << " ";
    print(*expr.operands[1], own + 1, os);
    break;
  case ExprKind::Call:
    os << toString(expr.builtin) << "(";
    printList(expr, os);
    os << ")";
    break;
  case ExprKind::Index:
    os << expr.name << "[";
    printList(expr, os);
    os << "]";
    break;
  }
  if (parens)
    os << ")";
}

void printShape(const TensorDecl &decl, llvm::raw_ostream &os) {
  os << toString(decl.elementType) << "[";
  for (size_t n = 0; n < decl.shape.size(); ++n) {
    if (n)
      os << ", ";
    if (decl.shape[n].isFixed())
      os << decl.shape[n].value;
    else
      os << decl.shape[n].symbol;
  }
  os << "]";
}

} // namespace

std::string flashc::frontend::toString(const Expr &expr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  print(expr, 1, os);
  return os.str();
}

std::string flashc::frontend::toString(const Variant &variant) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "attention " << variant.name << " {\n";
  for (const TensorDecl *decl : {&variant.q, &variant.k, &variant.v}) {
    os << "  " << decl->name << ": ";
    printShape(*decl, os);
    os << "\n";
  }
  for (const ParamDecl &param : variant.params) {
    os << "  param " << param.name << ": "
       << (param.type == ScalarType::Int ? "i32" : "f32") << " = ";
    if (param.type == ScalarType::Int)
      os << static_cast<int64_t>(param.defaultValue);
    else
      os << formatFloat(param.defaultValue);
    os << "\n";
  }
  for (const TensorDecl &tensor : variant.tensors) {
    os << "  tensor " << tensor.name << ": ";
    printShape(tensor, os);
    os << "\n";
  }
  if (const std::optional<PagedDecl> &paged = variant.paged) {
    os << "  paged k, v: table " << paged->table << ", lengths " << paged->lengths;
    if (paged->pageSize)
      os << ", page " << paged->pageSize;
    os << "\n";
  }
  if (variant.varlenQueries)
    os << "  varlen q: offsets " << variant.varlenQueries->offsets << "\n";
  if (variant.varlenKeys)
    os << "  varlen k, v: offsets " << variant.varlenKeys->offsets << "\n";
  if (variant.scale)
    os << "  scale = " << toString(*variant.scale) << "\n";
  if (variant.score)
    os << "  score = " << toString(*variant.score) << "\n";
  if (variant.mask)
    os << "  mask = " << toString(*variant.mask) << "\n";
  os << "}\n";
  return os.str();
}

std::string flashc::frontend::toString(const Module &module) {
  std::string text;
  for (size_t n = 0; n < module.variants.size(); ++n) {
    if (n)
      text += "\n";
    text += toString(module.variants[n]);
  }
  return text;
}

llvm::SMLoc flashc::frontend::startOf(const Expr &expr) {
  const Expr *e = &expr;
  while (e->kind == ExprKind::Binary && !e->operands.empty())
    e = e->operands[0].get();
  return e->loc;
}
