//===- InitAllDialects.h - The dialects and passes every tool sees -*- C++ -*-===//
//
// flashc, flashc-opt and flashc-tune register the same world through this
// header, so IR printed by one tool parses in the others.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_INITALLDIALECTS_H
#define FLASHC_INITALLDIALECTS_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "flashc/Dialect/Flash/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

// The GPU path (flash-to-sm80, PTX emission) is registered by the tools that
// link FlashcNVPTX; its CMake target defines FLASHC_HAS_NVPTX for them.
#ifdef FLASHC_HAS_NVPTX
#include "flashc/Target/NVPTX/EmitPTX.h"
#endif

namespace flashc {

inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<flash::FlashDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::scf::SCFDialect,
                  mlir::func::FuncDialect>();
#ifdef FLASHC_HAS_NVPTX
  nvptx::registerNVPTXDialects(registry);
#endif
}

inline void registerAllPasses() {
  flash::registerFlashPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
#ifdef FLASHC_HAS_NVPTX
  nvptx::registerNVPTXPasses();
#endif
}

} // namespace flashc

#endif // FLASHC_INITALLDIALECTS_H
