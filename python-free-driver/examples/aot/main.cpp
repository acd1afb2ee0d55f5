// Calls the AOT causal kernel (D = 128, bf16) on random inputs through its C
// API and checks the output is finite and not all zero. Exit codes: 0 ok,
// 1 bad output, 3 no GPU or driver (nothing ran), else the launch's code.
#include "bf16.h"
#include "causal.h"

#include "flashrt/Runtime.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

int main() {
  const int64_t B = 2, H = 4, N = 1000, D = 128;
  std::string whyNot;
  if (!flashrt::Driver::available(&whyNot)) {
    std::fprintf(stderr, "aot-causal: no GPU: %s\n", whyNot.c_str());
    return 3;
  }
  flashrt::Context context;
  size_t elements = static_cast<size_t>(B * H * N * D);
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> host(elements);
  flashrt::DeviceBuffer q(context, elements * 2), k(context, elements * 2),
      v(context, elements * 2), o(context, elements * 2),
      lse(context, static_cast<size_t>(B * H * N) * 4);
  for (flashrt::DeviceBuffer *buffer : {&q, &k, &v}) {
    for (uint16_t &value : host)
      value = toBf16(uniform(random));
    buffer->copyFromHost(host.data(), elements * 2);
  }
  flashc_tensor layout = {0, H * N * D, N * D, D}; // BHSD
  flashc_tensor tq = layout, tk = layout, tv = layout, to = layout;
  tq.data = q.devicePtr();
  tk.data = k.devicePtr();
  tv.data = v.devicePtr();
  to.data = o.devicePtr();
  int status = flashc_causal_launch(nullptr, tq, tk, tv, to, lse.devicePtr(), B, H, H, N, N);
  if (status != 0) {
    std::fprintf(stderr, "aot-causal: launch failed (%d): %s\n", status, flashc_causal_error());
    return status;
  }
  context.synchronize();
  o.copyToHost(host.data(), elements * 2);
  double sum = 0;
  for (uint16_t value : host) {
    float x = fromBf16(value);
    if (!std::isfinite(x)) {
      std::fprintf(stderr, "aot-causal: non-finite output\n");
      return 1;
    }
    sum += std::fabs(x);
  }
  std::printf("aot-causal: B=%lld H=%lld N=%lld D=%lld  mean |O| = %.4f\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(N),
              static_cast<long long>(D), sum / static_cast<double>(elements));
  return sum > 0 ? 0 : 1;
}
