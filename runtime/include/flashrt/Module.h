//===- Module.h - Loaded PTX modules and their kernels ----------*- C++ -*-===//
#ifndef FLASHRT_MODULE_H
#define FLASHRT_MODULE_H

#include "flashrt/Error.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

struct CUmod_st;
struct CUfunc_st;

namespace flashrt {

class Context;
class Driver;
class KernelArgs;
class Stream;

struct Dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;

  constexpr Dim3() = default;
  constexpr Dim3(unsigned x, unsigned y = 1, unsigned z = 1)
      : x(x), y(y), z(z) {}
};

/// A kernel of a loaded Module; valid while that Module lives.
class Function {
public:
  const std::string &name() const { return kernelName; }
  CUfunc_st *handle() const { return function; }

  /// Allows launches with up to `bytes` of dynamic shared memory; needed
  /// above 48 KiB, up to Device::maxSharedMemoryPerBlockOptin().
  void setMaxDynamicSharedMemory(size_t bytes);
  /// How many blocks of `threads` threads with `dynamicSharedBytes` of
  /// dynamic shared memory fit on one multiprocessor at once (the driver's
  /// occupancy calculator; 0 when one does not fit).
  int maxActiveBlocksPerMultiprocessor(int threads, size_t dynamicSharedBytes) const;

  /// Launches on `stream`. `args` holds one pointer per kernel parameter.
  /// Throws InvalidArgument for a zero dimension and LaunchError when the
  /// driver refuses the launch. Faults during execution surface at the next
  /// synchronization.
  void launch(Dim3 grid, Dim3 block, size_t dynamicSharedBytes, Stream &stream,
              void **args) const;
  void launch(Dim3 grid, Dim3 block, size_t dynamicSharedBytes, Stream &stream,
              const KernelArgs &args) const;

private:
  friend class Module;
  Function(const Driver &driver, CUfunc_st *function, std::string name)
      : driver(&driver), function(function), kernelName(std::move(name)) {}

  const Driver *driver;
  CUfunc_st *function;
  std::string kernelName;
};

/// A module JIT-compiled from PTX into a context; unloaded on destruction.
class Module {
public:
  /// JIT-compiles `ptx` for the context's device. Throws JitError carrying
  /// the JIT's error log (ptxas' diagnostics) when the PTX does not load.
  static Module fromPtx(Context &context, std::string_view ptx);
  ~Module();
  Module(Module &&other) noexcept;
  Module &operator=(Module &&other) noexcept;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  CUmod_st *handle() const { return module; }
  /// What the JIT reported for a successful load (verbose resource usage,
  /// warnings); may be empty.
  const std::string &jitLog() const { return infoLog; }

  /// The kernel named `name` (its .entry name). Throws InvalidArgument
  /// naming the kernel when the module has none by that name.
  Function function(const std::string &name) const;

private:
  Module(Context &context, CUmod_st *module, std::string infoLog)
      : owner(&context), module(module), infoLog(std::move(infoLog)) {}
  void release() noexcept;

  Context *owner;
  CUmod_st *module = nullptr;
  std::string infoLog;
};

} // namespace flashrt

#endif // FLASHRT_MODULE_H
