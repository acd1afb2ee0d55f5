//===- KernelArgs.h - Packing kernel parameters by value --------*- C++ -*-===//
#ifndef FLASHRT_KERNELARGS_H
#define FLASHRT_KERNELARGS_H

#include "flashrt/Error.h"

#include <cstddef>
#include <type_traits>
#include <vector>

namespace flashrt {

class DeviceBuffer;

/// Copies of kernel arguments laid out at their natural alignment, plus the
/// void *[] that cuLaunchKernel reads them through. The driver copies the
/// values at launch, so a KernelArgs may be reused or changed afterwards.
class KernelArgs {
public:
  /// Alignment of the storage; no argument may need more (a CUtensorMap,
  /// the strictest kernel parameter, needs 64).
  static constexpr size_t kMaxAlignment = 128;

  KernelArgs() = default;

  /// KernelArgs::pack(out.devicePtr(), in, 1.5f, int32_t(n)).
  template <typename... Ts> static KernelArgs pack(const Ts &...values) {
    KernelArgs args;
    (args.add(values), ...);
    return args;
  }

  /// Appends a copy of `value`: integers, floats, device pointers (as
  /// uint64_t or a raw pointer) and trivially copyable structs.
  template <typename T> KernelArgs &add(const T &value) {
    static_assert(std::is_trivially_copyable_v<T>,
                  "kernel arguments are copied byte-wise");
    static_assert(!std::is_array_v<T>,
                  "pass an array's device address, not the array");
    static_assert(alignof(T) <= kMaxAlignment,
                  "argument is more aligned than KernelArgs' storage");
    return addBytes(&value, sizeof(T), alignof(T));
  }
  /// Appends the buffer's device address (a .u64 parameter).
  KernelArgs &add(const DeviceBuffer &buffer);
  /// Appends `size` bytes from `data` at an offset that is a multiple of
  /// `alignment` (a power of two no larger than kMaxAlignment).
  KernelArgs &addBytes(const void *data, size_t size, size_t alignment);

  size_t count() const { return offsets.size(); }
  /// Bytes of storage used, padding included.
  size_t storageBytes() const { return used; }
  /// Where argument `index` starts in the storage.
  size_t offset(size_t index) const { return offsets.at(index); }

  /// One pointer per argument, valid until the next add or until this
  /// object is moved or destroyed.
  void **data() const;

private:
  struct alignas(kMaxAlignment) Chunk {
    unsigned char bytes[kMaxAlignment];
  };

  std::vector<Chunk> storage;
  std::vector<size_t> offsets;
  size_t used = 0;
  mutable std::vector<void *> pointers;
};

} // namespace flashrt

#endif // FLASHRT_KERNELARGS_H
