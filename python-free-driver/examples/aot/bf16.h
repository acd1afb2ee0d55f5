// bf16 <-> float for the AOT example programs (round to nearest even).
#ifndef FLASHC_AOT_EXAMPLE_BF16_H
#define FLASHC_AOT_EXAMPLE_BF16_H

#include <cstdint>
#include <cstring>

inline uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

inline float fromBf16(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

#endif // FLASHC_AOT_EXAMPLE_BF16_H
