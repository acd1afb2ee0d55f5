// Calls the AOT varlen kernel of bench/inputs/varlen_pair.flash through its C
// API on a packed batch of ragged sequences (lengths 300, 1, 0, 517, packed
// from row 3, FlashAttention-2's layout: token-major [rows, heads, D], LSE
// [H, rows]) and checks every sequence against the AOT dense kernel of the
// same causal variant run on that sequence alone (B = 1, BSHD strides
// straight into the packed tensors). Written by
//   flashc bench/inputs/varlen_pair.flash --emit=aot --shape H=8,HKV=2,D=128 -o <dir>
// Exit codes: 0 ok, 1 a mismatch or non-finite value, 3 no GPU or driver,
// else the launch's code.
#include "bf16.h"
#include "dense_causal.h"
#include "varlen_causal.h"

#include "flashrt/Runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

int main() {
  const int64_t H = 8, HKV = 2, D = 128;
  const std::vector<int32_t> lengths = {300, 1, 0, 517};
  const int64_t B = static_cast<int64_t>(lengths.size()), N = 517;
  std::vector<int32_t> offsets = {3};
  for (int32_t length : lengths)
    offsets.push_back(offsets.back() + length);
  const int64_t rows = offsets.back();
  std::string whyNot;
  if (!flashrt::Driver::available(&whyNot)) {
    std::fprintf(stderr, "aot-varlen: no GPU: %s\n", whyNot.c_str());
    return 3;
  }
  flashrt::Context context;
  std::mt19937 random(11);
  std::normal_distribution<float> normal;
  auto randomBuffer = [&](int64_t heads) {
    std::vector<uint16_t> host(static_cast<size_t>(rows * heads * D));
    for (uint16_t &value : host)
      value = toBf16(normal(random));
    flashrt::DeviceBuffer buffer(context, host.size() * 2);
    buffer.copyFromHost(host.data(), host.size() * 2);
    return buffer;
  };
  flashrt::DeviceBuffer q = randomBuffer(H), k = randomBuffer(HKV), v = randomBuffer(HKV);
  flashrt::DeviceBuffer o(context, rows * H * D * 2), dense(context, rows * H * D * 2);
  flashrt::DeviceBuffer lse(context, H * rows * 4), denseLse(context, H * N * 4);
  flashrt::DeviceBuffer cu(context, offsets.size() * 4);
  cu.copyFromHost(offsets.data(), offsets.size() * 4);
  o.fill(0xFF);
  dense.fill(0xFF);
  auto packed = [&](const flashrt::DeviceBuffer &buffer, int64_t heads) {
    return flashc_tensor{buffer.devicePtr(), 0, D, heads * D};
  };
  auto launchFailed = [](const char *which, int status, const char *error) {
    if (status != 0)
      std::fprintf(stderr, "aot-varlen: %s launch failed (%d): %s\n", which, status, error);
    return status != 0;
  };
  int status = flashc_varlen_causal_launch(nullptr, packed(q, H), packed(k, HKV), packed(v, HKV),
                                           packed(o, H), lse.devicePtr(), B, H, HKV, N, N,
                                           cu.devicePtr(), rows, cu.devicePtr(), rows);
  if (launchFailed("varlen", status, flashc_varlen_causal_error()))
    return status;
  std::vector<float> varlenLse(H * rows);
  context.synchronize();
  lse.copyToHost(varlenLse.data(), varlenLse.size() * 4);
  double worst = 0, worstLse = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = lengths[b];
    if (n == 0)
      continue;
    // Sequence b alone: BSHD views of its rows in the packed tensors.
    auto view = [&](const flashrt::DeviceBuffer &buffer, int64_t heads) {
      return flashc_tensor{buffer.devicePtr() + 2 * uint64_t(offsets[b] * heads * D),
                           n * heads * D, D, heads * D};
    };
    status = flashc_dense_causal_launch(nullptr, view(q, H), view(k, HKV), view(v, HKV),
                                        view(dense, H), denseLse.devicePtr(), 1, H, HKV, n, n);
    if (launchFailed("dense", status, flashc_dense_causal_error()))
      return status;
    std::vector<float> alone(H * n);
    context.synchronize();
    denseLse.copyToHost(alone.data(), alone.size() * 4);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) {
        float got = varlenLse[h * rows + offsets[b] + i], want = alone[h * n + i];
        if (!std::isfinite(got))
          worstLse = INFINITY;
        worstLse = std::max(worstLse, double(std::fabs(got - want)) / (1 + std::fabs(want)));
      }
  }
  std::vector<uint16_t> got(rows * H * D), want(rows * H * D);
  o.copyToHost(got.data(), got.size() * 2);
  dense.copyToHost(want.data(), want.size() * 2);
  int64_t stray = 0;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t e = 0; e < H * D; ++e) {
      size_t index = static_cast<size_t>(row * H * D + e);
      if (row < offsets.front()) {
        stray += got[index] != 0xFFFF; // no sequence owns it: untouched
        continue;
      }
      float a = fromBf16(got[index]), w = fromBf16(want[index]);
      if (!std::isfinite(a) || !std::isfinite(w))
        worst = INFINITY;
      else
        worst = std::max(worst, double(std::fabs(a - w)) / (std::fabs(w) + 0.05));
    }
  std::printf("aot-varlen: B=%lld H=%lld HKV=%lld N<=%lld D=%lld rows=%lld  max rel |O - dense| "
              "%.2e, |LSE - dense| %.2e, stray rows %lld\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(HKV),
              static_cast<long long>(N), static_cast<long long>(D), static_cast<long long>(rows),
              worst, worstLse, static_cast<long long>(stray));
  return worst <= 2e-2 && worstLse <= 1e-4 && stray == 0 ? 0 : 1;
}
