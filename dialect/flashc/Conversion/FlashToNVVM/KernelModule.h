//===- KernelModule.h - Where the GPU lowerings put their kernels -*- C++ -*-===//
//
// Every flash-to-<target> pass emits its kernels into one gpu.module and
// records each kernel's launch facts (#flash.launch, see FlashAttrs.td) in a
// dictionary on it, keyed by kernel name; PTX emission reads them back.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONVERSION_FLASHTONVVM_KERNELMODULE_H
#define FLASHC_CONVERSION_FLASHTONVVM_KERNELMODULE_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace flashc {

/// Name of the gpu.module that holds every lowered kernel.
inline constexpr llvm::StringLiteral kKernelModuleName = "flashc_kernels";
/// Dictionary attribute on that gpu.module: kernel name -> #flash.launch.
inline constexpr llvm::StringLiteral kLaunchAttrName = "flashc.launch";

/// The kernels of variant `name`'s backward pass: the main kernel
/// `<name>_bwd` and `<name>_bwd_<role>` for role "preprocess" and "convert".
inline std::string backwardKernelName(llvm::StringRef name, llvm::StringRef role = "") {
  std::string result = name.str() + "_bwd";
  if (!role.empty())
    result += "_" + role.str();
  return result;
}

/// The kernel that computes variant `name`'s block summary (a forward
/// kernel with a #flash.block_summary): `<name>_summary`.
inline std::string blockSummaryKernelName(llvm::StringRef name) {
  return name.str() + "_summary";
}

/// The kernel that merges the splits' partial states of a split_keys
/// kernel: `<name>_combine`.
inline std::string splitCombineKernelName(llvm::StringRef name) {
  return name.str() + "_combine";
}

/// The gpu.module @flashc_kernels of `module`, created (and `module` marked
/// a GPU container module) when missing.
mlir::gpu::GPUModuleOp getOrCreateKernelModule(mlir::ModuleOp module);

/// Adds `launches` (kernel name -> #flash.launch) to the launch dictionary
/// of `gpuModule`.
void recordLaunches(mlir::gpu::GPUModuleOp gpuModule,
                    llvm::ArrayRef<mlir::NamedAttribute> launches);

} // namespace flashc

#endif // FLASHC_CONVERSION_FLASHTONVVM_KERNELMODULE_H
