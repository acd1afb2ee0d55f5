//===- TuningTest.cpp - Search space and tuning cache ----------------------===//

#include "flashc/Tuning/Tuning.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

using namespace flashc::tuning;

namespace {

TEST(SearchSpaceTest, EnumeratesTheProductWithoutSynonyms) {
  llvm::Expected<SearchSpace> space = SearchSpace::parse(
      {"Br=64,128", "Bc=32,64,128", "gemm=wgmma,mma.sync", "kv=tma,cp.async", "rpw=16,32"});
  ASSERT_TRUE(bool(space)) << llvm::toString(space.takeError());
  std::vector<TileConfig> configs = space->enumerate();
  // wgmma: 3 x (TMA with and without overlap, cp.async) at Br = 64, 3 x (TMA
  // persistent or one CTA per tile, cp.async) at Br = 128 (warp-specialized:
  // overlap is not a knob there, the grid is); mma.sync: 2 x 3 x 2
  // rows-per-warp.
  EXPECT_EQ(configs.size(), 30u);
  for (const TileConfig &config : configs) {
    if (config.gemm == "wgmma") {
      EXPECT_EQ(config.rowsPerWarp, 0) << config.str();
    } else {
      EXPECT_EQ(config.kvCopy, "cp.async") << config.str();
    }
    if (config.kvCopy != "tma" || config.blockRows >= 128) {
      EXPECT_FALSE(config.overlapSoftmax) << config.str();
    }
    // Only warp-specialized tiles name their grid.
    EXPECT_EQ(config.persistent.has_value(),
              config.gemm == "wgmma" && config.kvCopy == "tma" && config.blockRows >= 128)
        << config.str();
  }
  auto named = [&](llvm::StringRef text) {
    return llvm::count_if(configs, [&](const TileConfig &c) { return c.str() == text; });
  };
  EXPECT_EQ(named("Br=128 Bc=64 wgmma tma persistent"), 1);
  EXPECT_EQ(named("Br=128 Bc=64 wgmma tma per-tile"), 1);
  EXPECT_EQ(configs[0].str(), "Br=64 Bc=32 wgmma tma");
  EXPECT_EQ(configs[1].str(), "Br=64 Bc=32 wgmma tma overlap");
  EXPECT_EQ(configs[2].str(), "Br=64 Bc=32 wgmma cp.async");
  EXPECT_EQ(configs.back().str(), "Br=128 Bc=128 mma.sync rpw=32");
}

TEST(SearchSpaceTest, DefaultsAndBadItems) {
  llvm::Expected<SearchSpace> defaults = SearchSpace::parse({});
  ASSERT_TRUE(bool(defaults));
  EXPECT_EQ(defaults->enumerate().size(), 12u);
  llvm::Expected<SearchSpace> overlapOnly = SearchSpace::parse({"overlap=off"});
  ASSERT_TRUE(bool(overlapOnly));
  EXPECT_EQ(overlapOnly->enumerate().size(), 9u);
  llvm::Expected<SearchSpace> onePerTile = SearchSpace::parse({"overlap=off", "persistent=off"});
  ASSERT_TRUE(bool(onePerTile));
  EXPECT_EQ(onePerTile->enumerate().size(), 6u);
  auto error = [](std::vector<std::string> items) {
    llvm::Expected<SearchSpace> space = SearchSpace::parse(items);
    return space ? std::string() : llvm::toString(space.takeError());
  };
  EXPECT_EQ(error({"Br=64,x"}), "--space: 'Br=64,x': 'x' is not a non-negative integer");
  EXPECT_EQ(error({"stages=2,3"}),
            "--space: 'stages=2,3': unknown knob 'stages' (knobs: Br, Bc, gemm, kv, overlap, "
            "persistent, rpw)");
  EXPECT_EQ(error({"overlap=maybe"}),
            "--space: 'overlap=maybe': 'maybe' is not one of on, off");
  EXPECT_EQ(error({"gemm=mfma"}),
            "--space: 'gemm=mfma': 'mfma' is not one of wgmma, mma.sync");
  EXPECT_EQ(error({"Bc="}), "--space: 'Bc=': expected KNOB=VALUE[,VALUE...]");
}

TEST(ShapeBucketTest, RoundsUpToPowersOfTwo) {
  EXPECT_EQ(shapeBucket(4096, 4096), "N<=4096,M<=4096");
  EXPECT_EQ(shapeBucket(1000, 4097), "N<=1024,M<=8192");
}

class TuningCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> dir;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("flashc-tuning-test", dir));
    directory = std::string(dir);
    llvm::SmallString<128> file(dir);
    llvm::sys::path::append(file, "tuning.json");
    path = std::string(file);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(directory); }

  static TuningEntry entry(const std::string &gpu, int64_t br) {
    TuningEntry e;
    e.key = {"0123abcd", "bf16", 128, "N<=4096,M<=4096", gpu, 90, "0.1.0"};
    e.config = {br, 64, "wgmma", "tma", 0};
    e.tflops = 598.5;
    return e;
  }

  std::string directory, path;
};

TEST_F(TuningCacheTest, RecordsAndFindsTheWinnerForItsKeyOnly) {
  TuningCache cache(path);
  std::string warnings;
  EXPECT_FALSE(cache.lookup(entry("NVIDIA H200", 64).key, warnings));
  ASSERT_FALSE(bool(cache.record(entry("NVIDIA H200", 64), warnings)));
  ASSERT_FALSE(bool(cache.record(entry("NVIDIA H100", 128), warnings)));
  std::optional<TuningEntry> found = cache.lookup(entry("NVIDIA H200", 0).key, warnings);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->config.str(), "Br=64 Bc=64 wgmma tma");
  EXPECT_DOUBLE_EQ(found->tflops, 598.5);
  // A new winner for the same key replaces the old one.
  ASSERT_FALSE(bool(cache.record(entry("NVIDIA H200", 128), warnings)));
  EXPECT_EQ(cache.entries(warnings).size(), 2u);
  EXPECT_EQ(cache.lookup(entry("NVIDIA H200", 0).key, warnings)->config.blockRows, 128);
  TuningKey otherBucket = entry("NVIDIA H200", 0).key;
  otherBucket.shapeBucket = "N<=1024,M<=1024";
  EXPECT_FALSE(cache.lookup(otherBucket, warnings));
  EXPECT_EQ(warnings, "");
}

TEST_F(TuningCacheTest, TheGridOfAWinnerRoundTrips) {
  TuningCache cache(path);
  std::string warnings;
  TuningEntry perTile = entry("NVIDIA H200", 128);
  perTile.config.persistent = false;
  TuningEntry unnamed = entry("NVIDIA H100", 128);
  ASSERT_FALSE(bool(cache.record(perTile, warnings)));
  ASSERT_FALSE(bool(cache.record(unnamed, warnings)));
  std::optional<TuningEntry> found = cache.lookup(perTile.key, warnings);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->config.persistent, std::optional<bool>(false));
  EXPECT_EQ(found->config.str(), "Br=128 Bc=64 wgmma tma per-tile");
  // As a request to the resolver it overrides the rule; an unnamed grid
  // leaves it to the rule.
  EXPECT_EQ(found->config.request().persistent, std::optional<bool>(false));
  EXPECT_EQ(found->config.request().blockRows, std::optional<int64_t>(128));
  EXPECT_EQ(found->config.request().gemm, std::optional<std::string>("wgmma"));
  found = cache.lookup(unnamed.key, warnings);
  ASSERT_TRUE(found);
  EXPECT_FALSE(found->config.persistent.has_value());
  EXPECT_FALSE(found->config.request().persistent.has_value());
  EXPECT_EQ(warnings, "");
}

TEST_F(TuningCacheTest, ForwardAndBackwardWinnersAreSeparateEntries) {
  TuningCache cache(path);
  std::string warnings;
  TuningEntry forward = entry("NVIDIA H200", 128);
  TuningEntry backward = entry("NVIDIA H200", 64);
  backward.key.pass = "backward";
  backward.config = {64, 128, "wgmma", "cp.async", 0};
  backward.config.backward = true;
  ASSERT_FALSE(bool(cache.record(forward, warnings)));
  EXPECT_FALSE(cache.lookup(backward.key, warnings));
  ASSERT_FALSE(bool(cache.record(backward, warnings)));
  EXPECT_EQ(cache.entries(warnings).size(), 2u);
  std::optional<TuningEntry> found = cache.lookup(backward.key, warnings);
  ASSERT_TRUE(found);
  EXPECT_TRUE(found->config.backward);
  EXPECT_EQ(found->config.str(), "Br=64 Bc=128 wgmma");
  // As a request, a backward winner sets the tile and GEMM only.
  EXPECT_FALSE(found->config.request().kvCopy.has_value());
  EXPECT_FALSE(found->config.request().overlapSoftmax.has_value());
  EXPECT_EQ(found->config.request().blockCols, std::optional<int64_t>(128));
  found = cache.lookup(forward.key, warnings);
  ASSERT_TRUE(found);
  EXPECT_FALSE(found->config.backward);
  EXPECT_EQ(found->config.blockRows, 128);
  EXPECT_EQ(warnings, "");
}

TEST(SearchSpaceTest, TheBackwardSpaceHasTilesAndGemmOnly) {
  llvm::Expected<SearchSpace> space = SearchSpace::parseBackward({});
  ASSERT_TRUE(bool(space));
  std::vector<TileConfig> configs = space->enumerateBackward();
  ASSERT_EQ(configs.size(), 6u); // Br 32, 64, 128 x Bc 64, 128, wgmma
  for (const TileConfig &config : configs) {
    EXPECT_TRUE(config.backward);
    EXPECT_EQ(config.gemm, "wgmma");
  }
  EXPECT_EQ(configs.front().str(), "Br=32 Bc=64 wgmma");
  space = SearchSpace::parseBackward({"Bc=256", "gemm=wgmma,mma.sync"});
  ASSERT_TRUE(bool(space));
  EXPECT_EQ(space->enumerateBackward().size(), 6u); // 3 Br x 1 Bc x 2 GEMMs
  for (const char *forwardKnob : {"kv=tma", "overlap=on", "persistent=off", "rpw=32"}) {
    llvm::Expected<SearchSpace> bad = SearchSpace::parseBackward({forwardKnob});
    ASSERT_FALSE(bool(bad)) << forwardKnob;
    EXPECT_NE(llvm::toString(bad.takeError()).find("is a knob of the forward kernel"),
              std::string::npos);
  }
}

TEST_F(TuningCacheTest, StaleEntriesAreReportedNotUsed) {
  TuningCache cache(path);
  std::string warnings;
  TuningEntry old = entry("NVIDIA H200", 64);
  old.key.flashcVersion = "0.0.9";
  ASSERT_FALSE(bool(cache.record(old, warnings)));
  EXPECT_FALSE(cache.lookup(entry("NVIDIA H200", 0).key, warnings));
  EXPECT_NE(warnings.find("ignoring stale tuning cache entry (flashc 0.0.9"), std::string::npos)
      << warnings;
}

TEST_F(TuningCacheTest, CorruptFilesAndMalformedEntriesAreIgnoredWithAWarning) {
  TuningCache cache(path);
  { std::ofstream(path) << "{\"format\": 1, \"entries\": [ {\"variant\": "; }
  std::string warnings;
  EXPECT_FALSE(cache.lookup(entry("NVIDIA H200", 0).key, warnings));
  EXPECT_NE(warnings.find("ignoring corrupt tuning cache"), std::string::npos) << warnings;
  // Recording over a corrupt file sets it aside and starts a fresh one.
  warnings.clear();
  ASSERT_FALSE(bool(cache.record(entry("NVIDIA H200", 64), warnings)));
  EXPECT_NE(warnings.find("moved to " + path + ".corrupt"), std::string::npos) << warnings;
  EXPECT_TRUE(llvm::sys::fs::exists(path + ".corrupt"));
  EXPECT_TRUE(cache.lookup(entry("NVIDIA H200", 0).key, warnings));

  { std::ofstream(path) << "{\"format\": 1, \"entries\": [{\"variant\": \"x\"}, 7]}"; }
  warnings.clear();
  EXPECT_TRUE(cache.entries(warnings).empty());
  EXPECT_NE(warnings.find("ignoring malformed entry 0"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("ignoring malformed entry 1"), std::string::npos) << warnings;

  // Entries this flashc cannot read survive a record.
  warnings.clear();
  ASSERT_FALSE(bool(cache.record(entry("NVIDIA H200", 64), warnings)));
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(text.find("\"variant\": \"x\""), std::string::npos) << text;
  EXPECT_EQ(cache.entries(warnings).size(), 1u);

  // Another format is never overwritten.
  { std::ofstream(path) << "{\"format\": 2, \"entries\": []}"; }
  warnings.clear();
  EXPECT_TRUE(cache.entries(warnings).empty());
  EXPECT_NE(warnings.find("not a format-1 flashc tuning cache"), std::string::npos) << warnings;
  llvm::Error refused = cache.record(entry("NVIDIA H200", 64), warnings);
  ASSERT_TRUE(bool(refused));
  EXPECT_NE(llvm::toString(std::move(refused)).find("not overwriting it"), std::string::npos);
}

TEST_F(TuningCacheTest, ConcurrentWritersKeepEveryEntry) {
  std::vector<std::thread> writers;
  for (int i = 0; i < 8; ++i)
    writers.emplace_back([this, i] {
      std::string warnings;
      TuningEntry e = entry("GPU " + std::to_string(i), 64);
      EXPECT_FALSE(bool(TuningCache(path).record(e, warnings)));
    });
  for (std::thread &writer : writers)
    writer.join();
  std::string warnings;
  EXPECT_EQ(TuningCache(path).entries(warnings).size(), 8u);
  EXPECT_EQ(warnings, "");
}

TEST_F(TuningCacheTest, ConcurrentProcessesKeepEveryEntry) {
  std::vector<pid_t> children;
  for (int i = 0; i < 6; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string warnings;
      TuningEntry e = entry("process " + std::to_string(i), 64);
      bool failed = false;
      for (int round = 0; round < 5 && !failed; ++round)
        failed = bool(TuningCache(path).record(e, warnings));
      _exit(failed ? 1 : 0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string warnings;
  EXPECT_EQ(TuningCache(path).entries(warnings).size(), 6u);
  EXPECT_EQ(warnings, "");
}

} // namespace
