//===- Reference.h - Naive fp64 attention and error metrics -----*- C++ -*-===//
//
// softmax(scale·QKᵀ + score mod, mask → -inf)·V row by row in double, with no
// tiling and no online softmax: the check of the interpreter. Masks and score
// mods come in as plain callbacks, so a test can hand-write them and the
// driver can evaluate the .flash syntax tree directly.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_INTERPRETER_REFERENCE_H
#define FLASHC_INTERPRETER_REFERENCE_H

#include "flashc/Interpreter/Interpreter.h"

#include <functional>

namespace flashc::interp {

struct ReferenceSpec {
  double scale = 1.0;
  /// New score from the scaled score; null keeps it.
  std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)> score;
  /// Whether key j is visible to query i; null shows every key.
  std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)> mask;

  // The backward pass.
  /// ∂score/∂s at the scaled score s; null: 1 (no score modification).
  std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)> scoreDerivative;
  /// The absolute error with which a kernel evaluates ∂score/∂s in f32 (its
  /// symbolic derivative's rounding); null: none. Only widens *Errors.
  std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)>
      scoreDerivativeError;
  /// add(tensor, indices, ∂score/∂element): one call per float aux tensor
  /// element the score reads at (s, b, h, i, j). Null: it reads none.
  using TensorPartialFn =
      std::function<void(llvm::StringRef, llvm::ArrayRef<int64_t>, double)>;
  std::function<void(double s, int64_t b, int64_t h, int64_t i, int64_t j,
                     const TensorPartialFn &add)>
      tensorPartials;
};

struct ReferenceOutputs {
  std::vector<double> out, lse;
};

/// GQA maps query head h to key/value head h / (H / HKV). A row that sees no
/// key gets O = 0 and LSE = -inf.
ReferenceOutputs naiveAttention(const AttentionInputs &inputs, const ReferenceSpec &spec);

/// The gradients of L = Σ dO ∘ O: dQ like q, dK and dV like k (summed over
/// the query heads of a KV group), and one gradient per float aux tensor the
/// score reads (by name, the tensor's shape; absent when no visible element
/// reached the tensor, i.e. all zero).
struct ReferenceGradients {
  std::vector<double> dq, dk, dv;
  llvm::StringMap<std::vector<double>> tensorGrads;
  /// Per gradient element, the sum of the magnitudes of the terms added into
  /// it (with P·(|dP| + Σ_d |dO_d·O_d|) for P·(dP − Δ): Δ's own terms,
  /// which cancel in Δ but not in its rounding): the scale of its rounding
  /// error. A bias that shifts a whole row (slopes[h] · i) has a true
  /// gradient of exactly 0, and a one-hot row's dP − Δ cancels; f32 (and a
  /// Δ from the rounded O) reach them only up to terms this large.
  std::vector<double> dqSizes, dkSizes, dvSizes;
  llvm::StringMap<std::vector<double>> tensorGradSizes;
  /// With spec.scoreDerivativeError: the absolute error it explains in dQ
  /// and dK (|dZ|·error·scale·|k| or |q| summed), else zeros.
  std::vector<double> dqErrors, dkErrors;
};

/// The analytic backward of naiveAttention in fp64, row by row: P from the
/// exact softmax, dP = dO·Vᵀ, Δ = rowsum(P ∘ dP), dZ = P ∘ (dP − Δ), then the
/// chain rule through the score (spec.scoreDerivative, spec.tensorPartials).
/// A row that sees no key contributes nothing. `outputGrad` is dO [B, H, N, D].
ReferenceGradients naiveAttentionBackward(const AttentionInputs &inputs,
                                          const ReferenceSpec &spec,
                                          llvm::ArrayRef<float> outputGrad);

struct ErrorStats {
  double maxAbs = 0;   // max |out - ref|
  double relative = 0; // ||out - ref||_2 / ||ref||_2
  int64_t nonFinite = 0;  // NaN, or an infinity where the reference is finite
  int64_t mismatchedInf = 0; // -inf LSE on one side only
  bool passes(double bound) const {
    return nonFinite == 0 && mismatchedInf == 0 && relative <= bound;
  }
};

/// Compares elementwise; equal infinities (LSE of an empty row) agree.
ErrorStats compare(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected);
/// The same, but `relative` is ||actual - expected||_2 / ||sizes||_2: the
/// error of a sum relative to the sum of its terms' magnitudes
/// (ReferenceGradients::tensorGradSizes).
ErrorStats compare(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected,
                   llvm::ArrayRef<double> sizes);
/// The same, after forgiving ||explained||_2 of the error (an absolute error
/// the caller can account for, ReferenceGradients::dqErrors).
ErrorStats compare(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected,
                   llvm::ArrayRef<double> sizes, llvm::ArrayRef<double> explained);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_REFERENCE_H
