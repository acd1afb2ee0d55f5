//===- KernelArgs.cpp - Packing kernel parameters by value ----------------===//
#include "flashrt/KernelArgs.h"

#include "flashrt/Error.h"
#include "flashrt/Memory.h"

#include <cstdint>
#include <cstring>
#include <string>

using namespace flashrt;

KernelArgs &KernelArgs::add(const DeviceBuffer &buffer) {
  uint64_t address = buffer.devicePtr();
  return add(address);
}

KernelArgs &KernelArgs::addBytes(const void *data, size_t size,
                                 size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
      alignment > kMaxAlignment)
    throw Error(ErrorKind::InvalidArgument,
                "kernel argument alignment " + std::to_string(alignment) +
                    " is not a power of two up to " +
                    std::to_string(kMaxAlignment));
  size_t start = (used + alignment - 1) & ~(alignment - 1);
  size_t end = start + size;
  // Chunks keep the base kMaxAlignment-aligned, so offsets aligned relative
  // to the base are aligned in memory too.
  storage.resize((end + kMaxAlignment - 1) / kMaxAlignment);
  if (size != 0)
    std::memcpy(reinterpret_cast<unsigned char *>(storage.data()) + start,
                data, size);
  offsets.push_back(start);
  used = end;
  return *this;
}

void **KernelArgs::data() const {
  // Built on demand because storage may move while arguments are added.
  pointers.resize(offsets.size());
  auto *base = const_cast<unsigned char *>(
      reinterpret_cast<const unsigned char *>(storage.data()));
  for (size_t i = 0; i < offsets.size(); ++i)
    pointers[i] = base + offsets[i];
  return pointers.data();
}
