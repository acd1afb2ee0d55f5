//===- BackwardCheck.h - The backward pass against fp64 ---------*- C++ -*-===//
//
// One call that every tool shares: run the backward kernel in the
// interpreter from the forward kernel's own O and LSE (as a training step
// does; the caller has run and checked the forward) and compare dQ, dK, dV and each aux tensor gradient
// with the analytic fp64 reference (naiveAttentionBackward).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_INTERPRETER_BACKWARDCHECK_H
#define FLASHC_INTERPRETER_BACKWARDCHECK_H

#include "flashc/Frontend/AST.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"

#include <string>
#include <vector>

namespace flashc::interp {

/// One gradient's comparison.
struct GradientCheck {
  std::string name; // "dQ", "dK", "dV", "d(bias)"
  ErrorStats stats;
  double bound = 0;
  bool passes() const { return stats.passes(bound); }
};

struct BackwardCheck {
  std::vector<GradientCheck> gradients;
  AttentionOutputs::TileCounts tiles; // the backward's mask tiles
  int64_t emptyRows = 0;              // rows that see no key
  double seconds = 0;                 // interpreter time of the backward
  bool passes() const;
};

/// Relative-error bound of the gradients by element type. The kernel feeds
/// P and dS to its GEMMs in the element type, and Δ comes from the stored
/// (rounded) O, so bf16 gradients carry a few bf16 ulps of error.
double gradientBound(mlir::Type elementType);

/// Runs `backward` on `inputs` from the forward's `outputs` with dO =
/// `outputGrad` and checks the gradients against the fp64 reference of
/// `variant`. Fails with a message when the kernel cannot run.
mlir::LogicalResult checkBackward(const AttentionOutputs &outputs,
                                  flash::BackwardKernelOp backward,
                                  const frontend::Variant &variant,
                                  const AttentionInputs &inputs,
                                  llvm::ArrayRef<float> outputGrad, BackwardCheck &result,
                                  std::string &error);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_BACKWARDCHECK_H
