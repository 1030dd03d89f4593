// The affine variant's alpha activation phi (docs/model.md), bf16 in and out, fp32 math:
//   linear_clip: 0 for z <= -5, 0.1 z + 0.5 inside, 1 for z >= 5; phi' = 0.1 strictly inside
//   sigmoid:     1/(1+e^-z) computed without overflow;          phi' = s (1 - s)
// Elementwise, deterministic. `sigmoid` selects the activation (false: linear_clip);
// a bool rather than the config enum keeps config headers out of nvcc.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
// alpha(n) = phi(z(n))
void alpha_activation_forward(bf16* alpha, const bf16* z, int64_t n, bool sigmoid,
                              cudaStream_t stream);
// dz(n) = dalpha(n) * phi'(z(n)), written
void alpha_activation_backward(bf16* dz, const bf16* dalpha, const bf16* z, int64_t n,
                               bool sigmoid, cudaStream_t stream);
}  // namespace kdtrain::cuda
