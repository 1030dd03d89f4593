// Kernels for convert.cuh: grid-stride loops, one element per step.
#include "convert.cuh"
#include "cuda_check.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void f32_to_bf16_kernel(bf16* dst, const float* src, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x)
    dst[k] = to_bf(src[k]);
}
__global__ void bf16_to_f32_kernel(float* dst, const bf16* src, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x)
    dst[k] = to_f(src[k]);
}
}  // namespace

void convert_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  f32_to_bf16_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}
void convert_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  bf16_to_f32_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
