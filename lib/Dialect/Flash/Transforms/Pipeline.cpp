//===- Pipeline.cpp - The flash-level pass pipeline -----------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

void flashc::flash::buildFlashPipeline(mlir::OpPassManager &pm) {
  mlir::OpPassManager &kernelPM = pm.nest<KernelOp>();
  kernelPM.addPass(createFlashFuseRescale());
  // Bands of 64 rows: one wgmma warpgroup's (flash-to-sm90 skips, per
  // consumer warpgroup, the key blocks its own rows do not see).
  FlashClassifyTilesOptions classify;
  classify.groupRows = 64;
  kernelPM.addPass(createFlashClassifyTiles(classify));
  kernelPM.addPass(mlir::createCSEPass());
  kernelPM.addPass(createFlashFoldScale());
  // The backward recomputes the forward's scores: its masks classify the
  // same way (no row bands: one program owns the whole query tile).
  mlir::OpPassManager &backwardPM = pm.nest<BackwardKernelOp>();
  backwardPM.addPass(createFlashClassifyTiles());
  backwardPM.addPass(mlir::createCSEPass());
  backwardPM.addPass(createFlashFoldBackwardScale());
}
