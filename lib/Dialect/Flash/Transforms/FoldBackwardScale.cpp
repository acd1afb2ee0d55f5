//===- FoldBackwardScale.cpp - flash-fold-backward-scale ------------------===//

#include "ScoreChain.h"
#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace flashc::flash {
#define GEN_PASS_DEF_FLASHFOLDBACKWARDSCALE
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"
} // namespace flashc::flash

using namespace mlir;
using namespace flashc::flash;

namespace {

struct FlashFoldBackwardScalePass
    : flashc::flash::impl::FlashFoldBackwardScaleBase<FlashFoldBackwardScalePass> {
  void runOnOperation() override {
    Builder builder(&getContext());
    getOperation().walk([&](RecomputeProbsOp probs) {
      if (probs.getScoreScaleAttr())
        return;
      QKDotOp dot = dotThroughMasks(probs.getScores());
      if (!dot)
        return;
      float scale = dot.getScale().convertToFloat();
      if (!(scale > 0) || !std::isfinite(scale))
        return;
      dot.setScaleAttr(builder.getF32FloatAttr(1.0f));
      probs.setScoreScaleAttr(builder.getF32FloatAttr(scale));
    });
  }
};

} // namespace
