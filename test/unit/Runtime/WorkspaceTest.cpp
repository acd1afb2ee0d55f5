//===- WorkspaceTest.cpp - The scratch sizes callers allocate -------------===//
//
// BackwardKernel::workspaceBytes is all a caller (AOT programs included)
// knows of the scratch; it must grow with the deterministic mode's
// fixed-point accumulators and only with them.
//
//===----------------------------------------------------------------------===//

#include "flashrun/AttentionKernel.h"
#include "flashrt/Error.h"

#include <gtest/gtest.h>

namespace {

flashrt::KernelPackage backwardPackage(bool deterministic) {
  flashrt::KernelPackage package;
  package.kernelName = "relative_bias_bwd";
  package.backward = true;
  package.deterministic = deterministic;
  package.headDim = 64;
  package.blockRows = 32;
  package.blockCols = 128;
  package.tensors = {{"doc", "i32", {"batch", "query_len"}},
                     {"bias", "f32", {"heads", "1023"}}};
  return package;
}

size_t roundUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

// dq_accum holds a whole Br x D block per query tile: the last tile's rows
// past N too (the wgmma kernel's bulk reduce adds whole tiles).
TEST(BackwardWorkspace, HoldsDeltaTheDqAccumulatorAndTheSemaphores) {
  flashrun::Sizes sizes{2, 4, 4, 100, 100};
  size_t rows = 2 * 4 * 100, tiles = 2 * 4 * 4; // ceil(100 / 32) = 4
  EXPECT_EQ(flashrun::BackwardKernel::workspaceBytes(backwardPackage(false), sizes),
            roundUp(rows * 4) + roundUp(tiles * 32 * 64 * 4) + roundUp(tiles * 4));
}

// Column slices (D = 256) keep dq_accum's size (a slice is a block of its
// tile's columns) and give every query tile a semaphore per slice.
TEST(BackwardWorkspace, ColumnSlicesTakeASemaphoreEach) {
  flashrun::Sizes sizes{2, 4, 4, 1000, 1000};
  size_t rows = 2 * 4 * 1000, tiles = 2 * 4 * 32; // ceil(1000 / 32) = 32
  flashrt::KernelPackage package = backwardPackage(false);
  package.headDim = 256;
  package.columnSlices = 2;
  EXPECT_EQ(flashrun::BackwardKernel::workspaceBytes(package, sizes),
            roundUp(rows * 4) + roundUp(tiles * 32 * 256 * 4) + roundUp(tiles * 2 * 4));
}

TEST(BackwardWorkspace, DeterministicAddsOneAccumulatorPerFloatTensor) {
  for (int64_t heads : {1, 4, 16}) {
    flashrun::Sizes sizes{3, heads, heads, 257, 300};
    size_t plain = flashrun::BackwardKernel::workspaceBytes(backwardPackage(false), sizes);
    size_t fixed = flashrun::BackwardKernel::workspaceBytes(backwardPackage(true), sizes);
    // The flag, then heads x 1023 elements, 8 bytes each; none for the i32
    // tensor.
    EXPECT_EQ(fixed - plain, roundUp((1 + static_cast<size_t>(heads) * 1023) * 8)) << heads;
  }
}

TEST(BackwardWorkspace, RoleExtentsFollowTheSizes) {
  flashrt::KernelPackage package = backwardPackage(true);
  package.tensors = {{"bias", "f32", {"batch", "heads", "query_len", "key_len"}}};
  flashrun::Sizes sizes{2, 3, 1, 40, 70};
  flashrt::KernelPackage plain = package;
  plain.deterministic = false;
  EXPECT_EQ(flashrun::BackwardKernel::workspaceBytes(package, sizes) -
                flashrun::BackwardKernel::workspaceBytes(plain, sizes),
            roundUp((1 + 2 * 3 * 40 * 70) * 8));
}

// A backward package with a block summary keeps the summary of its own
// tiling at the end of the workspace (after the fixed-point accumulators);
// a package without one has no summary to point at.
TEST(BackwardWorkspace, ABlockSummaryComesLast) {
  flashrun::Sizes sizes{2, 4, 4, 1000, 1000};
  for (bool deterministic : {false, true}) {
    flashrt::KernelPackage package = backwardPackage(deterministic);
    size_t before = flashrun::BackwardKernel::workspaceBytes(package, sizes);
    EXPECT_THROW(flashrun::BackwardKernel::blockSummaryOffset(package, sizes), flashrt::Error);
    package.blockSummary = true;
    package.summaryPerBatch = true;
    // ceil(1000 / 32) = 32 query tiles, ceil(1000 / 128) = 8 key blocks, per
    // batch entry, one byte each; the backward walks its tiles in order, so
    // there is no room for a tile order after them.
    size_t summary = flashrun::AttentionKernel::blockSummaryBytes(package, sizes);
    EXPECT_EQ(summary, 2u * 32 * 8);
    EXPECT_EQ(flashrun::BackwardKernel::workspaceBytes(package, sizes), before + roundUp(summary));
    EXPECT_EQ(flashrun::BackwardKernel::blockSummaryOffset(package, sizes), before);
  }
}

// The block summary's size, from the package alone (AOT programs allocate
// a cached summary with it): one byte per (b, h, query tile, key block),
// b and h only where the mask reads them, then, 4-aligned, a u32 per
// (b, h, query tile): the tile order.
TEST(BlockSummaryBytes, CountsTheTilesOfThePackage) {
  flashrt::KernelPackage package;
  package.kernelName = "document";
  package.blockRows = 128;
  package.blockCols = 96;
  flashrun::Sizes sizes{3, 5, 5, 1000, 1100};
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), 0u);
  package.blockSummary = true;
  const size_t queryTiles = 8, keyBlocks = 12; // ceil(1000 / 128), ceil(1100 / 96)
  auto expected = [&](size_t rows) {
    size_t classes = rows * queryTiles * keyBlocks;
    return (classes + 3) / 4 * 4 + 4 * rows * queryTiles;
  };
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), expected(1));
  package.summaryPerBatch = true;
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), expected(3));
  package.summaryPerHead = true;
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), expected(15));
  // One summary row, classes on a 4-byte boundary: 8 x 11 = 88 bytes.
  sizes.keyLen = 1000; // 11 key blocks
  sizes.queryLen = 1000; // 8 query tiles
  package.summaryPerBatch = package.summaryPerHead = false;
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), 88u + 4 * 8);
  // Classes that end off a 4-byte boundary: 7 x 11 = 77 bytes, the order
  // at 80.
  sizes.queryLen = 800; // 7 query tiles
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), 80u + 4 * 7);
  sizes.queryLen = 100; sizes.keyLen = 97; // 1 x 2 = 2 bytes, aligned to 4
  EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes), 4u + 4);
}

// The launch's split count (flash-decoding): 1 where the query tiles fill
// the GPU, else the fewest splits whose waves come within 95% of the best
// fill, at most 128 and one per key block.
TEST(KeySplits, FillTheGpuOnlyWhereTheTilesDoNot) {
  flashrt::KernelPackage package;
  package.kernelName = "gqa";
  package.blockRows = 64;
  package.blockCols = 128;
  package.headDim = 128;
  const int64_t slots = 132; // one CTA per SM of an H200
  auto splits = [&](flashrun::Sizes sizes) {
    return flashrun::AttentionKernel::keySplitsFor(package, sizes, slots);
  };
  // Not a split-keys package: never split.
  EXPECT_EQ(splits({1, 32, 8, 1, 8192}), 1);
  package.splitKeys = true;
  // B = 1, 32 heads, 64 key blocks: 4 splits make 128 CTAs (97% of a wave).
  EXPECT_EQ(splits({1, 32, 8, 1, 8192}), 4);
  // 8 x 32 = 256 tiles fill the GPU alone.
  EXPECT_EQ(splits({8, 32, 8, 1, 8192}), 1);
  // 2 key blocks: at most 2 splits.
  EXPECT_EQ(splits({1, 4, 1, 1, 256}), 2);
  // One tile, 1000 key blocks: up to 128 splits; the fewest within 95% of
  // the best fill (128 of 132 slots) is 122.
  EXPECT_EQ(splits({1, 1, 1, 1, 128000}), 122);
  // Packed GQA: the 4 query heads of a group share one tile, so B = 1
  // runs 8 tiles (not 32): 16 splits make 128 CTAs; at B = 8, 64 tiles
  // take 2 splits.
  package.packedHeads = true;
  EXPECT_EQ(splits({1, 32, 8, 1, 8192}), 16);
  EXPECT_EQ(splits({8, 32, 8, 1, 8192}), 2);
  package.packedHeads = false;
  // Every choice stays within the limits.
  for (int64_t heads : {1, 3, 8, 40, 100})
    for (int64_t keyLen : {128, 1000, 8192, 131072}) {
      flashrun::Sizes sizes{1, heads, 1, 1, keyLen};
      int64_t s = splits(sizes);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, std::min<int64_t>(128, (keyLen + 127) / 128));
    }
}

TEST(KeySplits, StateBytesHoldOAndLsePerSplitAndRow) {
  flashrt::KernelPackage package;
  package.kernelName = "gqa";
  package.blockRows = 64;
  package.blockCols = 128;
  package.headDim = 128;
  package.splitKeys = true;
  package.ptx = "";
  // splitStateBytes needs no GPU: O (D f32 per row, 256-byte aligned),
  // then LSE (one f32 per row). 3 splits x B 2 x H 4 x N 5 = 120 rows.
  size_t rows = 120;
  size_t expected = (rows * 128 * 4 + 255) / 256 * 256 + rows * 4;
  EXPECT_EQ(flashrun::AttentionKernel::splitStateBytes(package, {2, 4, 4, 5, 100}, 3), expected);
}

TEST(PagedKV, HostTablesAreCheckedEntryByEntry) {
  // checkPagedTable needs no GPU: what a caller with the table on the host
  // checks before the launch the device cannot check.
  flashrt::KernelPackage package;
  package.kernelName = "paged_decode";
  package.pageSize = 16;
  package.pageTable = "block_table";
  package.pageLengths = "kv_len";
  flashrun::Sizes sizes{3, 8, 2, 1, 40};
  std::vector<int32_t> table = {4, 0, 7, /*b = 1*/ 2, 5, -1, /*b = 2*/ 99, 99, 99};
  std::vector<int32_t> lengths = {40, 17, 0};
  auto message = [&]() -> std::string {
    try {
      flashrun::AttentionKernel::checkPagedTable(package, sizes, table.data(), 3, lengths.data(), 8);
    } catch (const flashrt::Error &error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(message(), "");
  lengths[1] = 33; // reaches the third entry of b = 1: -1
  EXPECT_NE(message().find("block_table[1, 2] = -1 points outside the cache's 8 pages"),
            std::string::npos)
      << message();
  lengths[1] = 17;
  table[2] = 8;
  EXPECT_NE(message().find("block_table[0, 2] = 8"), std::string::npos) << message();
  table[2] = 7;
  lengths[0] = 41;
  EXPECT_NE(message().find("kv_len[0] = 41 is outside [0, M = 40]"), std::string::npos)
      << message();
  lengths[0] = -1;
  EXPECT_NE(message().find("kv_len[0] = -1"), std::string::npos) << message();
  package.pageSize = 0;
  lengths[0] = 40;
  EXPECT_NE(message().find("reads dense K and V"), std::string::npos) << message();
}

} // namespace
