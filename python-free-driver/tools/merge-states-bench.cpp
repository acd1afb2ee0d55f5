//===- merge-states-bench.cpp - Time flashrun::StateMerger -----------------===//
//
// Merges S random f32 states (rows x D, LSEs spread over +-8, a few rows no
// state sees) into bf16 on the GPU, checks sampled rows against an fp64
// merge, then times the merge (CUDA events, warm-up, median) and prints one
// CSV row per case: states,rows,D,ms,GBps,max_rel_err,status, where GBps
// counts the bytes read (S states' O and LSE) and written (O and LSE).
// Links libflashrun only: it runs wherever the CUDA driver does.
//
//   merge-states-bench [rows] [D]      (default 262144 rows, D = 128;
//                                       S = 2, 4, 8, 16)
//
//===----------------------------------------------------------------------===//

#include "flashrt/Runtime.h"
#include "flashrt/Timing.h"
#include "flashrun/MergeStates.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

float fromBf16(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

/// One case; returns false when the merged rows miss the fp64 merge.
bool runCase(flashrt::Context &context, int states, int64_t rows, int64_t dim) {
  std::mt19937_64 rng(states * 7919 + rows);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> spread(-8, 8);
  std::vector<std::vector<float>> o(states, std::vector<float>(rows * dim)),
      lse(states, std::vector<float>(rows));
  for (int s = 0; s < states; ++s) {
    for (float &value : o[s])
      value = normal(rng);
    for (int64_t r = 0; r < rows; ++r)
      // Every 1000th row: no state sees it.
      lse[s][r] = r % 1000 == 0 ? -INFINITY : spread(rng);
  }
  std::vector<flashrt::DeviceBuffer> buffers;
  std::vector<flashrun::StateRef> refs;
  for (int s = 0; s < states; ++s) {
    buffers.emplace_back(context, o[s].size() * 4);
    buffers.back().copyFromHost(o[s].data(), o[s].size() * 4);
    buffers.emplace_back(context, lse[s].size() * 4);
    buffers.back().copyFromHost(lse[s].data(), lse[s].size() * 4);
    refs.push_back({buffers[2 * s].devicePtr(), buffers[2 * s + 1].devicePtr(), dim});
  }
  flashrt::DeviceBuffer outO(context, rows * dim * 2), outLse(context, rows * 4);
  flashrt::Stream stream(context);
  flashrun::StateMerger merger(context, "f32", "bf16");
  flashrun::StateRef out{outO.devicePtr(), outLse.devicePtr(), dim};
  auto merge = [&] { merger.merge(stream, refs, out, rows, dim); };
  merge();
  stream.synchronize();
  std::vector<uint16_t> gotO(rows * dim);
  std::vector<float> gotLse(rows);
  outO.copyToHost(gotO.data(), gotO.size() * 2);
  outLse.copyToHost(gotLse.data(), gotLse.size() * 4);
  // Every 97th row against the fp64 merge (rows no state sees: O = 0,
  // LSE = -inf).
  double worst = 0;
  bool ok = true;
  for (int64_t r = 0; r < rows; r += 97) {
    double largest = -INFINITY;
    for (int s = 0; s < states; ++s)
      largest = std::max(largest, double(lse[s][r]));
    if (largest == -INFINITY) {
      ok &= gotLse[r] == -INFINITY;
      for (int64_t d = 0; d < dim; ++d)
        ok &= fromBf16(gotO[r * dim + d]) == 0.0f;
      continue;
    }
    double total = 0;
    std::vector<double> want(dim, 0.0);
    for (int s = 0; s < states; ++s) {
      double weight = std::exp(lse[s][r] - largest);
      total += weight;
      for (int64_t d = 0; d < dim; ++d)
        want[d] += weight * o[s][r * dim + d];
    }
    double wantLse = largest + std::log(total);
    ok &= std::fabs(gotLse[r] - wantLse) <= 1e-5 * (1 + std::fabs(wantLse));
    for (int64_t d = 0; d < dim; ++d) {
      double error = std::fabs(fromBf16(gotO[r * dim + d]) - want[d] / total);
      worst = std::max(worst, error / (std::fabs(want[d] / total) + 0.05));
    }
  }
  ok &= worst <= 1e-2 && std::isfinite(worst);
  double ms = flashrt::median(flashrt::timeLaunches(stream, 10, 100, merge));
  double bytes = double(states) * rows * (dim * 4 + 4) + double(rows) * (dim * 2 + 4);
  std::printf("%d,%lld,%lld,%.4f,%.0f,%.2e,%s\n", states, static_cast<long long>(rows),
              static_cast<long long>(dim), ms, bytes / (ms * 1e-3) / 1e9, worst,
              ok ? "ok" : "FAIL");
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  int64_t rows = argc > 1 ? std::atoll(argv[1]) : 262144;
  int64_t dim = argc > 2 ? std::atoll(argv[2]) : 128;
  try {
    flashrt::Context context;
    std::printf("states,rows,D,ms,GBps,max_rel_err,status\n");
    bool ok = true;
    for (int states : {2, 4, 8, 16})
      ok &= runCase(context, states, rows, dim);
    return ok ? 0 : 1;
  } catch (const flashrt::Error &error) {
    std::fprintf(stderr, "merge-states-bench: %s\n", error.what());
    return flashrt::exitCodeFor(error.kind());
  }
}
