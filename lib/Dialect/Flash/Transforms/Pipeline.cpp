//===- Pipeline.cpp - The flash-level pass pipeline -----------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

void flashc::flash::buildFlashPipeline(mlir::OpPassManager &pm) {
  mlir::OpPassManager &kernelPM = pm.nest<KernelOp>();
  kernelPM.addPass(createFlashFuseRescale());
  kernelPM.addPass(createFlashClassifyTiles());
  kernelPM.addPass(mlir::createCSEPass());
  kernelPM.addPass(createFlashFoldScale());
}
