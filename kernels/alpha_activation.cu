// Kernels for alpha_activation.cuh. The activation is a runtime argument (one
// instantiation): the branch is uniform across the grid, so it costs nothing.
#include "alpha_activation.cuh"
#include "cuda_check.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void alpha_forward_kernel(bf16* alpha, const bf16* z, int64_t n, bool sigmoid) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f(z[k]);
    const float a = sigmoid ? sigmoidf_stable(x) : (x <= -5.f ? 0.f : (x >= 5.f ? 1.f : 0.1f * x + 0.5f));
    alpha[k] = to_bf(a);
  }
}

__global__ void alpha_backward_kernel(bf16* dz, const bf16* dalpha, const bf16* z, int64_t n,
                                      bool sigmoid) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f(z[k]);
    float d;
    if (sigmoid) {
      const float s = sigmoidf_stable(x);
      d = s * (1.f - s);
    } else {
      d = (x > -5.f && x < 5.f) ? 0.1f : 0.f;
    }
    dz[k] = to_bf(to_f(dalpha[k]) * d);
  }
}
}  // namespace

void alpha_activation_forward(bf16* alpha, const bf16* z, int64_t n, bool sigmoid,
                              cudaStream_t stream) {
  if (n <= 0) return;
  alpha_forward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      alpha, z, n, sigmoid);
  CUDA_CHECK_LAUNCH();
}

void alpha_activation_backward(bf16* dz, const bf16* dalpha, const bf16* z, int64_t n,
                               bool sigmoid, cudaStream_t stream) {
  if (n <= 0) return;
  alpha_backward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      dz, dalpha, z, n, sigmoid);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
