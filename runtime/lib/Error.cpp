//===- Error.cpp - libflashrt errors and process exit codes ---------------===//
#include "flashrt/Error.h"

namespace flashrt {

Error::~Error() = default;

const char *errorKindName(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::NoDriver:
    return "NoDriver";
  case ErrorKind::NoDevice:
    return "NoDevice";
  case ErrorKind::JitError:
    return "JitError";
  case ErrorKind::LaunchError:
    return "LaunchError";
  case ErrorKind::DriverError:
    return "DriverError";
  case ErrorKind::InvalidArgument:
    return "InvalidArgument";
  }
  return "UnknownError";
}

int exitCodeFor(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::NoDriver:
  case ErrorKind::NoDevice:
    return kNoGpuExitCode;
  case ErrorKind::JitError:
    return 4;
  case ErrorKind::LaunchError:
  case ErrorKind::DriverError:
  case ErrorKind::InvalidArgument:
    return 5;
  }
  return 5;
}

} // namespace flashrt
