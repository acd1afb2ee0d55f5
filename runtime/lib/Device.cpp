//===- Device.cpp - GPU devices and their primary contexts ----------------===//
#include "flashrt/Device.h"

#include "CudaApi.h"
#include "Internal.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

using namespace flashrt;
using namespace flashrt::cu;

Device Device::fromEnvironment(Driver &driver) {
  const char *text = std::getenv("FLASHRT_DEVICE");
  if (!text || !*text)
    return byOrdinal(0, driver);
  char *end = nullptr;
  errno = 0;
  long ordinal = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || ordinal < 0 || ordinal > INT_MAX)
    throw Error(ErrorKind::InvalidArgument,
                std::string("FLASHRT_DEVICE='") + text +
                    "' is not a device ordinal");
  return byOrdinal(static_cast<int>(ordinal), driver);
}

Device Device::byOrdinal(int ordinal, Driver &driver) {
  if (ordinal < 0 || ordinal >= driver.deviceCount())
    throw Error(ErrorKind::InvalidArgument,
                "device ordinal " + std::to_string(ordinal) +
                    " is out of range: the driver sees " +
                    std::to_string(driver.deviceCount()) + " device(s)");
  CUdevice device = 0;
  driver.check(driver.api().cuDeviceGet(&device, ordinal), "cuDeviceGet");
  return Device(driver, ordinal, device);
}

std::string Device::name() const {
  char buffer[256] = {};
  owner->check(
      owner->api().cuDeviceGetName(buffer, sizeof(buffer) - 1, device),
      "cuDeviceGetName");
  return buffer;
}

int Device::attribute(int cuDeviceAttribute) const {
  int value = 0;
  owner->check(owner->api().cuDeviceGetAttribute(
                   &value, static_cast<CUdevice_attribute>(cuDeviceAttribute),
                   device),
               "cuDeviceGetAttribute",
               ErrorKind::DriverError,
               "(attribute " + std::to_string(cuDeviceAttribute) + ")");
  return value;
}

ComputeCapability Device::computeCapability() const {
  return {attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
          attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)};
}

int Device::multiprocessorCount() const {
  return attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
}

int Device::maxSharedMemoryPerBlockOptin() const {
  return attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
}

Context::Context() : Context(Device::fromEnvironment()) {}

Context::Context(const Device &device) : owner(device) {
  const DriverApi &api = driver().api();
  CUcontext retained = nullptr;
  driver().check(api.cuDevicePrimaryCtxRetain(&retained, owner.handle()),
                 "cuDevicePrimaryCtxRetain");
  context = retained;
  try {
    makeCurrent();
  } catch (...) {
    detail::warnOnFailure(driver(),
                          api.cuDevicePrimaryCtxRelease_v2(owner.handle()),
                          "cuDevicePrimaryCtxRelease_v2");
    throw;
  }
}

Context::~Context() {
  detail::warnOnFailure(
      driver(), driver().api().cuDevicePrimaryCtxRelease_v2(owner.handle()),
      "cuDevicePrimaryCtxRelease_v2");
}

void Context::makeCurrent() const {
  driver().check(driver().api().cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

void Context::synchronize() const {
  makeCurrent();
  driver().check(driver().api().cuCtxSynchronize(), "cuCtxSynchronize");
}
