//===- AOT.h - Kernels for plain C/C++ programs -----------------*- C++ -*-===//
//
// `flashc --emit=aot -o DIR` turns each kernel package into files a C or C++
// program builds with, needing only libflashrt at run time (no flashc, MLIR
// or Python):
//
//   DIR/<kernel>.h      C API: flashc_<kernel>_launch(...), flashc_<kernel>_error()
//   DIR/<kernel>.cpp    its implementation: the package (manifest + PTX)
//                       embedded, loaded once, launched through
//                       flashrun::AttentionKernel (link flashc::flashrun)
//   DIR/<kernel>.ptx    the PTX, and <kernel>.cubin when ptxas is available
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_TARGET_PACKAGE_AOT_H
#define FLASHC_TARGET_PACKAGE_AOT_H

#include "flashrt/Package.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace flashc {

struct AOTSources {
  std::string header; // <kernel>.h
  std::string source; // <kernel>.cpp
};

/// The C header and C++ source for `package`; `inputName` (the .flash file)
/// is recorded in their comments.
/// With `backward` (the variant's backward package), the header also
/// declares flashc_<name>_backward and flashc_<name>_backward_workspace.
AOTSources generateAOTSources(const flashrt::KernelPackage &package, llvm::StringRef inputName,
                              const flashrt::KernelPackage *backward = nullptr);

/// Writes the files of `package` into `directory` (created if missing): the
/// sources, <kernel>.ptx and, with `backward`, <kernel>_backward.ptx. With a
/// non-empty `ptxas`, also assembles each PTX into a .cubin for its arch.
llvm::Error writeAOT(const flashrt::KernelPackage &package, llvm::StringRef inputName,
                     llvm::StringRef directory, llvm::StringRef ptxas,
                     const flashrt::KernelPackage *backward = nullptr);

} // namespace flashc

#endif // FLASHC_TARGET_PACKAGE_AOT_H
