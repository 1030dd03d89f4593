// Kernels for rope.cuh: one grid-stride index over (b, t, head < n_rot, i < D/2).
#include "cuda_check.cuh"
#include "rope.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void rope_kernel(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T,
                            int64_t n_heads, int64_t n_rot, int64_t D, float direction) {
  const int64_t half = D / 2;
  const int64_t total = B * T * n_rot * half;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k % half;
    const int64_t h = (k / half) % n_rot;
    const int64_t bt = k / (half * n_rot);
    const int64_t t = bt % T;
    bf16* v = x + (bt * n_heads + h) * D;
    const float c = cos[t * half + i];
    const float s = direction * sin[t * half + i];
    const float x1 = to_f(v[i]), x2 = to_f(v[i + half]);
    v[i] = to_bf(x1 * c - x2 * s);
    v[i + half] = to_bf(x2 * c + x1 * s);
  }
}

void launch(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T, int64_t n_heads,
            int64_t n_rot, int64_t D, float direction, cudaStream_t stream) {
  KD_CHECK(D % 2 == 0 && n_rot >= 0 && n_rot <= n_heads, "rope: head dim ", D,
           " must be even and n_rot ", n_rot, " <= n_heads ", n_heads);
  const int64_t total = B * T * n_rot * (D / 2);
  if (total <= 0) return;
  rope_kernel<<<elementwise_blocks(total, kThreads), kThreads, 0, stream>>>(x, cos, sin, B, T, n_heads,
                                                                            n_rot, D, direction);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void rope_forward(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T,
                  int64_t n_heads, int64_t n_rot, int64_t D, cudaStream_t stream) {
  launch(x, cos, sin, B, T, n_heads, n_rot, D, 1.f, stream);
}
void rope_backward(bf16* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t n_heads, int64_t n_rot, int64_t D, cudaStream_t stream) {
  launch(dx, cos, sin, B, T, n_heads, n_rot, D, -1.f, stream);
}
}  // namespace kdtrain::cuda
