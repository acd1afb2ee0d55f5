//===- MergeStatesTest.cpp - The merge-states kernel ----------------------===//
//
// The generated PTX assembles (ptxas, where the CUDA toolkit is installed)
// and bad arguments are refused without a GPU; on a GPU the merge matches
// an fp64 merge written here, including rows no state sees, states that see
// nothing but hold garbage, NaN LSEs and merging in place. Elsewhere the
// GPU tests report themselves SKIPPED.
//
//===----------------------------------------------------------------------===//
#include "flashrun/MergeStates.h"
#include "flashrun/merge_states.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <unistd.h>

using flashrun::StateMerger;
using flashrun::StateRef;
using ::testing::HasSubstr;

namespace {

std::string errorOf(const std::function<void()> &call) {
  try {
    call();
  } catch (const flashrt::Error &error) {
    return error.what();
  }
  return "";
}

TEST(MergeStatesPtx, AssemblesForEveryTypePairAndCount) {
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK) != 0)
    GTEST_SKIP() << "no ptxas at " << ptxas;
  for (const char *in : {"f32", "bf16", "f16"})
    for (const char *out : {"f32", "bf16", "f16"})
      for (int states : {1, 3, StateMerger::kMaxStates}) {
        std::string path = ::testing::TempDir() + "merge_states.ptx";
        std::ofstream(path) << StateMerger::ptx(states, in, out);
        for (const char *arch : {"sm_80", "sm_90a"}) {
          std::string command = std::string(ptxas) + " -arch=" + arch + " " + path +
                                " -o /dev/null 2>&1";
          EXPECT_EQ(std::system(command.c_str()), 0)
              << in << " -> " << out << ", " << states << " states, " << arch;
        }
      }
}

TEST(MergeStatesPtx, RefusesWhatItCannotMerge) {
  EXPECT_THAT(errorOf([] { StateMerger::ptx(0, "f32", "f32"); }), HasSubstr("no kernel for 0"));
  EXPECT_THAT(errorOf([] { StateMerger::ptx(StateMerger::kMaxStates + 1, "f32", "f32"); }),
              HasSubstr("no kernel for 65"));
  EXPECT_THAT(errorOf([] { StateMerger::ptx(2, "i32", "f32"); }), HasSubstr("of i32 into f32"));
}

TEST(MergeStatesC, RefusesBadArgumentsBeforeTouchingTheGpu) {
  flashrun_state state{0, 0, 128};
  EXPECT_EQ(flashrun_merge_states(nullptr, nullptr, "bf16", &state, 1, state, 4, 128), 2);
  EXPECT_STREQ(flashrun_merge_states_error(),
               "the state and output element types must not be null");
  EXPECT_EQ(flashrun_merge_states(nullptr, "f32", "bf16", &state, 0, state, 4, 128), 2);
  EXPECT_STREQ(flashrun_merge_states_error(), "merge states takes 1 to 64 states, got 0");
  EXPECT_EQ(flashrun_merge_states(nullptr, "f32", "bf16", nullptr, 2, state, 4, 128), 2);
  EXPECT_STREQ(flashrun_merge_states_error(),
               "merge states takes 1 to 64 states, got 2 (null array)");
  std::vector<flashrun_state> many(65, state);
  EXPECT_EQ(flashrun_merge_states(nullptr, "f32", "bf16", many.data(), 65, state, 4, 128), 2);
}

class MergeStatesGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string whyNot;
    if (!flashrt::Driver::available(&whyNot))
      GTEST_SKIP() << "no CUDA driver/GPU: " << whyNot;
    context = std::make_unique<flashrt::Context>();
    if (context->device().computeCapability().number() < 80)
      GTEST_SKIP() << "the merge kernel targets sm_80";
  }
  std::unique_ptr<flashrt::Context> context;
};

float fromBf16(uint16_t half) {
  uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

TEST_F(MergeStatesGpuTest, MatchesTheFp64MergeOnEveryKindOfRow) {
  const int64_t rows = 37, dim = 80, stride = 88, states = 3;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  std::vector<std::vector<float>> o(states, std::vector<float>(rows * stride));
  std::vector<std::vector<float>> lse(states, std::vector<float>(rows));
  for (int64_t s = 0; s < states; ++s)
    for (int64_t r = 0; r < rows; ++r) {
      lse[s][r] = 3 * normal(rng);
      for (int64_t d = 0; d < stride; ++d)
        o[s][r * stride + d] = normal(rng);
    }
  // Row 0: no state sees it (O = 0, LSE = -inf) although O holds NaN.
  // Row 1: state 1 sees nothing and holds NaN: it weighs nothing.
  // Row 2: a NaN LSE poisons the row. Row 3: LSEs far apart.
  for (int64_t s = 0; s < states; ++s) {
    lse[s][0] = -inf;
    o[s][0] = nan;
  }
  lse[1][1] = -inf;
  for (int64_t d = 0; d < dim; ++d)
    o[1][1 * stride + d] = nan;
  lse[2][2] = nan;
  lse[0][3] = 80;
  lse[1][3] = -80;

  // The fp64 merge.
  std::vector<double> wantO(rows * dim), wantLse(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    bool poisoned = false;
    for (int64_t s = 0; s < states; ++s) {
      poisoned |= std::isnan(lse[s][r]);
      m = std::max(m, static_cast<double>(lse[s][r]));
    }
    if (poisoned || m == -INFINITY) {
      wantLse[r] = poisoned ? NAN : -INFINITY;
      for (int64_t d = 0; d < dim; ++d)
        wantO[r * dim + d] = poisoned ? NAN : 0;
      continue;
    }
    double total = 0;
    for (int64_t s = 0; s < states; ++s) {
      double w = std::exp(lse[s][r] - m);
      if (w == 0)
        continue;
      total += w;
      for (int64_t d = 0; d < dim; ++d)
        wantO[r * dim + d] += w * o[s][r * stride + d];
    }
    for (int64_t d = 0; d < dim; ++d)
      wantO[r * dim + d] /= total;
    wantLse[r] = m + std::log(total);
  }

  auto upload = [&](const std::vector<float> &values) {
    flashrt::DeviceBuffer buffer(*context, values.size() * 4);
    buffer.copyFromHost(values.data(), values.size() * 4);
    return buffer;
  };
  std::vector<flashrt::DeviceBuffer> buffers;
  std::vector<StateRef> refs;
  for (int64_t s = 0; s < states; ++s) {
    buffers.push_back(upload(o[s]));
    buffers.push_back(upload(lse[s]));
    refs.push_back({buffers[2 * s].devicePtr(), buffers[2 * s + 1].devicePtr(), stride});
  }
  flashrt::DeviceBuffer outO(*context, rows * dim * 2), outLse(*context, rows * 4);
  flashrt::Stream stream(*context);
  StateMerger merger(*context, "f32", "bf16");
  merger.merge(stream, refs, {outO.devicePtr(), outLse.devicePtr(), dim}, rows, dim);
  stream.synchronize();
  std::vector<uint16_t> gotO(rows * dim);
  std::vector<float> gotLse(rows);
  outO.copyToHost(gotO.data(), gotO.size() * 2);
  outLse.copyToHost(gotLse.data(), gotLse.size() * 4);
  for (int64_t r = 0; r < rows; ++r) {
    if (std::isnan(wantLse[r]))
      EXPECT_TRUE(std::isnan(gotLse[r])) << "row " << r;
    else if (std::isinf(wantLse[r]))
      EXPECT_EQ(gotLse[r], wantLse[r]) << "row " << r;
    else
      EXPECT_NEAR(gotLse[r], wantLse[r], 1e-5 * (1 + std::fabs(wantLse[r]))) << "row " << r;
    for (int64_t d = 0; d < dim; ++d) {
      float got = fromBf16(gotO[r * dim + d]);
      double want = wantO[r * dim + d];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << "row " << r << " column " << d;
      else
        EXPECT_NEAR(got, want, 1e-2 * (std::fabs(want) + 0.05)) << "row " << r << " column " << d;
    }
  }

  // The C entry point (its own primary context of the same device) gives the
  // same bits.
  {
    flashrt::DeviceBuffer cO(*context, rows * dim * 2), cLse(*context, rows * 4);
    std::vector<flashrun_state> cStates;
    for (const StateRef &ref : refs)
      cStates.push_back({ref.out, ref.lse, ref.rowStride});
    ASSERT_EQ(flashrun_merge_states(stream.handle(), "f32", "bf16", cStates.data(),
                                    static_cast<int>(cStates.size()),
                                    {cO.devicePtr(), cLse.devicePtr(), dim}, rows, dim),
              0)
        << flashrun_merge_states_error();
    stream.synchronize();
    std::vector<uint16_t> cGotO(rows * dim);
    std::vector<float> cGotLse(rows);
    cO.copyToHost(cGotO.data(), cGotO.size() * 2);
    cLse.copyToHost(cGotLse.data(), cGotLse.size() * 4);
    EXPECT_EQ(cGotO, gotO);
    EXPECT_EQ(0, std::memcmp(cGotLse.data(), gotLse.data(), gotLse.size() * 4));
  }

  // In place, f32 into state 0 (its own row stride): the same O, unrounded.
  StateMerger inPlace(*context, "f32", "f32");
  inPlace.merge(stream, refs, refs[0], rows, dim);
  stream.synchronize();
  std::vector<float> merged(rows * stride);
  buffers[0].copyToHost(merged.data(), merged.size() * 4);
  for (int64_t r = 4; r < rows; ++r)
    for (int64_t d = 0; d < dim; ++d)
      EXPECT_NEAR(merged[r * stride + d], wantO[r * dim + d],
                  1e-5 * (std::fabs(wantO[r * dim + d]) + 1))
          << "in place, row " << r << " column " << d;
}

TEST_F(MergeStatesGpuTest, BadArgumentsAreNamed) {
  StateMerger merger(*context, "bf16", "bf16");
  flashrt::Stream stream(*context);
  flashrt::DeviceBuffer o(*context, 64 * 128 * 2), lse(*context, 64 * 4);
  StateRef good{o.devicePtr(), lse.devicePtr(), 128};
  flashrt::DeviceBuffer out(*context, 64 * 128 * 2), outLse(*context, 64 * 4);
  StateRef target{out.devicePtr(), outLse.devicePtr(), 128};
  EXPECT_THAT(errorOf([&] { merger.merge(stream, {}, target, 64, 128); }),
              HasSubstr("1 to 64 states per merge, got 0"));
  EXPECT_THAT(errorOf([&] { merger.merge(stream, {{0, lse.devicePtr(), 128}}, target, 64, 128); }),
              HasSubstr("state 0 has a null pointer"));
  EXPECT_THAT(errorOf([&] { merger.merge(stream, {good}, target, 64, 129); }),
              HasSubstr("row stride 128 is below the head dim 129"));
  EXPECT_THAT(errorOf([&] { merger.merge(stream, {good}, {out.devicePtr() + 1, outLse.devicePtr(), 128}, 64, 128); }),
              HasSubstr("2-byte aligned"));
  EXPECT_THAT(errorOf([&] { merger.merge(stream, {good}, {o.devicePtr(), outLse.devicePtr(), 128}, 64, 128); }),
              HasSubstr("overlaps state 0"));
  EXPECT_THAT(errorOf([&] { StateMerger(*context, "f32", "i32"); }),
              HasSubstr("f32, bf16 or f16"));
  EXPECT_EQ(errorOf([&] { merger.merge(stream, {good, good}, target, 64, 128); }), "");
  stream.synchronize();
}

} // namespace
