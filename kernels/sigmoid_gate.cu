// Kernels for sigmoid_gate.cuh: grid-stride loops.
#include "cuda_check.cuh"
#include "sigmoid_gate.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void gate_forward_kernel(bf16* out, const bf16* inp, const bf16* gate, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x)
    out[k] = to_bf(to_f(inp[k]) * sigmoidf_stable(to_f(gate[k])));
}

__global__ void gate_backward_kernel(bf16* dinp, bf16* dgate, const bf16* dout, const bf16* inp,
                                     const bf16* gate, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const float s = sigmoidf_stable(to_f(gate[k]));
    const float g = to_f(dout[k]);
    const float x = to_f(inp[k]);
    dinp[k] = to_bf(g * s);
    dgate[k] = to_bf(g * x * s * (1.f - s));
  }
}
}  // namespace

void sigmoid_gate_forward(bf16* out, const bf16* inp, const bf16* gate, int64_t n,
                          cudaStream_t stream) {
  if (n <= 0) return;
  gate_forward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(out, inp, gate, n);
  CUDA_CHECK_LAUNCH();
}

void sigmoid_gate_backward(bf16* dinp, bf16* dgate, const bf16* dout, const bf16* inp,
                           const bf16* gate, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gate_backward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(dinp, dgate, dout,
                                                                                 inp, gate, n);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
