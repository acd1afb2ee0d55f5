//===- InlineAsm.cpp - PTX through llvm.inline_asm -------------------------===//

#include "InlineAsm.h"

using namespace mlir;
using namespace flashc::sm90;

static const char *constraintCode(Type type) {
  if (type.isF32())
    return "f";
  if (type.isInteger(64))
    return "l";
  assert(type.isInteger(32) && "inline PTX operands are f32, i32 or i64");
  return "r";
}

void AsmCall::append(const std::string &constraint) {
  if (!constraints.empty())
    constraints += ",";
  constraints += constraint;
}

void AsmCall::addTied(ArrayRef<Value> values) {
  // Tied inputs name outputs 0..n-1: they must be the first outputs.
  assert(resultTypes.empty() && operands.empty() && "addTied must come first");
  for (Value value : values) {
    append(std::string("=") + constraintCode(value.getType()));
    resultTypes.push_back(value.getType());
  }
  for (size_t i = 0; i < values.size(); ++i)
    append(std::to_string(i));
  operands.append(values.begin(), values.end());
}

void AsmCall::addOutputs(Type type, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    append(std::string("=") + constraintCode(type));
    resultTypes.push_back(type);
  }
}

void AsmCall::addInput(Value value) {
  append(constraintCode(value.getType()));
  operands.push_back(value);
}

SmallVector<Value> AsmCall::emit(OpBuilder &b, Location loc, StringRef text) {
  Type resultType;
  if (resultTypes.size() == 1)
    resultType = resultTypes.front();
  else if (!resultTypes.empty())
    resultType = LLVM::LLVMStructType::getLiteral(b.getContext(), resultTypes);
  auto op = LLVM::InlineAsmOp::create(
      b, loc, resultType ? TypeRange{resultType} : TypeRange{}, operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr());
  SmallVector<Value> results;
  if (resultTypes.size() == 1)
    results.push_back(op.getResult(0));
  else
    for (size_t i = 0; i < resultTypes.size(); ++i)
      results.push_back(LLVM::ExtractValueOp::create(b, loc, op.getResult(0), i));
  return results;
}

std::string flashc::sm90::operandList(int64_t first, int64_t count) {
  std::string text = "{";
  for (int64_t i = 0; i < count; ++i)
    text += (i ? ", $" : "$") + std::to_string(first + i);
  return text + "}";
}
