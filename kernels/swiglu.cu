// Kernels for swiglu.cuh: one grid-stride index k over the N*F outputs,
// row r = k / F, column f = k % F.
#include "cuda_check.cuh"
#include "swiglu.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate_up, int64_t N, int64_t F) {
  const int64_t total = N * F;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / F, f = k % F;
    const float g = to_f(gate_up[r * 2 * F + f]);
    const float u = to_f(gate_up[r * 2 * F + F + f]);
    out[k] = to_bf(g * sigmoidf_stable(g) * u);
  }
}

__global__ void swiglu_backward_kernel(bf16* dgate_up, const bf16* dout, const bf16* gate_up,
                                       int64_t N, int64_t F) {
  const int64_t total = N * F;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / F, f = k % F;
    const float g = to_f(gate_up[r * 2 * F + f]);
    const float u = to_f(gate_up[r * 2 * F + F + f]);
    const float dy = to_f(dout[k]);
    const float s = sigmoidf_stable(g);
    dgate_up[r * 2 * F + f] = to_bf(dy * u * (s + g * s * (1.f - s)));
    dgate_up[r * 2 * F + F + f] = to_bf(dy * g * s);
  }
}
}  // namespace

void swiglu_forward(bf16* out, const bf16* gate_up, int64_t N, int64_t F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(N * F, kThreads), kThreads, 0, stream>>>(out, gate_up,
                                                                                      N, F);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int64_t F,
                     cudaStream_t stream) {
  if (N <= 0 || F <= 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(N * F, kThreads), kThreads, 0, stream>>>(
      dgate_up, dout, gate_up, N, F);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
