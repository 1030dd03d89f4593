// Residual add and gradient accumulation on bf16 activations.
// Each output is one fp32 sum of the two bf16 inputs, rounded once to bf16.
// out may alias a or b (each element is read before it is written by the same thread).
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
void add(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream);  // out = a + b
void accumulate(bf16* dst, const bf16* src, int64_t n, cudaStream_t stream);        // dst += src
}  // namespace kdtrain::cuda
