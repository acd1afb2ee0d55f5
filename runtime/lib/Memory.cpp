//===- Memory.cpp - Device memory buffers ---------------------------------===//
#include "flashrt/Memory.h"

#include "flashrt/Device.h"

#include "CudaApi.h"
#include "Internal.h"

#include <utility>

using namespace flashrt;
using namespace flashrt::cu;

DeviceBuffer::DeviceBuffer(Context &owner, size_t size) : context(&owner) {
  if (size == 0)
    return; // cuMemAlloc rejects size 0; an empty buffer needs no memory.
  owner.makeCurrent();
  CUdeviceptr allocated = 0;
  owner.driver().check(owner.driver().api().cuMemAlloc_v2(&allocated, size),
                       "cuMemAlloc_v2", ErrorKind::DriverError,
                       "(allocating " + std::to_string(size) + " bytes)");
  address = allocated;
  bytes = size;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : context(std::exchange(other.context, nullptr)),
      address(std::exchange(other.address, 0)),
      bytes(std::exchange(other.bytes, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    release();
    context = std::exchange(other.context, nullptr);
    address = std::exchange(other.address, 0);
    bytes = std::exchange(other.bytes, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (!address)
    return;
  const Driver &driver = context->driver();
  detail::warnOnFailure(driver, driver.api().cuCtxSetCurrent(context->handle()),
                        "cuCtxSetCurrent");
  detail::warnOnFailure(driver, driver.api().cuMemFree_v2(address),
                        "cuMemFree_v2");
  address = 0;
  bytes = 0;
}

void DeviceBuffer::checkRange(size_t count, size_t offset,
                              const char *operation) const {
  if (offset > bytes || count > bytes - offset)
    throw Error(ErrorKind::InvalidArgument,
                std::string(operation) + " of " + std::to_string(count) +
                    " bytes at offset " + std::to_string(offset) +
                    " overruns a device buffer of " + std::to_string(bytes) +
                    " bytes");
}

void DeviceBuffer::copyFromHost(const void *source, size_t count,
                                size_t offset) {
  checkRange(count, offset, "copyFromHost");
  if (count == 0)
    return;
  context->makeCurrent();
  context->driver().check(
      context->driver().api().cuMemcpyHtoD_v2(address + offset, source, count),
      "cuMemcpyHtoD_v2");
}

void DeviceBuffer::copyToHost(void *destination, size_t count,
                              size_t offset) const {
  checkRange(count, offset, "copyToHost");
  if (count == 0)
    return;
  context->makeCurrent();
  context->driver().check(context->driver().api().cuMemcpyDtoH_v2(
                              destination, address + offset, count),
                          "cuMemcpyDtoH_v2");
}

void DeviceBuffer::fill(uint8_t byte) {
  if (bytes == 0)
    return;
  context->makeCurrent();
  context->driver().check(
      context->driver().api().cuMemsetD8_v2(address, byte, bytes),
      "cuMemsetD8_v2");
}
