//===- TileOrderTest.cpp - The block summary's tile order, host side ------===//
//
// The summary kernel writes, after the summary's bytes, the query tiles
// costliest first; flash-run checks what the GPU wrote with
// harness::checkTileOrder. These tests check that checker on orders built
// here (a right one passes, each kind of wrong one is named) and that the
// runtime and the dialect agree on where the order lies.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "flashc/Harness/GpuHarness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

using namespace flashc;

namespace {

flash::BlockSummaryShape shapeOf(int64_t batches, int64_t queryTiles, int64_t keyBlocks) {
  flash::BlockSummaryShape shape;
  shape.batches = batches;
  shape.queryTiles = queryTiles;
  shape.keyBlocks = keyBlocks;
  return shape;
}

/// Classes with a cost that varies by query tile: tile e has e % 5 full
/// blocks and e % 3 partial ones.
std::vector<uint8_t> classesOf(const flash::BlockSummaryShape &shape) {
  std::vector<uint8_t> classes(shape.bytes(), flash::kBlockEmpty);
  for (int64_t e = 0; e < shape.orderEntries(); ++e)
    for (int64_t kt = 0; kt < shape.keyBlocks; ++kt) {
      uint8_t &c = classes[e * shape.keyBlocks + kt];
      if (kt < e % 5)
        c = flash::kBlockFull;
      else if (kt < e % 5 + e % 3)
        c = flash::kBlockPartial;
    }
  return classes;
}

int64_t costOf(const flash::BlockSummaryShape &shape, const std::vector<uint8_t> &classes,
               int64_t entry) {
  int64_t cost = 0;
  for (int64_t kt = 0; kt < shape.keyBlocks; ++kt) {
    uint8_t c = classes[entry * shape.keyBlocks + kt];
    cost += (c != flash::kBlockEmpty) + (c == flash::kBlockPartial);
  }
  return cost;
}

/// What the GPU writes: the classes, padding, then `order`.
std::vector<uint8_t> withOrder(const flash::BlockSummaryShape &shape,
                               const std::vector<uint8_t> &classes,
                               const std::vector<uint32_t> &order) {
  std::vector<uint8_t> gpu(shape.bytesWithOrder(), 0xAB);
  std::copy(classes.begin(), classes.end(), gpu.begin());
  std::memcpy(&gpu[shape.orderOffset()], order.data(), 4 * order.size());
  return gpu;
}

std::vector<uint32_t> costliestFirst(const flash::BlockSummaryShape &shape,
                                     const std::vector<uint8_t> &classes) {
  std::vector<uint32_t> order(shape.orderEntries());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    return costOf(shape, classes, x) > costOf(shape, classes, y);
  });
  return order;
}

TEST(TileOrder, TheOrderStartsAlignedAfterTheBytes) {
  flash::BlockSummaryShape shape = shapeOf(3, 5, 7); // 105 bytes
  EXPECT_EQ(shape.orderOffset(), 108);
  EXPECT_EQ(shape.orderEntries(), 15);
  EXPECT_EQ(shape.bytesWithOrder(), 108 + 60);
  // Empty tiles land in the last bin; with fewer costs than bins every
  // cost has a bin of its own, the costlier the lower.
  EXPECT_EQ(shape.orderBin(0), flash::BlockSummaryShape::kTileOrderBins - 1);
  for (int64_t cost = 0; cost < 2 * 7; ++cost)
    EXPECT_LT(shape.orderBin(cost + 1), shape.orderBin(cost)) << cost;
  // With more costs than bins, neighbours share one and order never inverts.
  flash::BlockSummaryShape wide = shapeOf(1, 1, 1000);
  for (int64_t cost = 0; cost < 2 * 1000; ++cost)
    EXPECT_LE(wide.orderBin(cost + 1), wide.orderBin(cost)) << cost;
  EXPECT_GE(wide.orderBin(2 * 1000), 0);
}

TEST(TileOrder, ACostliestFirstPermutationPasses) {
  flash::BlockSummaryShape shape = shapeOf(2, 9, 6);
  std::vector<uint8_t> classes = classesOf(shape);
  std::vector<uint32_t> order = costliestFirst(shape, classes);
  EXPECT_EQ(harness::checkTileOrder(shape, classes, withOrder(shape, classes, order)), "");
  // Within one bin any order is right: equal costs swapped still pass.
  auto equal = std::adjacent_find(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    return costOf(shape, classes, x) == costOf(shape, classes, y);
  });
  ASSERT_NE(equal, order.end());
  std::iter_swap(equal, equal + 1);
  EXPECT_EQ(harness::checkTileOrder(shape, classes, withOrder(shape, classes, order)), "");
}

TEST(TileOrder, EachWrongOrderIsNamed) {
  flash::BlockSummaryShape shape = shapeOf(2, 9, 6);
  std::vector<uint8_t> classes = classesOf(shape);
  std::vector<uint32_t> order = costliestFirst(shape, classes);

  std::vector<uint32_t> reversed(order.rbegin(), order.rend());
  EXPECT_NE(harness::checkTileOrder(shape, classes, withOrder(shape, classes, reversed))
                .find("after bin"),
            std::string::npos);

  std::vector<uint32_t> twice = order;
  twice.back() = twice.front();
  EXPECT_NE(harness::checkTileOrder(shape, classes, withOrder(shape, classes, twice))
                .find("a second time"),
            std::string::npos);

  std::vector<uint32_t> past = order;
  past.back() = static_cast<uint32_t>(shape.orderEntries());
  EXPECT_NE(harness::checkTileOrder(shape, classes, withOrder(shape, classes, past))
                .find("past the 18 query tiles"),
            std::string::npos);

  // An order never written (zeros: tile 0 everywhere) fails too.
  std::vector<uint32_t> zeros(order.size(), 0);
  EXPECT_NE(harness::checkTileOrder(shape, classes, withOrder(shape, classes, zeros)), "");
}

TEST(TileOrder, RuntimeAndDialectAgreeOnTheSize) {
  mlir::MLIRContext context;
  context.loadDialect<flash::FlashDialect>();
  flashrt::KernelPackage package;
  package.kernelName = "document";
  package.blockSummary = true;
  for (bool perBatch : {false, true})
    for (bool perHead : {false, true})
      for (auto [br, bc] : {std::pair<int64_t, int64_t>{64, 128}, {128, 96}, {128, 64}})
        for (int64_t n : {1, 63, 100, 1000, 4097}) {
          package.blockRows = br;
          package.blockCols = bc;
          package.summaryPerBatch = perBatch;
          package.summaryPerHead = perHead;
          flashrun::Sizes sizes{3, 5, 5, n, n + 7};
          auto attr = flash::BlockSummaryAttr::get(&context, perBatch, perHead);
          flash::BlockSummaryShape shape =
              flash::BlockSummaryShape::of(attr, br, bc, 3, 5, n, n + 7);
          EXPECT_EQ(flashrun::AttentionKernel::blockSummaryBytes(package, sizes),
                    static_cast<size_t>(shape.bytesWithOrder()))
              << "Br=" << br << " Bc=" << bc << " N=" << n;
        }
}

} // namespace
