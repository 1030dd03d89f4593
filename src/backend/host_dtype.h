// Host-side dtype conversion for uploads into backend memory: fp32 -> bf16 with
// round to nearest even (NaN kept quiet), bit for bit what the CUDA backend's
// convert_from_f32 computes, so a model can round its weights on the host (in
// parallel, moving half the bytes) and get the same compute copy.
#pragma once
#include <cstdint>
#include <cstring>

namespace kdtrain {

inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// dst[i] = bf16_bits(src[i]) for i < n, on every OpenMP thread.
void round_to_bf16(uint16_t* dst, const float* src, int64_t n);

}  // namespace kdtrain
