// Host-side dtype conversion for uploads into backend memory: fp32 -> bf16 with
// round to nearest even (NaN kept quiet), bit for bit what the CUDA backend's
// convert_from_f32 computes, so a model can round its weights on the host (in
// parallel, moving half the bytes) and get the same compute copy.
#pragma once
#include <cstdint>

#include "core/bf16.h"

namespace kdtrain {

// core/bf16.h's rounding, except that every NaN becomes the canonical quiet NaN
// 0x7fc0, as CUDA's __float2bfloat16 makes it.
inline uint16_t bf16_bits(float f) {
  const uint16_t b = float_to_bf16_bits(f);
  return (b & 0x7fffu) > 0x7f80u ? uint16_t{0x7fc0} : b;
}

// dst[i] = bf16_bits(src[i]) for i < n, on every OpenMP thread.
void round_to_bf16(uint16_t* dst, const float* src, int64_t n);

}  // namespace kdtrain
