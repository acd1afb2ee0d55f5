// Calls the AOT packed-documents kernel of examples/document.flash (D = 64,
// bf16) through its C API, with the block summary both ways: computed by
// each flashc_document_launch, and computed once by flashc_document_summary
// and shared by two "layers" (other q, k, v; the same document ids) through
// flashc_document_launch_with_summary; the backward the same way
// (flashc_document_backward against flashc_document_backward_summary once
// and flashc_document_backward_with_summary per layer). Written by
//   flashc examples/document.flash --bwd --deterministic --emit=aot --shape D=64 -o <dir>
// Checks: every forward output against an fp64 CPU reference of the masked
// attention (O and LSE), each shared-summary output (O, LSE, dQ, dK, dV)
// bitwise equal to the launch that computed its own summary (the backward
// is deterministic), gradients finite and not all zero, and a null summary
// refused with code 2 by both. Batch 0 packs documents of ragged lengths (sorted ids, one of a
// single token), batch 1 interleaves three ids in runs of 37 tokens, so the
// summary's interval analysis leaves tiles to its element walk.
// Exit codes: 0 ok, 1 a mismatch or non-finite value, 3 no GPU or driver,
// else the launch's code.
#include "bf16.h"
#include "document.h"

#include "flashrt/Runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

constexpr int64_t B = 2, H = 4, N = 1100, D = 64;

/// Document ids, [B, N]: batch 0 sorted with ragged lengths (and gaps
/// between the ids), batch 1 three ids interleaved in runs of 37.
std::vector<int32_t> documentIds() {
  std::vector<int32_t> ids;
  const int64_t lengths[] = {1, 300, 17, 500, 282};
  int32_t id = 3;
  for (int64_t length : lengths) {
    ids.insert(ids.end(), static_cast<size_t>(length), id);
    id += 2;
  }
  for (int64_t i = 0; i < N; ++i)
    ids.push_back(static_cast<int32_t>((i / 37) % 3));
  return ids;
}

struct Reference {
  std::vector<double> o, lse;
};

/// O and LSE (natural log) of softmax(q kᵀ / sqrt(D)) v where doc[b, i] ==
/// doc[b, j] and j <= i, in fp64 from the bf16 inputs ([B, H, N, D]).
Reference reference(const std::vector<uint16_t> &q, const std::vector<uint16_t> &k,
                    const std::vector<uint16_t> &v, const std::vector<int32_t> &doc) {
  Reference result;
  result.o.assign(static_cast<size_t>(B * H * N * D), 0.0);
  result.lse.assign(static_cast<size_t>(B * H * N), -std::numeric_limits<double>::infinity());
  // Each input converted once, not in the innermost loops.
  auto widen = [](const std::vector<uint16_t> &x) {
    std::vector<double> wide(x.size());
    for (size_t e = 0; e < x.size(); ++e)
      wide[e] = fromBf16(x[e]);
    return wide;
  };
  const std::vector<double> wq = widen(q), wk = widen(k), wv = widen(v);
  auto row = [](const std::vector<double> &x, int64_t b, int64_t h, int64_t r) {
    return &x[static_cast<size_t>(((b * H + h) * N + r) * D)];
  };
  std::vector<double> logits(N);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i) {
        double rowMax = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          if (doc[b * N + i] != doc[b * N + j])
            continue;
          const double *qi = row(wq, b, h, i), *kj = row(wk, b, h, j);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += qi[d] * kj[d];
          logits[j] = dot / std::sqrt(static_cast<double>(D));
          rowMax = std::max(rowMax, logits[j]);
        }
        double sum = 0;
        double *out = &result.o[static_cast<size_t>(((b * H + h) * N + i) * D)];
        for (int64_t j = 0; j <= i; ++j) {
          if (doc[b * N + i] != doc[b * N + j])
            continue;
          double p = std::exp(logits[j] - rowMax);
          sum += p;
          const double *vj = row(wv, b, h, j);
          for (int64_t d = 0; d < D; ++d)
            out[d] += p * vj[d];
        }
        for (int64_t d = 0; d < D; ++d)
          out[d] /= sum;
        result.lse[static_cast<size_t>((b * H + h) * N + i)] = rowMax + std::log(sum);
      }
  return result;
}

} // namespace

int main() {
  std::string whyNot;
  if (!flashrt::Driver::available(&whyNot)) {
    std::fprintf(stderr, "aot-documents: no GPU: %s\n", whyNot.c_str());
    return 3;
  }
  flashrt::Context context;
  const size_t elements = static_cast<size_t>(B * H * N * D), rows = static_cast<size_t>(B * H * N);
  std::vector<int32_t> doc = documentIds();
  flashrt::DeviceBuffer docBuffer(context, doc.size() * 4);
  docBuffer.copyFromHost(doc.data(), doc.size() * 4);
  const uint64_t summaryBytes = flashc_document_summary_bytes(B, H, H, N, N);
  if (summaryBytes == 0) {
    std::fprintf(stderr, "aot-documents: no summary size: %s\n", flashc_document_error());
    return 1;
  }
  flashrt::DeviceBuffer summary(context, summaryBytes);
  flashrt::DeviceBuffer q(context, elements * 2), k(context, elements * 2),
      v(context, elements * 2), own(context, elements * 2), shared(context, elements * 2),
      ownLse(context, rows * 4), sharedLse(context, rows * 4);
  flashc_tensor layout = {0, H * N * D, N * D, D}; // BHSD
  auto tensor = [&](const flashrt::DeviceBuffer &buffer) {
    flashc_tensor t = layout;
    t.data = buffer.devicePtr();
    return t;
  };
  auto failed = [](const char *what, int status) {
    if (status != 0)
      std::fprintf(stderr, "aot-documents: %s failed (%d): %s\n", what, status,
                   flashc_document_error());
    return status != 0;
  };

  // The summaries once, before any layer: they depend on the sizes and the
  // document ids only (the backward's is of its own tiling).
  int status = flashc_document_summary(nullptr, B, H, H, N, N, docBuffer.devicePtr(),
                                       summary.devicePtr());
  if (failed("flashc_document_summary", status))
    return status;
  flashrt::DeviceBuffer backwardSummary(context,
                                        flashc_document_backward_summary_bytes(B, H, H, N, N));
  status = flashc_document_backward_summary(nullptr, B, H, H, N, N, docBuffer.devicePtr(),
                                            backwardSummary.devicePtr());
  if (failed("flashc_document_backward_summary", status))
    return status;
  flashrt::DeviceBuffer outputGrad(context, elements * 2),
      workspace(context, flashc_document_backward_workspace(B, H, H, N, N));
  // dQ, dK, dV of the launch that computes its summary, then of the one
  // that reads the shared summary.
  std::vector<flashrt::DeviceBuffer> grads;
  for (int g = 0; g < 6; ++g)
    grads.emplace_back(context, elements * 2);

  std::mt19937 random(13);
  std::normal_distribution<float> normal;
  bool ok = true;
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<uint16_t> hq(elements), hk(elements), hv(elements);
    for (std::vector<uint16_t> *host : {&hq, &hk, &hv})
      for (uint16_t &value : *host)
        value = toBf16(normal(random));
    q.copyFromHost(hq.data(), elements * 2);
    k.copyFromHost(hk.data(), elements * 2);
    v.copyFromHost(hv.data(), elements * 2);
    own.fill(0xFF);
    shared.fill(0xFF);
    status = flashc_document_launch(nullptr, tensor(q), tensor(k), tensor(v), tensor(own),
                                    ownLse.devicePtr(), B, H, H, N, N, docBuffer.devicePtr());
    if (failed("flashc_document_launch", status))
      return status;
    status = flashc_document_launch_with_summary(nullptr, tensor(q), tensor(k), tensor(v),
                                                 tensor(shared), sharedLse.devicePtr(), B, H, H,
                                                 N, N, docBuffer.devicePtr(), summary.devicePtr());
    if (failed("flashc_document_launch_with_summary", status))
      return status;
    context.synchronize();
    std::vector<uint16_t> gotOwn(elements), gotShared(elements);
    std::vector<float> lseOwn(rows), lseShared(rows);
    own.copyToHost(gotOwn.data(), elements * 2);
    shared.copyToHost(gotShared.data(), elements * 2);
    ownLse.copyToHost(lseOwn.data(), rows * 4);
    sharedLse.copyToHost(lseShared.data(), rows * 4);

    int64_t differing = 0;
    for (size_t e = 0; e < elements; ++e)
      differing += gotOwn[e] != gotShared[e];
    for (size_t r = 0; r < rows; ++r)
      differing += std::memcmp(&lseOwn[r], &lseShared[r], 4) != 0;
    Reference want = reference(hq, hk, hv, doc);
    // O: ||O - ref||_2 / ||ref||_2, as flash-run checks it (an element of
    // a row with few keys carries P's bf16 rounding, a few percent of
    // itself); LSE per row, relative to 1 + |ref|. NaN never passes.
    double squaredError = 0, squaredReference = 0, worstLse = 0;
    int64_t nonFinite = 0;
    for (size_t e = 0; e < elements; ++e) {
      float got = fromBf16(gotShared[e]);
      nonFinite += !std::isfinite(got);
      squaredError += (got - want.o[e]) * (got - want.o[e]);
      squaredReference += want.o[e] * want.o[e];
    }
    for (size_t r = 0; r < rows; ++r) {
      nonFinite += !std::isfinite(lseShared[r]);
      double lseError = std::fabs(lseShared[r] - want.lse[r]) / (1 + std::fabs(want.lse[r]));
      worstLse = std::max(worstLse, lseError);
    }
    double relative = std::sqrt(squaredError / squaredReference);

    // The backward from the shared-summary launch's O and LSE, both ways.
    std::vector<uint16_t> hdo(elements);
    for (uint16_t &value : hdo)
      value = toBf16(normal(random));
    outputGrad.copyFromHost(hdo.data(), elements * 2);
    for (flashrt::DeviceBuffer &grad : grads)
      grad.fill(0xFF);
    for (int way = 0; way < 2; ++way) {
      auto args = [&](int g) { return tensor(grads[static_cast<size_t>(3 * way + g)]); };
      status = way == 0
                   ? flashc_document_backward(nullptr, tensor(q), tensor(k), tensor(v),
                                              tensor(shared), sharedLse.devicePtr(),
                                              tensor(outputGrad), args(0), args(1), args(2),
                                              workspace.devicePtr(), B, H, H, N, N,
                                              docBuffer.devicePtr(), 0)
                   : flashc_document_backward_with_summary(
                         nullptr, tensor(q), tensor(k), tensor(v), tensor(shared),
                         sharedLse.devicePtr(), tensor(outputGrad), args(0), args(1), args(2),
                         workspace.devicePtr(), B, H, H, N, N, docBuffer.devicePtr(), 0,
                         backwardSummary.devicePtr());
      if (failed(way == 0 ? "flashc_document_backward" : "flashc_document_backward_with_summary",
                 status))
        return status;
    }
    context.synchronize();
    int64_t gradsDiffering = 0, gradsNonFinite = 0, gradsNonZero = 0;
    for (int g = 0; g < 3; ++g) {
      std::vector<uint16_t> computed(elements), read(elements);
      grads[static_cast<size_t>(g)].copyToHost(computed.data(), elements * 2);
      grads[static_cast<size_t>(3 + g)].copyToHost(read.data(), elements * 2);
      for (size_t e = 0; e < elements; ++e) {
        gradsDiffering += computed[e] != read[e];
        gradsNonFinite += !std::isfinite(fromBf16(read[e]));
        gradsNonZero += fromBf16(read[e]) != 0.0f;
      }
    }
    bool backwardOk = gradsDiffering == 0 && gradsNonFinite == 0 && gradsNonZero > 0;
    std::printf("aot-documents: layer %d backward  dQ, dK, dV values differing between the "
                "own-summary and shared-summary launches %lld, non-finite %lld, non-zero %lld: "
                "%s\n",
                layer, static_cast<long long>(gradsDiffering),
                static_cast<long long>(gradsNonFinite), static_cast<long long>(gradsNonZero),
                backwardOk ? "ok" : "FAIL");
    ok = ok && backwardOk;
    bool layerOk = nonFinite == 0 && relative <= 1e-2 && worstLse <= 1e-4 && differing == 0;
    std::printf("aot-documents: layer %d B=%lld H=%lld N=%lld D=%lld  rel ||O - fp64|| %.2e, "
                "max rel |LSE - fp64| %.2e, non-finite %lld, shared-summary values differing "
                "from the own-summary launch's %lld: %s\n",
                layer, static_cast<long long>(B), static_cast<long long>(H),
                static_cast<long long>(N), static_cast<long long>(D), relative, worstLse,
                static_cast<long long>(nonFinite), static_cast<long long>(differing),
                layerOk ? "ok" : "FAIL");
    ok = ok && layerOk;
  }

  // A null summary is an argument error, not a launch.
  status = flashc_document_launch_with_summary(nullptr, tensor(q), tensor(k), tensor(v),
                                               tensor(shared), sharedLse.devicePtr(), B, H, H, N,
                                               N, docBuffer.devicePtr(), 0);
  bool refused = status == 2 && flashc_document_error()[0] != '\0';
  std::printf("aot-documents: null summary -> %d (%s): %s\n", status, flashc_document_error(),
              refused ? "ok" : "FAIL");
  status = flashc_document_backward_with_summary(
      nullptr, tensor(q), tensor(k), tensor(v), tensor(shared), sharedLse.devicePtr(),
      tensor(outputGrad), tensor(grads[0]), tensor(grads[1]), tensor(grads[2]),
      workspace.devicePtr(), B, H, H, N, N, docBuffer.devicePtr(), 0, 0);
  bool backwardRefused = status == 2 && flashc_document_error()[0] != '\0';
  std::printf("aot-documents: backward, null summary -> %d (%s): %s\n", status,
              flashc_document_error(), backwardRefused ? "ok" : "FAIL");
  return ok && refused && backwardRefused ? 0 : 1;
}
