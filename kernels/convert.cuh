// fp32 <-> bf16 conversions (the backend's convert_from_f32 / convert_to_f32).
// fp32 -> bf16 rounds to nearest even; bf16 -> fp32 is exact. Elementwise, so
// deterministic for any grid.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
void convert_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream);  // (n)
void convert_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream);  // (n)
}  // namespace kdtrain::cuda
