//===- PackageTest.cpp - Kernel package round trip and bad input ----------===//

#include "flashrt/Error.h"
#include "flashrt/Package.h"

#include <gtest/gtest.h>

namespace {

flashrt::KernelPackage samplePackage() {
  flashrt::KernelPackage package;
  package.flashcVersion = "0.1.0";
  package.kernelName = "sliding_window";
  package.arch = "sm_90a";
  package.variantHash = "0123456789abcdef";
  package.elementType = "bf16";
  package.headDim = 128;
  package.blockRows = 64;
  package.blockCols = 64;
  package.threadsPerBlock = 128;
  package.dynamicSharedBytes = 49152;
  package.staticSizes = {-1, -1, -1, -1, -1, 128};
  package.dimClasses = {0, 1, 2, 3, 3, 5};
  package.params = {{"window", "i32", 1024}, {"cap", "f32", 0.1}};
  package.tensors = {{"doc", "i32", {"batch", "query_len"}}};
  package.ptx = ".version 8.0\n.target sm_90a\n// with a trailing line\n";
  return package;
}

TEST(Package, RoundTrips) {
  flashrt::KernelPackage package = samplePackage();
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(package.serialize());
  EXPECT_EQ(back.kernelName, "sliding_window");
  EXPECT_EQ(back.headDim, 128);
  EXPECT_EQ(back.dynamicSharedBytes, 49152);
  EXPECT_EQ(back.dimClasses, package.dimClasses);
  ASSERT_EQ(back.params.size(), 2u);
  EXPECT_EQ(back.params[1].type, "f32");
  EXPECT_DOUBLE_EQ(back.params[1].defaultValue, 0.1);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].extents, (std::vector<std::string>{"batch", "query_len"}));
  EXPECT_EQ(back.ptx, package.ptx);
}

/// `text` with the first `from` replaced by `to` (which must be there).
std::string replacedOnce(std::string text, const std::string &from, const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

void expectParseError(const std::string &text, const std::string &needle) {
  try {
    flashrt::KernelPackage::parse(text);
    ADD_FAILURE() << "parsed without error: " << text.substr(0, 60);
  } catch (const flashrt::Error &error) {
    EXPECT_EQ(error.kind(), flashrt::ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

TEST(Package, RejectsMalformedInput) {
  expectParseError("", "empty kernel package");
  expectParseError("hello 1\n", "not a flashc kernel package");
  expectParseError("flashc-package 7\n", "package format 7 is not supported");
  std::string good = samplePackage().serialize();
  expectParseError(good.substr(0, good.size() - 10), "truncated");
  expectParseError(replacedOnce(good, "arch", "arhc"), "line 4: unknown key 'arhc'");
  expectParseError(replacedOnce(good, "head-dim 128", "head-dim 12x"), "'12x' is not an integer");
  std::string noPtx = good.substr(0, good.find("ptx "));
  expectParseError(noPtx, "no 'ptx' section");
}

TEST(Package, RecordsTensorMapParameters) {
  flashrt::KernelPackage package = samplePackage();
  package.kvTensorMaps = true;
  std::string text = package.serialize();
  EXPECT_NE(text.find("\nkv-tensor-maps\nptx "), std::string::npos) << text;
  EXPECT_TRUE(flashrt::KernelPackage::parse(text).kvTensorMaps);
  EXPECT_FALSE(flashrt::KernelPackage::parse(samplePackage().serialize()).kvTensorMaps);
  expectParseError(replacedOnce(text, "kv-tensor-maps", "kv-tensor-maps 2"), "kv-tensor-maps");
}

TEST(Package, RecordsThePersistentGrid) {
  flashrt::KernelPackage package = samplePackage();
  package.kvTensorMaps = true;
  package.persistent = true;
  std::string text = package.serialize();
  EXPECT_NE(text.find("\ngrid persistent tile-counter\n"), std::string::npos) << text;
  EXPECT_TRUE(flashrt::KernelPackage::parse(text).persistent);
  EXPECT_FALSE(flashrt::KernelPackage::parse(samplePackage().serialize()).persistent);
  // Its Q comes by TMA: a persistent package without tensor maps is wrong.
  expectParseError(replacedOnce(text, "kv-tensor-maps\n", ""),
                   "a persistent grid needs kv-tensor-maps");
  expectParseError(replacedOnce(text, "grid persistent", "grid dynamic"), "unknown grid rule");
  // flashc 0.2's persistent kernels took no tile counter: a clear error,
  // never a launch with the wrong arguments.
  expectParseError(replacedOnce(text, "grid persistent tile-counter", "grid persistent"),
                   "compile it again");
}

flashrt::KernelPackage sampleBackwardPackage() {
  flashrt::KernelPackage package = samplePackage();
  package.kernelName = "sliding_window_bwd";
  package.backward = true;
  package.blockRows = 32;
  package.blockCols = 128;
  package.threadsPerBlock = 256;
  package.entries = {{"preprocess", "sliding_window_bwd_preprocess", 32, 0},
                     {"convert", "sliding_window_bwd_convert", 128, 0}};
  return package;
}

TEST(Package, BackwardPackagesRoundTripTheirEntries) {
  flashrt::KernelPackage package = sampleBackwardPackage();
  std::string text = package.serialize();
  EXPECT_NE(text.find("grid ceil(M/block-cols) HKV B\n"), std::string::npos);
  EXPECT_NE(text.find("kind backward\n"), std::string::npos);
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_TRUE(back.backward);
  EXPECT_FALSE(back.persistent);
  ASSERT_NE(back.entry("preprocess"), nullptr);
  EXPECT_EQ(back.entry("preprocess")->name, "sliding_window_bwd_preprocess");
  EXPECT_EQ(back.entry("preprocess")->threadsPerBlock, 32);
  ASSERT_NE(back.entry("convert"), nullptr);
  EXPECT_EQ(back.entry("convert")->threadsPerBlock, 128);
  EXPECT_EQ(back.entry("main"), nullptr);
  // A forward package has no entries and says nothing of its kind.
  EXPECT_EQ(samplePackage().serialize().find("kind"), std::string::npos);
  EXPECT_FALSE(flashrt::KernelPackage::parse(samplePackage().serialize()).backward);
}

TEST(Package, BackwardPackagesRecordTheDeterministicMode) {
  flashrt::KernelPackage package = sampleBackwardPackage();
  EXPECT_EQ(package.serialize().find("deterministic"), std::string::npos);
  EXPECT_FALSE(flashrt::KernelPackage::parse(package.serialize()).deterministic);
  package.deterministic = true;
  std::string text = package.serialize();
  EXPECT_NE(text.find("\ndeterministic\n"), std::string::npos);
  EXPECT_TRUE(flashrt::KernelPackage::parse(text).deterministic);
  expectParseError(replacedOnce(text, "deterministic\n", "deterministic 1\n"),
                   "takes 0 value(s), got 1");
  // Only the backward has a deterministic mode.
  std::string forward = samplePackage().serialize();
  expectParseError(replacedOnce(forward, "ptx ", "deterministic\nptx "),
                   "only a backward package has a per-key-block grid, a deterministic mode");
}

// Above D = 128 the backward's main kernel splits D into column slices:
// the package says how many (the grid's x and the semaphores depend on it),
// and only a backward package whose head dim they divide may.
TEST(Package, BackwardPackagesRecordTheirColumnSlices) {
  flashrt::KernelPackage package = sampleBackwardPackage();
  EXPECT_EQ(package.serialize().find("column-slices"), std::string::npos);
  EXPECT_EQ(flashrt::KernelPackage::parse(package.serialize()).columnSlices, 1);
  package.headDim = 256;
  package.columnSlices = 2;
  std::string text = package.serialize();
  EXPECT_NE(text.find("\ncolumn-slices 2\n"), std::string::npos) << text;
  EXPECT_EQ(flashrt::KernelPackage::parse(text).columnSlices, 2);
  expectParseError(replacedOnce(text, "column-slices 2", "column-slices 1"),
                   "'column-slices' takes 2 or more");
  expectParseError(replacedOnce(text, "column-slices 2", "column-slices 3"),
                   "they must divide head-dim");
  expectParseError(replacedOnce(text, "kind backward\n", ""),
                   "only a backward package splits D into column slices");
}

TEST(Package, RejectsInconsistentBackwardPackages) {
  std::string text = sampleBackwardPackage().serialize();
  expectParseError(replacedOnce(text, "entry convert sliding_window_bwd_convert 128 0\n", ""),
                   "preprocess and convert entries");
  expectParseError(replacedOnce(text, "grid ceil(M/block-cols) HKV B\n", ""),
                   "grid ceil(M/block-cols)");
  expectParseError(replacedOnce(text, "kind backward\n", ""),
                   "only a backward package has a per-key-block grid");
  expectParseError(replacedOnce(text, "entry convert", "entry sideways"),
                   "entry role must be preprocess, convert, summary or combine");
  expectParseError(replacedOnce(text, "ptx ", "block-summary 1 0\nptx "),
                   "a summary entry exactly when it has a block-summary line");
  expectParseError(replacedOnce(text, "ptx ", "split-keys\nptx "),
                   "a backward package has no key splits");
  expectParseError(replacedOnce(text, "kind backward", "kind sideways"),
                   "kind must be forward or backward");
}

TEST(Package, RecordsTheBlockSummary) {
  flashrt::KernelPackage package = samplePackage();
  package.blockSummary = true;
  package.summaryPerBatch = true;
  package.entries.push_back({"summary", "sliding_window_summary", 128, 0});
  std::string text = package.serialize();
  EXPECT_NE(text.find("\nblock-summary 1 0\nentry summary sliding_window_summary 128 0\n"),
            std::string::npos)
      << text;
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_TRUE(back.blockSummary);
  EXPECT_TRUE(back.summaryPerBatch);
  EXPECT_FALSE(back.summaryPerHead);
  ASSERT_NE(back.entry("summary"), nullptr);
  EXPECT_EQ(back.entry("summary")->name, "sliding_window_summary");
  // The line and the entry come together.
  expectParseError(replacedOnce(text, "entry summary sliding_window_summary 128 0\n", ""),
                   "a summary entry exactly when it has a block-summary line");
  expectParseError(replacedOnce(text, "block-summary 1 0\n", ""),
                   "a summary entry exactly when it has a block-summary line");
  expectParseError(replacedOnce(text, "block-summary 1 0", "block-summary 2 0"),
                   "takes 0 or 1");
}

// A backward package whose mask reads aux tensors computes the summary of
// its own tiling first: a third entry, which comes with the line.
TEST(Package, BackwardPackagesRecordTheirBlockSummary) {
  flashrt::KernelPackage package = sampleBackwardPackage();
  package.blockSummary = true;
  package.summaryPerHead = true;
  package.entries.push_back({"summary", "sliding_window_bwd_summary", 128, 0});
  std::string text = package.serialize();
  EXPECT_NE(text.find("\nblock-summary 0 1\n"), std::string::npos) << text;
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_TRUE(back.backward);
  EXPECT_TRUE(back.blockSummary);
  EXPECT_FALSE(back.summaryPerBatch);
  EXPECT_TRUE(back.summaryPerHead);
  ASSERT_NE(back.entry("summary"), nullptr);
  EXPECT_EQ(back.entry("summary")->name, "sliding_window_bwd_summary");
  expectParseError(replacedOnce(text, "block-summary 0 1\n", ""),
                   "a summary entry exactly when it has a block-summary line");
  expectParseError(replacedOnce(text, "entry summary sliding_window_bwd_summary 128 0\n", ""),
                   "a summary entry exactly when it has a block-summary line");
  expectParseError(replacedOnce(text, "entry summary", "entry combine"),
                   "a summary entry exactly when it has a block-summary line");
}

TEST(Package, RecordsSplitKeys) {
  flashrt::KernelPackage package = samplePackage();
  package.splitKeys = true;
  package.entries.push_back({"combine", "sliding_window_combine", 128, 0});
  std::string text = package.serialize();
  EXPECT_NE(text.find("\nsplit-keys\nentry combine sliding_window_combine 128 0\n"),
            std::string::npos)
      << text;
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_TRUE(back.splitKeys);
  ASSERT_NE(back.entry("combine"), nullptr);
  EXPECT_EQ(back.entry("combine")->name, "sliding_window_combine");
  // The line and the entry come together; a persistent grid does not split.
  expectParseError(replacedOnce(text, "entry combine sliding_window_combine 128 0\n", ""),
                   "a combine entry exactly when it has a split-keys line");
  expectParseError(replacedOnce(text, "split-keys\n", ""),
                   "a combine entry exactly when it has a split-keys line");
  expectParseError(replacedOnce(text, "split-keys", "split-keys 2"), "takes 0 value(s)");
  expectParseError(replacedOnce(text, "grid ceil(N/block-rows) H B",
                                "grid persistent tile-counter\nkv-tensor-maps"),
                   "a persistent grid does not split keys");
}

TEST(Package, RecordsPackedHeads) {
  flashrt::KernelPackage package = samplePackage();
  package.packedHeads = true;
  std::string text = package.serialize();
  EXPECT_NE(text.find("\npacked-heads\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ngrid ceil(G*N/block-rows) HKV B\n"), std::string::npos) << text;
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_TRUE(back.packedHeads);
  // The grid runs over the G·N packed rows of each KV head: H = 32, HKV = 8,
  // N = 3 at Br = 64 is 1 tile per KV head (12 rows), not 1 per query head.
  EXPECT_EQ(back.queryTiles(32, 8, 3), 1);
  EXPECT_EQ(back.gridHeads(32, 8), 8);
  EXPECT_EQ(back.queryTiles(32, 8, 17), (4 * 17 + back.blockRows - 1) / back.blockRows);
  back.packedHeads = false;
  EXPECT_EQ(back.queryTiles(32, 8, 3), 1);
  EXPECT_EQ(back.gridHeads(32, 8), 32);
  expectParseError(replacedOnce(text, "packed-heads", "packed-heads 4"), "takes 0 value(s)");
  expectParseError(replacedOnce(text, "grid ceil(G*N/block-rows) HKV B",
                                "grid persistent tile-counter\nkv-tensor-maps"),
                   "packed-heads is a forward kernel's with one CTA per tile");
  // The grid line and the packed-heads line come together.
  expectParseError(replacedOnce(text, "grid ceil(G*N/block-rows) HKV B",
                                "grid ceil(N/block-rows) H B"),
                   "a packed-heads line goes with grid ceil(G*N/block-rows) HKV B");
  expectParseError(replacedOnce(text, "packed-heads\n", ""),
                   "a packed-heads line goes with grid ceil(G*N/block-rows) HKV B");
}

TEST(Package, RecordsThePagedCache) {
  flashrt::KernelPackage package = samplePackage();
  package.pageSize = 16;
  package.pageTable = "block_table";
  package.pageLengths = "kv_len";
  std::string text = package.serialize();
  EXPECT_NE(text.find("\npaged-kv 16 block_table kv_len\n"), std::string::npos) << text;
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_EQ(back.pageSize, 16);
  EXPECT_EQ(back.pageTable, "block_table");
  EXPECT_EQ(back.pageLengths, "kv_len");
  expectParseError(replacedOnce(text, "paged-kv 16 block_table kv_len", "paged-kv 16 t"),
                   "takes 3 value(s)");
  expectParseError(replacedOnce(text, "paged-kv 16", "paged-kv 0"), "a page of 1 to 4096 keys");
  expectParseError(replacedOnce(text, "block_table kv_len", "t t"), "two names");
  // Pages by TMA boxes: the caches' tensor maps; never persistent.
  flashrt::KernelPackage boxes =
      flashrt::KernelPackage::parse(replacedOnce(text, "paged-kv", "kv-tensor-maps\npaged-kv"));
  EXPECT_TRUE(boxes.kvTensorMaps);
  EXPECT_EQ(boxes.pageSize, 16);
  expectParseError(replacedOnce(text, "paged-kv",
                                "grid persistent tile-counter\nkv-tensor-maps\npaged-kv"),
                   "paged-kv is a forward kernel's with one CTA per tile");
}

TEST(Package, RecordsTheVarlenBatch) {
  flashrt::KernelPackage package = samplePackage();
  package.varlenQueries = "cu_q";
  std::string text = package.serialize();
  EXPECT_NE(text.find("\nvarlen cu_q -\n"), std::string::npos) << text;
  flashrt::KernelPackage back = flashrt::KernelPackage::parse(text);
  EXPECT_TRUE(back.packsQueries());
  EXPECT_FALSE(back.packsKeys());
  EXPECT_EQ(back.varlenQueries, "cu_q");
  back = flashrt::KernelPackage::parse(replacedOnce(text, "varlen cu_q -", "varlen cu_q cu_k"));
  EXPECT_EQ(back.varlenKeys, "cu_k");
  expectParseError(replacedOnce(text, "varlen cu_q -", "varlen - -"),
                   "'varlen' needs the offsets of the packed queries, keys or both");
  expectParseError(replacedOnce(text, "varlen cu_q -", "varlen cu_q"), "takes 2 value(s)");
  // A persistent varlen kernel binds each tile's sequence.
  back = flashrt::KernelPackage::parse(
      replacedOnce(text, "varlen", "grid persistent tile-counter\nkv-tensor-maps\nvarlen"));
  EXPECT_TRUE(back.persistent && back.packsQueries());
  // Keys in a paged cache are not packed by offsets too.
  expectParseError(
      replacedOnce(text, "varlen cu_q -", "paged-kv 16 t l\nvarlen - cu_k"),
      "a paged cache's keys are not packed by varlen offsets too");
}

TEST(Package, LoadNamesAMissingFile) {
  try {
    flashrt::KernelPackage::load("/nonexistent/kernel.flashpkg");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const flashrt::Error &error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/kernel.flashpkg"), std::string::npos);
  }
}

} // namespace
