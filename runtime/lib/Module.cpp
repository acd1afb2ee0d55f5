//===- Module.cpp - Loaded PTX modules and their kernels ------------------===//
#include "flashrt/Module.h"

#include "flashrt/Device.h"
#include "flashrt/KernelArgs.h"
#include "flashrt/Stream.h"

#include "CudaApi.h"
#include "Internal.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace flashrt;
using namespace flashrt::cu;

namespace {

/// Room for each JIT log; ptxas diagnostics for one module fit easily.
constexpr size_t kJitLogBytes = 16 * 1024;

std::string logText(const std::vector<char> &buffer) {
  return std::string(buffer.data(), strnlen(buffer.data(), buffer.size()));
}

std::string formatDim(Dim3 dim) {
  return std::to_string(dim.x) + "x" + std::to_string(dim.y) + "x" +
         std::to_string(dim.z);
}

} // namespace

Module Module::fromPtx(Context &context, std::string_view ptx) {
  // The driver reads PTX as a NUL-terminated string.
  std::string image(ptx);
  std::vector<char> infoBuffer(kJitLogBytes, '\0');
  std::vector<char> errorBuffer(kJitLogBytes, '\0');
  CUjit_option options[] = {
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_LOG_VERBOSE};
  // Sizes leave the last byte alone so the logs stay NUL-terminated.
  void *values[] = {
      infoBuffer.data(), reinterpret_cast<void *>(uintptr_t(kJitLogBytes - 1)),
      errorBuffer.data(), reinterpret_cast<void *>(uintptr_t(kJitLogBytes - 1)),
      reinterpret_cast<void *>(uintptr_t(1))};
  static_assert(sizeof(options) / sizeof(options[0]) ==
                sizeof(values) / sizeof(values[0]));

  context.makeCurrent();
  const Driver &driver = context.driver();
  CUmodule module = nullptr;
  CUresult result = driver.api().cuModuleLoadDataEx(
      &module, image.c_str(), sizeof(options) / sizeof(options[0]), options,
      values);
  std::string infoLog = logText(infoBuffer);
  if (result != CUDA_SUCCESS) {
    std::string errorLog = logText(errorBuffer);
    std::string detail;
    if (!errorLog.empty())
      detail = "\nJIT error log:\n" + errorLog;
    if (!infoLog.empty())
      detail += "\nJIT info log:\n" + infoLog;
    if (detail.empty())
      detail = "(the JIT left no log)";
    driver.check(result, "cuModuleLoadDataEx", ErrorKind::JitError, detail);
  }
  return Module(context, module, std::move(infoLog));
}

Module::~Module() { release(); }

Module::Module(Module &&other) noexcept
    : owner(other.owner), module(std::exchange(other.module, nullptr)),
      infoLog(std::move(other.infoLog)) {}

Module &Module::operator=(Module &&other) noexcept {
  if (this != &other) {
    release();
    owner = other.owner;
    module = std::exchange(other.module, nullptr);
    infoLog = std::move(other.infoLog);
  }
  return *this;
}

void Module::release() noexcept {
  if (!module)
    return;
  const Driver &driver = owner->driver();
  detail::warnOnFailure(driver, driver.api().cuCtxSetCurrent(owner->handle()),
                        "cuCtxSetCurrent");
  detail::warnOnFailure(driver, driver.api().cuModuleUnload(module),
                        "cuModuleUnload");
  module = nullptr;
}

Function Module::function(const std::string &name) const {
  if (!module)
    throw Error(ErrorKind::InvalidArgument,
                "looking up kernel '" + name + "' in a moved-from Module");
  const Driver &driver = owner->driver();
  CUfunction function = nullptr;
  CUresult result =
      driver.api().cuModuleGetFunction(&function, module, name.c_str());
  if (result == CUDA_ERROR_NOT_FOUND)
    driver.check(result, "cuModuleGetFunction", ErrorKind::InvalidArgument,
                 "(the module has no kernel named '" + name + "')");
  driver.check(result, "cuModuleGetFunction", ErrorKind::DriverError,
               "(looking up kernel '" + name + "')");
  return Function(driver, function, name);
}

void Function::setMaxDynamicSharedMemory(size_t bytes) {
  if (bytes > INT_MAX)
    throw Error(ErrorKind::InvalidArgument,
                std::to_string(bytes) + " bytes of dynamic shared memory " +
                    "requested for kernel '" + kernelName + "'");
  driver->check(driver->api().cuFuncSetAttribute(
                    function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    static_cast<int>(bytes)),
                "cuFuncSetAttribute", ErrorKind::DriverError,
                "(setting kernel '" + kernelName + "' to " +
                    std::to_string(bytes) +
                    " bytes of dynamic shared memory)");
}

int Function::maxActiveBlocksPerMultiprocessor(int threads, size_t dynamicSharedBytes) const {
  int blocks = 0;
  driver->check(driver->api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &blocks, function, threads, dynamicSharedBytes),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor", ErrorKind::DriverError,
                "(kernel '" + kernelName + "', " + std::to_string(threads) + " threads, " +
                    std::to_string(dynamicSharedBytes) + " bytes of shared memory)");
  return blocks;
}

void Function::launch(Dim3 grid, Dim3 block, size_t dynamicSharedBytes,
                      Stream &stream, void **args) const {
  // Built only on failure: launches sit in timing loops.
  auto describeLaunch = [&] {
    return "(kernel '" + kernelName + "', grid " + formatDim(grid) +
           ", block " + formatDim(block) + ", " +
           std::to_string(dynamicSharedBytes) +
           " bytes of dynamic shared memory)";
  };
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
    throw Error(ErrorKind::InvalidArgument,
                "launch with a zero dimension " + describeLaunch());
  if (grid.y > 65535 || grid.z > 65535)
    throw Error(ErrorKind::InvalidArgument,
                "launch grid's y and z must be at most 65535 " + describeLaunch());
  if (dynamicSharedBytes > UINT_MAX)
    throw Error(ErrorKind::InvalidArgument,
                "launch with too much dynamic shared memory " +
                    describeLaunch());
  CUresult result = driver->api().cuLaunchKernel(
      function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
      static_cast<unsigned>(dynamicSharedBytes), stream.handle(), args,
      nullptr);
  if (result != CUDA_SUCCESS)
    driver->check(result, "cuLaunchKernel", ErrorKind::LaunchError,
                  describeLaunch());
}

void Function::launch(Dim3 grid, Dim3 block, size_t dynamicSharedBytes,
                      Stream &stream, const KernelArgs &args) const {
  launch(grid, block, dynamicSharedBytes, stream, args.data());
}
