//===- InlineAsm.h - PTX through llvm.inline_asm ----------------*- C++ -*-===//
//
// The Hopper instructions this backend needs (wgmma, TMA, mbarrier waits)
// are written as inline PTX: their NVVM ops either lack the forms we use
// (register operands tied through a fence) or differ across LLVM versions.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_CONVERSION_FLASHTOSM90_INLINEASM_H
#define FLASHC_LIB_CONVERSION_FLASHTOSM90_INLINEASM_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace flashc::sm90 {

/// One side-effecting inline-asm call. Operands are numbered in the order
/// they are added: outputs first ($0...), then inputs.
class AsmCall {
public:
  /// Outputs tied to inputs: `values` go in and come back (same register).
  void addTied(llvm::ArrayRef<mlir::Value> values);
  void addOutputs(mlir::Type type, int64_t count);
  void addInput(mlir::Value value);
  /// Emits the call; returns the outputs.
  llvm::SmallVector<mlir::Value> emit(mlir::OpBuilder &b, mlir::Location loc,
                                      llvm::StringRef text);

private:
  void append(const std::string &constraint);
  std::string constraints;
  llvm::SmallVector<mlir::Value> operands;
  llvm::SmallVector<mlir::Type> resultTypes;
};

/// "{$first, ..., $first+count-1}"
std::string operandList(int64_t first, int64_t count);

} // namespace flashc::sm90

#endif // FLASHC_LIB_CONVERSION_FLASHTOSM90_INLINEASM_H
