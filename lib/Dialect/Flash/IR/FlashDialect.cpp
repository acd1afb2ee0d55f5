//===- FlashDialect.cpp - The flash dialect -------------------------------===//

#include "flashc/Dialect/Flash/IR/FlashDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace flashc::flash;

#include "flashc/Dialect/Flash/IR/FlashDialect.cpp.inc"

void FlashDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "flashc/Dialect/Flash/IR/FlashOps.cpp.inc"
      >();
}
