//===- Error.h - libflashrt errors and process exit codes -------*- C++ -*-===//
#ifndef FLASHRT_ERROR_H
#define FLASHRT_ERROR_H

#include <stdexcept>
#include <string>

namespace flashrt {

enum class ErrorKind {
  NoDriver,        // libcuda.so.1 absent, unloadable, or a stub
  NoDevice,        // driver present but no usable GPU
  JitError,        // PTX did not load; the message carries the JIT log
  LaunchError,     // cuLaunchKernel refused the launch
  DriverError,     // any other failing driver call
  InvalidArgument, // caller error caught before reaching the driver
};

/// Every failure libflashrt reports. what() is a complete, human-readable
/// sentence; for driver failures it names the entry point and the CUresult,
/// e.g. "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
class Error : public std::runtime_error {
public:
  Error(ErrorKind kind, const std::string &message, int driverResult = 0)
      : std::runtime_error(message), errorKind(kind), result(driverResult) {}
  Error(const Error &) = default;
  Error &operator=(const Error &) = default;
  // Out of line, so the vtable and type info live in libflashrt alone.
  ~Error() override;

  ErrorKind kind() const { return errorKind; }
  /// The CUresult that caused this error, or 0 when none did.
  int driverResult() const { return result; }

private:
  ErrorKind errorKind;
  int result;
};

/// "NoDriver", "JitError", ...
const char *errorKindName(ErrorKind kind);

/// Process exit code for a tool that dies of `kind`. NoDriver and NoDevice
/// share 3 so scripts and test runners can report "skipped: no GPU";
/// JitError is 4; everything else is 5. 0-2 stay free for success, generic
/// failure and usage errors.
int exitCodeFor(ErrorKind kind);

/// The code exitCodeFor(NoDriver) and exitCodeFor(NoDevice) return.
constexpr int kNoGpuExitCode = 3;

} // namespace flashrt

#endif // FLASHRT_ERROR_H
