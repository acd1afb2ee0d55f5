//===- Driver.h - Run-time loader for the CUDA driver -----------*- C++ -*-===//
//
// libflashrt never links libcuda: it dlopens it, so programs built against
// the runtime start on machines without a GPU and can say why they cannot
// run kernels there.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHRT_DRIVER_H
#define FLASHRT_DRIVER_H

#include "flashrt/Error.h"

#include <memory>
#include <string>

namespace flashrt {

namespace cu {
struct DriverApi;
} // namespace cu

/// A loaded and initialized CUDA driver with at least one device. Immutable
/// once constructed, so it may be shared across threads.
class Driver {
public:
  /// Loads the driver library at `libraryPath`, resolves its entry points,
  /// runs cuInit and counts devices. Throws Error: NoDriver when the library
  /// cannot be loaded, lacks an entry point or is the toolkit's stub;
  /// NoDevice when cuInit reports no device or none is visible; DriverError
  /// for any other failure. Tests use this to load a library of their
  /// choosing independently of get().
  explicit Driver(const std::string &libraryPath);
  ~Driver();
  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

  /// The process-wide driver, loaded from defaultLibraryPath() on first use.
  /// A failed first load is remembered: every call rethrows that error.
  static Driver &get();
  /// Non-throwing probe of get(): false, with the reason in `*whyNot` when
  /// given, if no driver or no device is usable.
  static bool available(std::string *whyNot = nullptr) noexcept;
  /// $FLASHRT_CUDA_LIBRARY when set and non-empty, else "libcuda.so.1".
  static std::string defaultLibraryPath();

  const std::string &libraryPath() const { return path; }
  /// cuDriverGetVersion: 1000 * major + 10 * minor (13000 for CUDA 13.0).
  int version() const { return driverVersion; }
  /// "13.0".
  std::string versionString() const;
  int deviceCount() const { return devices; }
  /// cuTensorMapEncodeTiled exists only in CUDA 12.0+ drivers; it is needed
  /// for Hopper TMA and missing it is an error only when it is used.
  bool hasTensorMapEncodeTiled() const;

  /// The resolved entry points, for libflashrt's own sources.
  const cu::DriverApi &api() const { return *entryPoints; }
  /// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string describe(int result) const;
  /// Throws Error(kind) saying "<function> failed: <describe(result)>",
  /// followed by `detail` when non-empty, unless `result` is CUDA_SUCCESS.
  void check(int result, const char *function,
             ErrorKind kind = ErrorKind::DriverError,
             const std::string &detail = std::string()) const;

private:
  std::string path;
  std::unique_ptr<cu::DriverApi> entryPoints;
  int driverVersion = 0;
  int devices = 0;
};

} // namespace flashrt

#endif // FLASHRT_DRIVER_H
