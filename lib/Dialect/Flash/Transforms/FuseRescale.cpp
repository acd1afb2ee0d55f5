//===- FuseRescale.cpp - flash-fuse-rescale -------------------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace flashc::flash {
#define GEN_PASS_DEF_FLASHFUSERESCALE
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"
} // namespace flashc::flash

using namespace mlir;
using namespace flashc::flash;

namespace {

/// pv_accumulate(rescale(A, α), P, V) -> rescale_accumulate(A, α, P, V).
struct FuseRescaleIntoAccumulate : OpRewritePattern<PVAccumulateOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(PVAccumulateOp accumulate,
                                PatternRewriter &rewriter) const override {
    auto rescale = accumulate.getAcc().getDefiningOp<RescaleOp>();
    if (!rescale)
      return rewriter.notifyMatchFailure(accumulate, "accumulator is not rescaled");
    // Another user would still need diag(α)·A on its own.
    if (!rescale->hasOneUse())
      return rewriter.notifyMatchFailure(accumulate, "rescaled accumulator has other uses");
    rewriter.replaceOpWithNewOp<RescaleAccumulateOp>(
        accumulate, accumulate.getType(), rescale.getAcc(), rescale.getAlpha(), accumulate.getProbs(),
        accumulate.getValue());
    rewriter.eraseOp(rescale);
    return success();
  }
};

struct FlashFuseRescalePass
    : flashc::flash::impl::FlashFuseRescaleBase<FlashFuseRescalePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseRescaleIntoAccumulate>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
