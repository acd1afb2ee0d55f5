//===- CompileCacheTest.cpp - The JIT compile cache ------------------------===//
//
// A second request for the same kernel and target options is a cache hit
// that returns the same package; other options miss; a corrupt or stale
// entry is reported and compiled again, never trusted. Cold and hit times
// are printed (the numbers, not assertions on them).
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Target/Package/KernelPackage.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

using namespace flashc;

namespace {

constexpr const char *kCausal = R"(
attention causal {
  q: bf16[B, H, N, D]  k: bf16[B, H, N, D]  v: bf16[B, H, N, D]
  mask = j <= i
}
)";

class CompileCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> dir;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("flashc-cache-test", dir));
    cacheDir = std::string(dir);
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(kCausal, "causal.flash"),
                                 llvm::SMLoc());
    std::optional<frontend::Module> ast = frontend::parseFlashFile(sourceMgr);
    ASSERT_TRUE(ast);
    frontend::KernelOptions options;
    options.headDim = 64;
    options.blockRows = 64; // the wgmma kernel's default tile at D = 64
    options.blockCols = 128;
    module = frontend::emitFlashIR(*context, *ast, options, sourceMgr);
    ASSERT_TRUE(module);
    mlir::PassManager pm(context.get());
    flash::buildFlashPipeline(pm);
    ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(cacheDir); }

  /// Builds through the cache; returns the milliseconds it took.
  double build(const nvptx::TargetOptions &options, int &hits, std::string &warnings,
               std::vector<flashrt::KernelPackage> &out) {
    auto start = std::chrono::steady_clock::now();
    mlir::FailureOr<std::vector<flashrt::KernelPackage>> packages =
        buildKernelPackages(*module, options, CompileCache(cacheDir), hits, warnings);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          start)
                    .count();
    EXPECT_TRUE(mlir::succeeded(packages));
    if (mlir::succeeded(packages))
      out = std::move(*packages);
    return ms;
  }

  std::string entryPath(const nvptx::TargetOptions &options) {
    flash::KernelOp kernel = *module->getOps<flash::KernelOp>().begin();
    return CompileCache(cacheDir).pathFor(CompileCache::key(kernel, options));
  }

  std::string cacheDir;
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TEST_F(CompileCacheTest, SecondRequestIsAHitWithTheSamePackage) {
  nvptx::TargetOptions options;
  std::vector<flashrt::KernelPackage> cold, warm;
  int hits = 0;
  std::string warnings;
  double coldMs = build(options, hits, warnings, cold);
  EXPECT_EQ(hits, 0);
  EXPECT_TRUE(llvm::sys::fs::exists(entryPath(options)));
  double hitMs = build(options, hits, warnings, warm);
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(warnings, "");
  ASSERT_EQ(warm.size(), 1u);
  EXPECT_EQ(warm[0].serialize(), cold[0].serialize());
  std::printf("compile cache: cold %.1f ms, hit %.1f ms\n", coldMs, hitMs);
  ::testing::Test::RecordProperty("cold_ms", std::to_string(coldMs));
  ::testing::Test::RecordProperty("hit_ms", std::to_string(hitMs));
}

TEST_F(CompileCacheTest, OtherTargetOptionsMiss) {
  nvptx::TargetOptions wgmma, mmaSync;
  mmaSync.gemm = "mma.sync";
  EXPECT_NE(entryPath(wgmma), entryPath(mmaSync));
  std::vector<flashrt::KernelPackage> out;
  int hits = 0;
  std::string warnings;
  build(wgmma, hits, warnings, out);
  build(mmaSync, hits, warnings, out);
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(out[0].kvTensorMaps, false);
}

TEST_F(CompileCacheTest, CorruptAndStaleEntriesAreRebuiltWithAWarning) {
  nvptx::TargetOptions options;
  std::vector<flashrt::KernelPackage> good, out;
  int hits = 0;
  std::string warnings;
  build(options, hits, warnings, good);
  std::string path = entryPath(options);

  { std::ofstream(path, std::ios::trunc) << "flashc-package 1\nkernel causal\ngarbage\n"; }
  build(options, hits, warnings, out);
  EXPECT_EQ(hits, 0);
  EXPECT_NE(warnings.find("ignoring corrupt compile cache entry"), std::string::npos) << warnings;
  EXPECT_EQ(out[0].serialize(), good[0].serialize());

  // A well-formed package of another IR under this key: stale, not trusted.
  flashrt::KernelPackage stale = good[0];
  stale.variantHash = "0000000000000000";
  { std::ofstream(path, std::ios::trunc) << stale.serialize(); }
  warnings.clear();
  build(options, hits, warnings, out);
  EXPECT_EQ(hits, 0);
  EXPECT_NE(warnings.find("ignoring stale compile cache entry"), std::string::npos) << warnings;
  // Rebuilt and stored again: the next request hits.
  build(options, hits, warnings, out);
  EXPECT_EQ(hits, 1);
}

TEST_F(CompileCacheTest, UnwritableDirectoryOnlyWarns) {
  cacheDir = "/proc/flashc-no-such-dir";
  nvptx::TargetOptions options;
  std::vector<flashrt::KernelPackage> out;
  int hits = 0;
  std::string warnings;
  build(options, hits, warnings, out);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_NE(warnings.find("compile cache: cannot create"), std::string::npos) << warnings;
}

} // namespace
