// Rotary position embedding in place on bf16 x (B, T, n_heads, D), Hugging Face
// rotate_half convention: for i < D/2 at position t,
//   x1' = x1 c - x2 s,  x2' = x2 c + x1 s   with c = cos[t,i], s = sin[t,i] (fp32 tables (T, D/2)).
// Heads [0, n_rot) rotate, the others are untouched. Backward applies the inverse
// rotation (s -> -s) to the gradient. fp32 math, one bf16 rounding per output;
// each thread owns one (x1, x2) pair, so in place is safe and deterministic.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
void rope_forward(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T,
                  int64_t n_heads, int64_t n_rot, int64_t D, cudaStream_t stream);
void rope_backward(bf16* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t n_heads, int64_t n_rot, int64_t D, cudaStream_t stream);
}  // namespace kdtrain::cuda
