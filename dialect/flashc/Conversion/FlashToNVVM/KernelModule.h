//===- KernelModule.h - Where the GPU lowerings put their kernels -*- C++ -*-===//
//
// Every flash-to-<target> pass emits its kernels into one gpu.module and
// records each kernel's launch facts (#flash.launch, see FlashAttrs.td) in a
// dictionary on it, keyed by kernel name; PTX emission reads them back.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_CONVERSION_FLASHTONVVM_KERNELMODULE_H
#define FLASHC_CONVERSION_FLASHTONVVM_KERNELMODULE_H

#include "llvm/ADT/StringRef.h"

namespace flashc {

/// Name of the gpu.module that holds every lowered kernel.
inline constexpr llvm::StringLiteral kKernelModuleName = "flashc_kernels";
/// Dictionary attribute on that gpu.module: kernel name -> #flash.launch.
inline constexpr llvm::StringLiteral kLaunchAttrName = "flashc.launch";

} // namespace flashc

#endif // FLASHC_CONVERSION_FLASHTONVVM_KERNELMODULE_H
