//===- KernelPackage.h - Compile flash kernels into packages ----*- C++ -*-===//
#ifndef FLASHC_TARGET_PACKAGE_KERNELPACKAGE_H
#define FLASHC_TARGET_PACKAGE_KERNELPACKAGE_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "flashc/Target/NVPTX/EmitPTX.h"

#include "flashrt/Package.h"

#include <vector>

namespace flashc {

/// A stable hash of a kernel's flash IR (its printed form, locations
/// dropped): two compiles of one variant with one tile config agree.
std::string variantHash(flash::KernelOp kernel);

/// Compiles each kernel of `flashModule` (flash IR after the flash passes;
/// the module itself is left untouched) to PTX for `options.chip` and wraps
/// it with its launch metadata. Errors are reported to the context.
mlir::FailureOr<std::vector<flashrt::KernelPackage>>
buildKernelPackages(mlir::ModuleOp flashModule, const nvptx::TargetOptions &options);

} // namespace flashc

#endif // FLASHC_TARGET_PACKAGE_KERNELPACKAGE_H
