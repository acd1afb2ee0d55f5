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
};

struct ReferenceOutputs {
  std::vector<double> out, lse;
};

/// GQA maps query head h to key/value head h / (H / HKV). A row that sees no
/// key gets O = 0 and LSE = -inf.
ReferenceOutputs naiveAttention(const AttentionInputs &inputs, const ReferenceSpec &spec);

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

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_REFERENCE_H
