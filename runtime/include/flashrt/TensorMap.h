//===- TensorMap.h - Hopper TMA descriptors ---------------------*- C++ -*-===//
#ifndef FLASHRT_TENSORMAP_H
#define FLASHRT_TENSORMAP_H

#include <cstdint>
#include <string>
#include <vector>

namespace flashrt {

class Driver;

/// A CUtensorMap: 128 opaque bytes, passed to kernels by value.
struct alignas(64) TensorMap {
  uint64_t opaque[16];
};

/// What a tiled tensor map describes: a 16-bit element tensor of rank
/// dims.size() (innermost first), byteStrides of dims 1.. (multiples of 16),
/// copied in boxes of `box` elements, written to shared memory in the
/// 128-byte swizzle when `swizzle128`; elements outside read as zero.
struct TiledTensorMapSpec {
  std::string elementType; // "bf16" or "f16"
  uint64_t address = 0;    // 16-byte aligned device address
  std::vector<uint64_t> dims;
  std::vector<uint64_t> byteStrides;
  std::vector<uint32_t> box;
  bool swizzle128 = true;
};

/// cuTensorMapEncodeTiled. Throws Error: InvalidArgument for a spec the
/// driver rejects (with the spec in the message), DriverError when the
/// driver predates tensor maps (CUDA < 12.0).
TensorMap encodeTiledTensorMap(const Driver &driver, const TiledTensorMapSpec &spec);

} // namespace flashrt

#endif // FLASHRT_TENSORMAP_H
