//===- Memory.h - Device memory buffers -------------------------*- C++ -*-===//
#ifndef FLASHRT_MEMORY_H
#define FLASHRT_MEMORY_H

#include "flashrt/Error.h"

#include <cstddef>
#include <cstdint>

namespace flashrt {

class Context;

/// Owns one cuMemAlloc allocation. Copies and fill go through the legacy
/// default stream, which orders them after earlier work on every blocking
/// Stream (the default kind); copies to the host return once complete.
class DeviceBuffer {
public:
  /// An empty buffer: no allocation, devicePtr() == 0.
  DeviceBuffer() = default;
  /// Allocates `bytes` (0 gives an empty buffer) in `context`.
  DeviceBuffer(Context &context, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  size_t size() const { return bytes; }
  bool empty() const { return bytes == 0; }
  /// The CUdeviceptr, as kernels receive it in a .u64 parameter.
  uint64_t devicePtr() const { return address; }

  /// Copies `count` bytes from `source` to this buffer at `offset`. Throws
  /// InvalidArgument when the range does not fit.
  void copyFromHost(const void *source, size_t count, size_t offset = 0);
  /// Copies `count` bytes at `offset` of this buffer to `destination`.
  void copyToHost(void *destination, size_t count, size_t offset = 0) const;
  /// Sets every byte to `byte`; used to poison outputs before a kernel runs.
  void fill(uint8_t byte);

private:
  void checkRange(size_t count, size_t offset, const char *operation) const;
  void release() noexcept;

  Context *context = nullptr;
  uint64_t address = 0;
  size_t bytes = 0;
};

} // namespace flashrt

#endif // FLASHRT_MEMORY_H
