//===- ClassifyTiles.cpp - flash-classify-tiles ---------------------------===//
//
// For each flash.mask, emits the interval evaluation of its region over the
// tile (MaskIntervals.h) and attaches the two facts it proves to the mask:
// every element visible (the mask is the identity on this tile) and some
// element visible (otherwise the key block can be skipped). An aux tensor
// element is unknown here, so such tiles stay partial unless the kernel has
// a run-time block summary.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"
#include "flashc/Dialect/Flash/Transforms/MaskIntervals.h"

#include "mlir/IR/Builders.h"

namespace flashc::flash {
#define GEN_PASS_DEF_FLASHCLASSIFYTILES
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"
} // namespace flashc::flash

using namespace mlir;
using namespace flashc::flash;

namespace {

/// A kernel with a run-time block summary knows more than the intervals
/// about a mask that reads aux tensors: the tile is full where either says
/// so and empty where either says so. Row bands keep the intervals' facts
/// (a band the summary empties lies in an empty tile, skipped whole).
void combineWithBlockSummary(OpBuilder &b, MaskOp mask, MaskIntervalEmitter::Facts &facts) {
  auto kernel = mask->getParentOfType<KernelSignature>();
  if (!kernel || !kernel.getBlockSummaryAttr() || !mask.readsAuxTensors())
    return;
  Location loc = mask.getLoc();
  Value blockClass = BlockClassOp::create(b, loc, b.getI32Type(), mask.getBatch(),
                                          mask.getHead(), mask.getQueryTile(), mask.getKeyTile());
  auto is = [&](arith::CmpIPredicate predicate, int64_t value) {
    return arith::CmpIOp::create(b, loc, predicate, blockClass,
                                 arith::ConstantIntOp::create(b, loc, value, 32));
  };
  facts.allVisible = arith::OrIOp::create(b, loc, facts.allVisible,
                                          is(arith::CmpIPredicate::eq, kBlockFull));
  facts.anyVisible = arith::AndIOp::create(b, loc, facts.anyVisible,
                                           is(arith::CmpIPredicate::ne, kBlockEmpty));
}

struct FlashClassifyTilesPass
    : flashc::flash::impl::FlashClassifyTilesBase<FlashClassifyTilesPass> {
  using Base::Base;

  void runOnOperation() override {
    getOperation()->walk([&](MaskOp mask) {
      if (mask.isClassified())
        return;
      OpBuilder builder(mask);
      MaskIntervalEmitter::Facts facts =
          MaskIntervalEmitter(builder, mask.getLoc(), {}, /*hoistUniforms=*/true)
              .classify(mask, groupRows);
      combineWithBlockSummary(builder, mask, facts);
      mask.getAllVisibleMutable().assign(facts.allVisible);
      mask.getAnyVisibleMutable().assign(facts.anyVisible);
      mask.getRowsVisibleMutable().assign(facts.rowsVisible);
    });
  }
};

} // namespace
