//===- FoldScale.cpp - flash-fold-scale -----------------------------------===//

#include "ScoreChain.h"
#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

namespace flashc::flash {
#define GEN_PASS_DEF_FLASHFOLDSCALE
#include "flashc/Dialect/Flash/Transforms/Passes.h.inc"
} // namespace flashc::flash

using namespace mlir;
using namespace flashc::flash;

namespace {

constexpr double kLog2E = 1.4426950408889634;

struct FlashFoldScalePass : flashc::flash::impl::FlashFoldScaleBase<FlashFoldScalePass> {
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    SmallVector<OnlineSoftmaxOp> softmaxes;
    kernel.walk([&](OnlineSoftmaxOp op) { softmaxes.push_back(op); });
    if (softmaxes.empty() ||
        llvm::any_of(softmaxes, [](OnlineSoftmaxOp op) { return op.getExp2Scale(); }))
      return;

    // The running max is kernel-wide state, so every softmax of the kernel
    // must use one convention; fold the dot scale only if all of them can.
    llvm::SmallPtrSet<Operation *, 4> dots;
    std::optional<float> commonScale;
    bool foldDotScale = true;
    for (OnlineSoftmaxOp softmax : softmaxes) {
      QKDotOp dot = dotThroughMasks(softmax.getScores());
      if (!dot || !(dot.getScale().convertToFloat() > 0) ||
          (commonScale && *commonScale != dot.getScale().convertToFloat())) {
        foldDotScale = false;
        break;
      }
      commonScale = dot.getScale().convertToFloat();
      dots.insert(dot);
    }
    // A dot feeding anything but its mask chain must keep its scale.
    kernel.walk([&](QKDotOp dot) {
      if (!dots.contains(dot) || !dot->hasOneUse())
        foldDotScale = false;
    });

    Builder builder(&getContext());
    double exp2Scale = kLog2E;
    if (foldDotScale) {
      exp2Scale = static_cast<double>(*commonScale) * kLog2E;
      for (Operation *dot : dots)
        cast<QKDotOp>(dot).setScaleAttr(builder.getF32FloatAttr(1.0f));
      kernel.walk([&](FinalizeOp finalize) {
        finalize.setMaxScaleAttr(builder.getF32FloatAttr(*commonScale));
      });
    }
    for (OnlineSoftmaxOp softmax : softmaxes)
      softmax.setExp2ScaleAttr(builder.getF32FloatAttr(static_cast<float>(exp2Scale)));
  }
};

} // namespace
