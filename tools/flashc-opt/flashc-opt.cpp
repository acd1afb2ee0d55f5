//===- flashc-opt.cpp - mlir-opt for the flash dialect --------------------===//
//
// Reads flash IR, runs passes, prints the result: the tool for looking at
// the IR after each pass and for the lit tests of the dialect and passes.
//
//===----------------------------------------------------------------------===//

#include "flashc/InitAllDialects.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  flashc::registerAllDialects(registry);
  flashc::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "flashc-opt: the flash dialect's optimizer driver\n", registry));
}
