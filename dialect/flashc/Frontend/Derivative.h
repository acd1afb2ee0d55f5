//===- Derivative.h - Symbolic derivatives of score expressions -*- C++ -*-===//
//
// The backward pass needs ∂score/∂s for the chain rule through a score
// modification, and ∂score/∂t for each read t of a float aux tensor (a
// learnable bias) to accumulate that tensor's gradient. Both are formed here
// at compile time as checked expressions of the same language (so IRGen
// lowers them like any other expression) and simplified. Masks are never
// differentiated: they are piecewise constant in every input.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_FRONTEND_DERIVATIVE_H
#define FLASHC_FRONTEND_DERIVATIVE_H

#include "flashc/Frontend/AST.h"

#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <optional>
#include <vector>

namespace flashc::frontend {

/// The partial derivatives of a variant's score expression.
struct ScoreDerivatives {
  /// ∂score/∂s; null when the variant has no score expression (identity).
  std::unique_ptr<Expr> wrtScore;
  /// One entry per read of a float aux tensor in the score, in source order
  /// (two reads of one tensor are two entries: their gradients add).
  struct TensorRead {
    const Expr *read = nullptr;    // the Index node in Variant::score
    std::unique_ptr<Expr> partial; // ∂score/∂(that element)
  };
  std::vector<TensorRead> tensorReads;
};

/// The most nodes one derivative may have. Repeated chain rules through
/// nested calls grow the expression; past this bound the backward kernel's
/// scalar code would be unreasonable, so it is a compile error instead.
constexpr int64_t kMaxDerivativeNodes = 4096;

/// Differentiates `variant.score` symbolically (with respect to s and to
/// each float aux tensor read). Reports a located error through `sourceMgr`
/// and returns nullopt when a derivative cannot be formed.
std::optional<ScoreDerivatives> differentiateScore(const Variant &variant,
                                                   llvm::SourceMgr &sourceMgr);

/// ∂expr/∂wrt, simplified: `wrt` null differentiates with respect to s,
/// otherwise with respect to that Index node (identity, not equality: two
/// reads of the same element are two variables). Int and Bool expressions
/// have derivative 0 (they are piecewise constant). Null when forming it
/// would copy more than 8 · kMaxDerivativeNodes nodes (deeply nested calls).
std::unique_ptr<Expr> differentiate(const Expr &expr, const Expr *wrt);

/// A deep copy (types, declarations and locations included).
std::unique_ptr<Expr> clone(const Expr &expr);

/// The number of nodes of an expression tree.
int64_t countNodes(const Expr &expr);

} // namespace flashc::frontend

#endif // FLASHC_FRONTEND_DERIVATIVE_H
