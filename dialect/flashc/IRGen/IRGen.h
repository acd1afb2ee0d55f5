//===- IRGen.h - Lower checked .flash variants to flash IR ------*- C++ -*-===//
#ifndef FLASHC_IRGEN_IRGEN_H
#define FLASHC_IRGEN_IRGEN_H

#include "flashc/Frontend/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>

namespace flashc::frontend {

/// Compile-time choices that the source leaves open.
struct KernelOptions {
  int64_t blockRows = 64; // Br
  int64_t blockCols = 64; // Bc
  /// The head dim for variants whose D is symbolic; a fixed D in the source
  /// must agree with it when both are given.
  std::optional<int64_t> headDim;
};

/// Builds one `flash.kernel` per variant (or only `onlyVariant` when set)
/// into a new module. Errors (an unknown variant, no head dim, a head dim
/// that contradicts the source) go through `sourceMgr` like parse errors and
/// give a null module.
mlir::OwningOpRef<mlir::ModuleOp>
emitFlashIR(mlir::MLIRContext &context, const Module &module,
            const KernelOptions &options, llvm::SourceMgr &sourceMgr,
            llvm::StringRef onlyVariant = {});

/// The head dim a variant compiles with under `options`, or nullopt.
std::optional<int64_t> resolveHeadDim(const Variant &variant,
                                      const KernelOptions &options);

/// The scale as a number: the variant's constant expression or 1/sqrt(D).
double evaluateScale(const Variant &variant, int64_t headDim);

} // namespace flashc::frontend

#endif // FLASHC_IRGEN_IRGEN_H
