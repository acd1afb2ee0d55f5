//===- Reference.cpp - Naive fp64 attention and error metrics -------------===//

#include "flashc/Interpreter/Reference.h"

#include <cassert>
#include <cmath>
#include <limits>

using namespace flashc;
using namespace flashc::interp;

/// The scaled scores, the (modified) logits and the visibility of row i of
/// (b, h) against every key; returns the row's largest logit (-inf when no
/// key is visible). A logit of -inf counts as masked.
static double rowLogits(const AttentionInputs &inputs, const ReferenceSpec &spec, int64_t b,
                        int64_t h, int64_t i, std::vector<double> &scaled,
                        std::vector<double> &logits, std::vector<bool> &visible) {
  const ProblemShape &shape = inputs.shape;
  int64_t H = shape.heads(), HKV = shape.kvHeads(), N = shape.queryLen(), D = shape.headDim();
  // A paged cache's sequences have their own lengths; keys past one are
  // not there (visible[j] false).
  int64_t M = shape.keyLen(), keys = sequenceKeyLength(inputs, b);
  int64_t kvHead = h / (H / HKV);
  const float *q = &inputs.q[((b * H + h) * N + i) * D];
  double rowMax = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < M; ++j) {
    visible[j] = j < keys && (!spec.mask || spec.mask(b, h, i, j));
    if (!visible[j])
      continue;
    // A page outside the cache (checkInputs reports it) reads zeros, as
    // the kernels do.
    static const std::vector<float> zeros(1 << 16, 0.0f);
    const float *k = keyValueRow(inputs, inputs.k, b, kvHead, j);
    if (!k)
      k = zeros.data();
    double dot = 0;
    for (int64_t d = 0; d < D; ++d)
      dot += static_cast<double>(q[d]) * static_cast<double>(k[d]);
    scaled[j] = spec.scale * dot;
    logits[j] = spec.score ? spec.score(scaled[j], b, h, i, j) : scaled[j];
    if (logits[j] == -std::numeric_limits<double>::infinity())
      visible[j] = false;
    else
      rowMax = std::max(rowMax, logits[j]);
  }
  return rowMax;
}

ReferenceOutputs interp::naiveAttention(const AttentionInputs &inputs,
                                        const ReferenceSpec &spec) {
  const ProblemShape &shape = inputs.shape;
  int64_t B = shape.batch(), H = shape.heads(), HKV = shape.kvHeads(), N = shape.queryLen(),
          M = shape.keyLen(), D = shape.headDim();
  int64_t group = H / HKV;
  ReferenceOutputs result;
  result.out.assign(B * H * N * D, 0.0);
  result.lse.assign(B * H * N, -std::numeric_limits<double>::infinity());
  std::vector<double> scaled(M), logits(M);
  std::vector<bool> visible(M);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t kvHead = h / group;
      // A varlen sequence's rows past its queries are none: O = 0, LSE = -inf.
      for (int64_t i = 0; i < sequenceQueryLength(inputs, b); ++i) {
        double rowMax = rowLogits(inputs, spec, b, h, i, scaled, logits, visible);
        int64_t row = (b * H + h) * N + i;
        if (rowMax == -std::numeric_limits<double>::infinity())
          continue; // no visible key: O = 0, LSE = -inf
        double sum = 0;
        double *out = &result.out[row * D];
        for (int64_t j = 0; j < M; ++j) {
          if (!visible[j])
            continue;
          double p = std::exp(logits[j] - rowMax);
          sum += p;
          const float *v = keyValueRow(inputs, inputs.v, b, kvHead, j);
          if (!v) // a page outside the cache: zeros
            continue;
          for (int64_t d = 0; d < D; ++d)
            out[d] += p * static_cast<double>(v[d]);
        }
        for (int64_t d = 0; d < D; ++d)
          out[d] /= sum;
        result.lse[row] = rowMax + std::log(sum);
      }
    }
  return result;
}

ReferenceGradients interp::naiveAttentionBackward(const AttentionInputs &inputs,
                                                  const ReferenceSpec &spec,
                                                  llvm::ArrayRef<float> outputGrad) {
  // A paged cache and a varlen batch have no backward (IRGen refuses
  // them); k and v below are dense. Empty gradients fail any comparison.
  bool dense = !inputs.paged.enabled() && !inputs.varlen.packsQueries() &&
               !inputs.varlen.packsKeys();
  assert(dense && "the backward reference reads dense tensors");
  if (!dense)
    return {};
  const ProblemShape &shape = inputs.shape;
  int64_t B = shape.batch(), H = shape.heads(), HKV = shape.kvHeads(), N = shape.queryLen(),
          M = shape.keyLen(), D = shape.headDim();
  int64_t group = H / HKV;
  ReferenceGradients grads;
  grads.dq.assign(B * H * N * D, 0.0);
  grads.dk.assign(B * HKV * M * D, 0.0);
  grads.dv.assign(B * HKV * M * D, 0.0);
  grads.dqSizes.assign(grads.dq.size(), 0.0);
  grads.dkSizes.assign(grads.dk.size(), 0.0);
  grads.dvSizes.assign(grads.dv.size(), 0.0);
  grads.dqErrors.assign(grads.dq.size(), 0.0);
  grads.dkErrors.assign(grads.dk.size(), 0.0);
  ReferenceSpec::TensorPartialFn noTensor;
  std::vector<double> scaled(M), logits(M), probs(M), probGrads(M), out(D);
  std::vector<bool> visible(M);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t kvHead = h / group;
      auto keyRow = [&](const std::vector<float> &source, int64_t j) {
        return &source[((b * HKV + kvHead) * M + j) * D];
      };
      for (int64_t i = 0; i < N; ++i) {
        int64_t row = (b * H + h) * N + i;
        const float *q = &inputs.q[row * D];
        const float *dO = &outputGrad[row * D];
        double rowMax = rowLogits(inputs, spec, b, h, i, scaled, logits, visible);
        if (rowMax == -std::numeric_limits<double>::infinity())
          continue; // no visible key: every gradient of the row is 0
        double sum = 0;
        for (int64_t j = 0; j < M; ++j)
          if (visible[j])
            sum += probs[j] = std::exp(logits[j] - rowMax);
        double delta = 0;
        std::fill(out.begin(), out.end(), 0.0);
        for (int64_t j = 0; j < M; ++j) {
          if (!visible[j])
            continue;
          probs[j] /= sum;
          const float *v = keyRow(inputs.v, j);
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            dp += static_cast<double>(dO[d]) * static_cast<double>(v[d]);
            out[d] += probs[j] * static_cast<double>(v[d]);
          }
          probGrads[j] = dp;
          delta += probs[j] * dp;
        }
        // The size of Δ's terms: a kernel's Δ = rowsum(dO ∘ O) from the
        // stored, rounded O errs by up to an ulp of each dO_d · O_d, and
        // those terms cancel in Δ itself (found by flashc-fuzz, seed
        // 2026124312: s * abs(s) in f16, where |Δ| alone undercounted them
        // about 9 times).
        double deltaSize = 0;
        for (int64_t d = 0; d < D; ++d)
          deltaSize += std::fabs(static_cast<double>(dO[d]) * out[d]);
        for (int64_t j = 0; j < M; ++j) {
          if (!visible[j] || probs[j] == 0)
            continue;
          double modGrad = probs[j] * (probGrads[j] - delta); // ∂L/∂score
          // The size of what modGrad subtracts: dP - Δ cancels when P is
          // one-hot (then dP_j ≈ Δ), and a kernel's Δ comes from the stored,
          // rounded O.
          double modSize = probs[j] * (std::fabs(probGrads[j]) + deltaSize);
          double slope = spec.scoreDerivative ? spec.scoreDerivative(scaled[j], b, h, i, j) : 1.0;
          double scoreGrad = modGrad * slope, scoreSize = modSize * std::fabs(slope);
          double scoreError =
              spec.scoreDerivativeError
                  ? std::fabs(modGrad) * spec.scoreDerivativeError(scaled[j], b, h, i, j)
                  : 0.0;
          if (spec.tensorPartials)
            spec.tensorPartials(scaled[j], b, h, i, j,
                                [&](llvm::StringRef name, llvm::ArrayRef<int64_t> indices,
                                    double partial) {
                                  auto tensor = inputs.tensors.find(name);
                                  if (tensor == inputs.tensors.end())
                                    return;
                                  const HostTensor &decl = tensor->second;
                                  std::vector<double> &grad = grads.tensorGrads[name];
                                  grad.resize(decl.numElements(), 0.0);
                                  int64_t offset = 0;
                                  for (size_t d = 0; d < indices.size(); ++d) {
                                    if (indices[d] < 0 || indices[d] >= decl.shape[d])
                                      return; // the read gave 0: no gradient
                                    offset = offset * decl.shape[d] + indices[d];
                                  }
                                  grad[offset] += modGrad * partial;
                                  std::vector<double> &size = grads.tensorGradSizes[name];
                                  size.resize(decl.numElements(), 0.0);
                                  size[offset] += modSize * std::fabs(partial);
                                });
          const float *k = keyRow(inputs.k, j);
          double *dq = &grads.dq[row * D];
          double *dk = &grads.dk[((b * HKV + kvHead) * M + j) * D];
          double *dv = &grads.dv[((b * HKV + kvHead) * M + j) * D];
          double *dqSize = &grads.dqSizes[row * D];
          double *dkSize = &grads.dkSizes[((b * HKV + kvHead) * M + j) * D];
          double *dvSize = &grads.dvSizes[((b * HKV + kvHead) * M + j) * D];
          double *dqError = &grads.dqErrors[row * D];
          double *dkError = &grads.dkErrors[((b * HKV + kvHead) * M + j) * D];
          for (int64_t d = 0; d < D; ++d) {
            dq[d] += spec.scale * scoreGrad * static_cast<double>(k[d]);
            dk[d] += spec.scale * scoreGrad * static_cast<double>(q[d]);
            dv[d] += probs[j] * static_cast<double>(dO[d]);
            dqSize[d] += spec.scale * scoreSize * std::fabs(static_cast<double>(k[d]));
            dkSize[d] += spec.scale * scoreSize * std::fabs(static_cast<double>(q[d]));
            dvSize[d] += probs[j] * std::fabs(static_cast<double>(dO[d]));
            dqError[d] += spec.scale * scoreError * std::fabs(static_cast<double>(k[d]));
            dkError[d] += spec.scale * scoreError * std::fabs(static_cast<double>(q[d]));
          }
        }
      }
    }
  return grads;
}

ErrorStats interp::compare(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected,
                           llvm::ArrayRef<double> sizes, llvm::ArrayRef<double> explained) {
  ErrorStats stats = compare(actual, expected, sizes);
  double diffSquares = 0, sizeSquares = 0, explainedSquares = 0;
  for (size_t n = 0; n < std::min({actual.size(), expected.size(), sizes.size(),
                                   explained.size()});
       ++n) {
    double diff = std::isfinite(actual[n]) ? actual[n] - expected[n] : 0.0;
    diffSquares += diff * diff;
    sizeSquares += sizes[n] * sizes[n];
    explainedSquares += explained[n] * explained[n];
  }
  double unexplained = std::max(0.0, std::sqrt(diffSquares) - std::sqrt(explainedSquares));
  stats.relative = sizeSquares > 0 ? unexplained / std::sqrt(sizeSquares) : unexplained;
  return stats;
}

ErrorStats interp::compare(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected,
                           llvm::ArrayRef<double> sizes) {
  ErrorStats stats = compare(actual, expected);
  double diffSquares = 0, sizeSquares = 0;
  for (size_t n = 0; n < std::min({actual.size(), expected.size(), sizes.size()}); ++n) {
    double diff = std::isfinite(actual[n]) ? actual[n] - expected[n] : 0.0;
    diffSquares += diff * diff;
    sizeSquares += sizes[n] * sizes[n];
  }
  stats.relative =
      sizeSquares > 0 ? std::sqrt(diffSquares / sizeSquares) : std::sqrt(diffSquares);
  return stats;
}

ErrorStats interp::compare(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected) {
  ErrorStats stats;
  double diffSquares = 0, refSquares = 0;
  size_t count = std::min(actual.size(), expected.size());
  if (actual.size() != expected.size())
    stats.nonFinite += static_cast<int64_t>(std::max(actual.size(), expected.size()) - count);
  for (size_t i = 0; i < count; ++i) {
    double a = actual[i], e = expected[i];
    if (std::isinf(e) || std::isinf(a)) {
      if (std::isnan(a))
        ++stats.nonFinite;
      else if (a != e)
        ++stats.mismatchedInf; // one side -inf (an empty row), the other not
      continue;
    }
    if (std::isnan(a) || std::isnan(e)) {
      ++stats.nonFinite;
      continue;
    }
    double diff = a - e;
    stats.maxAbs = std::max(stats.maxAbs, std::fabs(diff));
    diffSquares += diff * diff;
    refSquares += e * e;
  }
  stats.relative = refSquares > 0 ? std::sqrt(diffSquares / refSquares) : std::sqrt(diffSquares);
  return stats;
}
