//===- DifferentialCheck.h - One generated variant, every check -*- C++ -*-===//
//
// What flashc-fuzz checks for each generated case (VariantGenerator.h):
//   1. the front end accepts it (a generated variant is valid by
//      construction: a rejection is a front-end or generator bug);
//   2. the interpreter, on the IR as IRGen builds it and after each pass of
//      the pipeline (fuse-rescale, classify-tiles, CSE, fold-scale), matches
//      the naive fp64 reference within a bound that accounts for the score
//      magnitude: f32 scores carry a relative rounding error of about 2^-24,
//      which softmax turns into an absolute error of the probabilities, so
//      the bound is the element type's plus 64 · 2^-24 · (1 + max |score|)
//      plus twice the largest change of the score mod under a perturbation
//      of s by 64 · 2^-24 · (1 + |s|) (what f32 rounding of s can do to
//      an ill-conditioned score such as c / s near s = 0);
//      LSE passes on its relative or its absolute error (rows whose LSE is
//      near 0 make the relative one meaningless);
//      a case whose bound would exceed `maxBound` (huge scores) or whose
//      reference sees a non-finite score is skipped, not failed;
//   3. every claim flash-classify-tiles makes holds, element by element
//      (interp::RunOptions::checkClassification);
//   4. for bf16/f16 variants, --emit=ptx succeeds for sm_90a and sm_80 at
//      the default tile and ptxas assembles the result;
//   5. the backward kernel (after the pipeline, from the forward's O and
//      LSE) matches the fp64 reference's dQ, dK, dV and aux gradients, with
//      the tile claims checked in its transposed loop too. Its bound adds
//      to O's four times the score error and four times the largest
//      relative change of ∂score/∂s under the same perturbation of s; each
//      gradient's error is relative to the magnitudes of the terms summed
//      into it (ReferenceGradients::*Sizes), since random scores make
//      one-hot rows whose dP − Δ cancels; the max-abs error may pass
//      instead.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_FUZZ_DIFFERENTIALCHECK_H
#define FLASHC_FUZZ_DIFFERENTIALCHECK_H

#include "flashc/Fuzz/VariantGenerator.h"

#include <string>

namespace flashc::fuzz {

struct CheckOptions {
  /// Check 4 (PTX for both targets).
  bool ptx = true;
  /// ptxas for check 4; empty: the PTX is not assembled.
  std::string ptxas;
  /// Cases whose score-aware bound on O exceeds this are skipped.
  double maxBound = 0.05;
  /// Check 5 (the backward pass).
  bool backward = true;
};

enum class Outcome { Pass, Skip, Fail };

struct CheckResult {
  Outcome outcome = Outcome::Pass;
  /// Fail: which check ("front end", "interpreter after flash-classify-tiles",
  /// "ptx sm_90a", ...); Skip: why.
  std::string stage;
  std::string message;
};

CheckResult checkCase(const GeneratedCase &c, const CheckOptions &options);

/// How minimize runs a check (checkCase, or checkCase in a child process).
using CheckFn = CheckResult (*)(const GeneratedCase &, const CheckOptions &);

/// The smallest simplification of a failing `c` that still fails at the
/// same stage, checked by `check` (at most `budget` checks).
GeneratedCase minimize(const GeneratedCase &c, const CheckResult &failure,
                       const CheckOptions &options, CheckFn check = checkCase,
                       int budget = 300);

} // namespace flashc::fuzz

#endif // FLASHC_FUZZ_DIFFERENTIALCHECK_H
