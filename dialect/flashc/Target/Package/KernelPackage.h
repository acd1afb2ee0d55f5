//===- KernelPackage.h - Compile flash kernels into packages ----*- C++ -*-===//
#ifndef FLASHC_TARGET_PACKAGE_KERNELPACKAGE_H
#define FLASHC_TARGET_PACKAGE_KERNELPACKAGE_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "flashc/Target/NVPTX/EmitPTX.h"

#include "flashrt/Package.h"

#include <optional>
#include <string>
#include <vector>

namespace flashc {

/// A stable hash of a kernel op's flash IR (flash.kernel or
/// flash.backward_kernel; its printed form, locations dropped): two compiles
/// of one variant with one tile config agree.
std::string variantHash(mlir::Operation *kernel);

/// The name of the package a kernel op compiles to: the forward kernel's
/// symbol, or the backward's main kernel (`<name>_bwd`).
std::string packageKernelName(mlir::Operation *kernel);

/// Compiles each kernel of `flashModule` (flash IR after the flash passes;
/// the module itself is left untouched) to PTX for `options.chip` and wraps
/// it with its launch metadata: one package per flash.kernel, then one
/// backward package (three kernels) per flash.backward_kernel. Errors are
/// reported to the context.
mlir::FailureOr<std::vector<flashrt::KernelPackage>>
buildKernelPackages(mlir::ModuleOp flashModule, const nvptx::TargetOptions &options);

/// Writes `contents` to a unique temporary file next to `path` and renames
/// it over `path`: readers see the old file or the new one, never a torn
/// one, whatever other writers do.
llvm::Error writeFileAtomically(llvm::StringRef path, llvm::StringRef contents);

/// A directory of kernel packages keyed by everything their PTX depends on:
/// the kernel's flash IR (tile and element type included), the target
/// options, the flashc version and the build of the running compiler (its
/// executable's size and modification time: a rebuild starts afresh). Entries are written to a unique
/// temporary file and renamed into place, so concurrent writers never leave
/// a torn file; an entry that does not parse or does not match its kernel is
/// ignored with a warning and compiled again.
class CompileCache {
public:
  explicit CompileCache(std::string directory) : root(std::move(directory)) {}
  /// $FLASHC_CACHE_DIR, else $XDG_CACHE_HOME/flashc, else $HOME/.cache/flashc,
  /// else <temporary directory>/flashc.
  static std::string defaultDirectory();
  static std::string key(mlir::Operation *kernel, const nvptx::TargetOptions &options);

  const std::string &directory() const { return root; }
  std::string pathFor(llvm::StringRef key) const;
  /// The package stored for `kernel` under `key`, or nullopt (a bad entry
  /// adds a line to `warnings`).
  std::optional<flashrt::KernelPackage> lookup(mlir::Operation *kernel, llvm::StringRef key,
                                               std::string &warnings) const;
  llvm::Error store(llvm::StringRef key, const flashrt::KernelPackage &package) const;

private:
  std::string root;
};

/// buildKernelPackages through `cache`: kernels it holds are loaded, the
/// others compiled and stored. `hits` counts the kernels loaded; problems
/// with the cache itself go to `warnings` and never fail the build.
mlir::FailureOr<std::vector<flashrt::KernelPackage>>
buildKernelPackages(mlir::ModuleOp flashModule, const nvptx::TargetOptions &options,
                    const CompileCache &cache, int &hits, std::string &warnings);

} // namespace flashc

#endif // FLASHC_TARGET_PACKAGE_KERNELPACKAGE_H
