// fp32 <-> bf16 bit conversions shared by every layer that moves bf16 on the host
// (safetensors files, bf16 gradient buckets). Round to nearest, ties to even; a NaN
// stays a quiet NaN of the same sign.
#pragma once
#include <cstdint>
#include <cstring>

namespace kdtrain {

inline uint16_t float_to_bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Add 0x7fff plus the lowest kept bit, then truncate.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

}  // namespace kdtrain
