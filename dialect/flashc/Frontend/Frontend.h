//===- Frontend.h - Parse and check .flash files ----------------*- C++ -*-===//
#ifndef FLASHC_FRONTEND_FRONTEND_H
#define FLASHC_FRONTEND_FRONTEND_H

#include "flashc/Frontend/AST.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/SourceMgr.h"

#include <functional>
#include <optional>

namespace flashc::frontend {

/// Parses and checks the main buffer of `sourceMgr`. Every problem is
/// reported through `sourceMgr` (file:line:col, the line, a caret) and yields
/// std::nullopt; parsing recovers at the next declaration where it can, so
/// one run reports several independent errors.
std::optional<Module> parseFlashFile(llvm::SourceMgr &sourceMgr);

/// Reads `path` ("-" is standard input) as the main buffer of `sourceMgr`
/// and parses it. A file that cannot be read is reported through
/// `sourceMgr` too: "error: cannot open input file 'x': <reason>".
std::optional<Module> parseFlashFile(llvm::StringRef path, llvm::SourceMgr &sourceMgr);

/// What an expression reads when evaluated for one (b, h, i, j).
struct EvalContext {
  double score = 0; // s, already scaled
  int64_t b = 0, h = 0, i = 0, j = 0;
  llvm::ArrayRef<double> params;    // by Variant::params index
  llvm::ArrayRef<int64_t> dimSizes; // by DimRole
  /// Reads element `indices` of aux tensor `tensorIndex`; a read outside the
  /// tensor returns 0 (the same rule the GPU's predicated loads follow).
  std::function<double(int tensorIndex, llvm::ArrayRef<int64_t> indices)>
      readTensor;
};

/// Evaluates a checked expression in fp64 (Bool as 0/1, Int with i32
/// wrap-around and truncating division). This is the naive reference's view
/// of the language, independent of the flash IR.
double evaluate(const Expr &expr, const EvalContext &context);

/// A value and its derivative with respect to one input.
struct Tangent {
  double value = 0, derivative = 0;
};

/// Evaluates a checked expression and, by forward-mode dual numbers (not
/// through the symbolic derivatives of Derivative.h, which it checks), its
/// derivative with respect to `wrt`: the score s when null, else that float
/// aux tensor read (an Index node of `expr`). Int and Bool nodes have
/// derivative 0; the conventions at kinks match Derivative.h.
Tangent evaluateTangent(const Expr &expr, const EvalContext &context, const Expr *wrt);

/// The scale of the rounding error of evaluating `expr` in f32 at `context`,
/// to first order: every Float operation adds its result's magnitude and
/// propagates its operands' scales (|b|·Ca + |a|·Cb for a product, ...); the
/// f32 error is about 2^-24 times this. Int and Bool nodes are exact (0).
/// It is what a cancelling expression (30 / s - 30 / s) costs in f32.
double roundingScale(const Expr &expr, const EvalContext &context);

} // namespace flashc::frontend

#endif // FLASHC_FRONTEND_FRONTEND_H
