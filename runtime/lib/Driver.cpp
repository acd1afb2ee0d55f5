//===- Driver.cpp - Run-time loader for the CUDA driver -------------------===//
#include "flashrt/Driver.h"

#include "CudaApi.h"
#include "Internal.h"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <optional>

using namespace flashrt;
using namespace flashrt::cu;

namespace {

/// dlerror() text, or a fallback when the loader left none.
std::string lastDlError() {
  const char *message = dlerror();
  return message ? message : "unknown dynamic loader error";
}

/// Closes a library handle unless released, so that failing before cuInit
/// does not leak the handle.
struct LibraryGuard {
  void *handle;
  ~LibraryGuard() {
    if (handle)
      dlclose(handle);
  }
};

/// Names for the codes flashrt handles specially, for drivers whose
/// cuGetErrorName does not know them (the toolkit's stub knows none).
const char *fallbackResultName(int result) {
  switch (result) {
  case CUDA_ERROR_INVALID_VALUE:
    return "CUDA_ERROR_INVALID_VALUE";
  case CUDA_ERROR_OUT_OF_MEMORY:
    return "CUDA_ERROR_OUT_OF_MEMORY";
  case CUDA_ERROR_NOT_INITIALIZED:
    return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_DEINITIALIZED:
    return "CUDA_ERROR_DEINITIALIZED";
  case CUDA_ERROR_STUB_LIBRARY:
    return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_NO_DEVICE:
    return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_INVALID_DEVICE:
    return "CUDA_ERROR_INVALID_DEVICE";
  case CUDA_ERROR_INVALID_IMAGE:
    return "CUDA_ERROR_INVALID_IMAGE";
  case CUDA_ERROR_NO_BINARY_FOR_GPU:
    return "CUDA_ERROR_NO_BINARY_FOR_GPU";
  case CUDA_ERROR_INVALID_PTX:
    return "CUDA_ERROR_INVALID_PTX";
  case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
  case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
  case CUDA_ERROR_NOT_FOUND:
    return "CUDA_ERROR_NOT_FOUND";
  default:
    return nullptr;
  }
}

template <typename Fn>
void resolve(void *library, const std::string &path, const char *symbol,
             Fn *&slot) {
  dlerror(); // Clear any stale error so the check below is about `symbol`.
  void *address = dlsym(library, symbol);
  if (!address)
    throw Error(ErrorKind::NoDriver,
                "'" + path + "' is not a usable CUDA driver: it does not " +
                    "export " + symbol + " (" + lastDlError() + ")");
  slot = reinterpret_cast<Fn *>(address);
}

} // namespace

Driver::Driver(const std::string &libraryPath)
    : path(libraryPath), entryPoints(std::make_unique<DriverApi>()) {
  dlerror();
  // RTLD_LOCAL: the driver's symbols must not satisfy anyone else's lookups.
  LibraryGuard library{dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)};
  if (!library.handle)
    throw Error(ErrorKind::NoDriver, "cannot load the CUDA driver library '" +
                                         path + "': " + lastDlError());

  DriverApi &api = *entryPoints;
  void *h = library.handle;
  resolve(h, path, "cuGetErrorName", api.cuGetErrorName);
  resolve(h, path, "cuGetErrorString", api.cuGetErrorString);
  resolve(h, path, "cuInit", api.cuInit);
  resolve(h, path, "cuDriverGetVersion", api.cuDriverGetVersion);
  resolve(h, path, "cuDeviceGetCount", api.cuDeviceGetCount);
  resolve(h, path, "cuDeviceGet", api.cuDeviceGet);
  resolve(h, path, "cuDeviceGetName", api.cuDeviceGetName);
  resolve(h, path, "cuDeviceGetAttribute", api.cuDeviceGetAttribute);
  resolve(h, path, "cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain);
  resolve(h, path, "cuDevicePrimaryCtxRelease_v2",
          api.cuDevicePrimaryCtxRelease_v2);
  resolve(h, path, "cuCtxSetCurrent", api.cuCtxSetCurrent);
  resolve(h, path, "cuCtxSynchronize", api.cuCtxSynchronize);
  resolve(h, path, "cuModuleLoadDataEx", api.cuModuleLoadDataEx);
  resolve(h, path, "cuModuleUnload", api.cuModuleUnload);
  resolve(h, path, "cuModuleGetFunction", api.cuModuleGetFunction);
  resolve(h, path, "cuFuncSetAttribute", api.cuFuncSetAttribute);
  resolve(h, path, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
          api.cuOccupancyMaxActiveBlocksPerMultiprocessor);
  resolve(h, path, "cuLaunchKernel", api.cuLaunchKernel);
  resolve(h, path, "cuMemAlloc_v2", api.cuMemAlloc_v2);
  resolve(h, path, "cuMemFree_v2", api.cuMemFree_v2);
  resolve(h, path, "cuMemcpyHtoD_v2", api.cuMemcpyHtoD_v2);
  resolve(h, path, "cuMemcpyDtoH_v2", api.cuMemcpyDtoH_v2);
  resolve(h, path, "cuMemsetD8_v2", api.cuMemsetD8_v2);
  resolve(h, path, "cuStreamCreate", api.cuStreamCreate);
  resolve(h, path, "cuStreamDestroy_v2", api.cuStreamDestroy_v2);
  resolve(h, path, "cuStreamSynchronize", api.cuStreamSynchronize);
  resolve(h, path, "cuEventCreate", api.cuEventCreate);
  resolve(h, path, "cuEventRecord", api.cuEventRecord);
  resolve(h, path, "cuEventSynchronize", api.cuEventSynchronize);
  resolve(h, path, "cuEventDestroy_v2", api.cuEventDestroy_v2);

  // cuda.h maps cuEventElapsedTime to the _v2 entry point from CUDA 12.8 on;
  // older drivers export only the original, which has the same signature.
  api.cuEventElapsedTimeSymbol = "cuEventElapsedTime_v2";
  if (!dlsym(h, api.cuEventElapsedTimeSymbol))
    api.cuEventElapsedTimeSymbol = "cuEventElapsedTime";
  resolve(h, path, api.cuEventElapsedTimeSymbol, api.cuEventElapsedTime);

  api.cuTensorMapEncodeTiled =
      reinterpret_cast<decltype(api.cuTensorMapEncodeTiled)>(
          dlsym(h, "cuTensorMapEncodeTiled"));
  dlerror();

  // From cuInit on, keep the driver loaded for the life of the process, even
  // if initialization fails: the driver may own threads, fork handlers and
  // thread-local state by then, and dlclose would pull the code out from
  // under them.
  library.handle = nullptr;
  CUresult result = api.cuInit(0);
  if (result == CUDA_ERROR_NO_DEVICE)
    check(result, "cuInit", ErrorKind::NoDevice);
  if (result == CUDA_ERROR_STUB_LIBRARY)
    throw Error(ErrorKind::NoDriver,
                "'" + path + "' is the CUDA toolkit's stub library, not a " +
                    "driver: cuInit failed: " + describe(result),
                result);
  check(result, "cuInit");
  check(api.cuDriverGetVersion(&driverVersion), "cuDriverGetVersion");
  check(api.cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (devices == 0)
    throw Error(ErrorKind::NoDevice,
                "the CUDA driver '" + path + "' sees no device");
}

Driver::~Driver() = default;

Driver &Driver::get() {
  struct Loaded {
    Driver *driver = nullptr;
    std::optional<Error> failure;
  };
  // A function-local static gives thread-safe one-time loading without
  // linking libpthread. The driver is never deleted: static destructors of
  // user objects may still release driver resources at exit.
  static const Loaded loaded = [] {
    Loaded attempt;
    try {
      attempt.driver = new Driver(defaultLibraryPath());
    } catch (const Error &error) {
      attempt.failure = error;
    }
    return attempt;
  }();
  if (loaded.failure)
    throw *loaded.failure;
  return *loaded.driver;
}

bool Driver::available(std::string *whyNot) noexcept {
  try {
    get();
    return true;
  } catch (const std::exception &error) {
    if (whyNot)
      *whyNot = error.what();
  } catch (...) {
    if (whyNot)
      *whyNot = "unknown failure while loading the CUDA driver";
  }
  return false;
}

std::string Driver::defaultLibraryPath() {
  const char *overridePath = std::getenv("FLASHRT_CUDA_LIBRARY");
  if (overridePath && *overridePath)
    return overridePath;
  return "libcuda.so.1";
}

std::string Driver::versionString() const {
  return std::to_string(driverVersion / 1000) + "." +
         std::to_string(driverVersion % 1000 / 10);
}

bool Driver::hasTensorMapEncodeTiled() const {
  return entryPoints->cuTensorMapEncodeTiled != nullptr;
}

std::string Driver::describe(int result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  auto code = static_cast<CUresult>(result);
  if (entryPoints->cuGetErrorName(code, &name) != CUDA_SUCCESS || !name)
    name = fallbackResultName(result);
  if (entryPoints->cuGetErrorString(code, &text) != CUDA_SUCCESS || !text)
    text = "the driver has no description for it";
  std::string described =
      name ? std::string(name) : "CUresult " + std::to_string(result);
  return described + " (" + text + ")";
}

void Driver::check(int result, const char *function, ErrorKind kind,
                   const std::string &detail) const {
  if (result == CUDA_SUCCESS)
    return;
  std::string message = std::string(function) + " failed: " + describe(result);
  if (!detail.empty())
    message += (detail.front() == '\n' ? "" : " ") + detail;
  throw Error(kind, message, result);
}

void detail::warnOnFailure(const Driver &driver, int result,
                           const char *function) {
  if (result == CUDA_SUCCESS)
    return;
  std::fprintf(stderr, "flashrt: warning: %s failed during cleanup: %s\n",
               function, driver.describe(result).c_str());
}
