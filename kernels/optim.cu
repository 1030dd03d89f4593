// Kernels for optim.cuh.
#include <cmath>

#include "cuda_check.cuh"
#include "optim.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;
constexpr int64_t kSumChunk = int64_t(1) << 16;

// grid (chunks): partial[c] = sum of x^2 over chunk c, in double.
__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double red[kWarpSize];
  const int64_t c0 = blockIdx.x * kSumChunk;
  const int64_t c1 = min(n, c0 + kSumChunk);
  double acc = 0.0;
  for (int64_t k = c0 + threadIdx.x; k < c1; k += kThreads) {
    const double v = x[k];
    acc += v * v;
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: out = sum of partial[0..chunks) with a fixed tree.
__global__ void sum_partials_kernel(double* out, const double* partial, int64_t chunks) {
  __shared__ double red[kWarpSize];
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < chunks; k += kThreads) acc += partial[k];
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) *out = acc;
}

// splitmix-style 32-bit mix of (seed, index): a reproducible uniform per element.
__device__ __forceinline__ uint32_t mix(uint32_t seed, uint64_t index) {
  uint64_t z = index * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// Adds 16 random low bits before truncating to bf16: rounds up with probability
// equal to the dropped fraction. Non-finite values keep round-to-nearest.
__device__ __forceinline__ bf16 round_stochastic(float x, uint32_t rnd) {
  if (!isfinite(x)) return to_bf(x);
  uint32_t u = __float_as_uint(x);
  u += rnd & 0xffffu;
  return __ushort_as_bfloat16(static_cast<unsigned short>(u >> 16));
}

__global__ void adamw_kernel(AdamWParams p, float bc1, float bc2) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < p.n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const float g = p.grad_scale * p.grad[k];
    const float m = p.beta1 * p.m[k] + (1.f - p.beta1) * g;
    const float v = p.beta2 * p.v[k] + (1.f - p.beta2) * g * g;
    p.m[k] = m;
    p.v[k] = v;
    const float w = p.master[k];
    const float upd = (m / bc1) / (sqrtf(v / bc2) + p.eps) + p.weight_decay * w;
    const float w_new = w - p.lr * upd;
    p.master[k] = w_new;
    if (p.compute != nullptr)
      p.compute[k] = p.stochastic_rounding ? round_stochastic(w_new, mix(p.seed, k)) : to_bf(w_new);
  }
}
}  // namespace

size_t sum_squares_scratch_bytes(int64_t n) {
  return static_cast<size_t>(ceil_div(n > 0 ? n : 1, kSumChunk) + 1) * sizeof(double);
}

double sum_squares(const float* x, int64_t n, void* scratch, cudaStream_t stream) {
  if (n <= 0) return 0.0;
  KD_CHECK(scratch != nullptr, "sum_squares: scratch is null");
  const int64_t chunks = ceil_div(n, kSumChunk);
  KD_CHECK(chunks < (int64_t(1) << 31), "sum_squares: n=", n, " too large");
  double* partial = static_cast<double*>(scratch);
  double* out = partial + chunks;
  sum_squares_partial_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(partial, x, n);
  CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(out, partial, chunks);
  CUDA_CHECK_LAUNCH();
  double result = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&result, out, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

void adamw_update(const AdamWParams& p, cudaStream_t stream) {
  KD_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got ", p.step);
  if (p.n <= 0) return;
  const double t = static_cast<double>(p.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), t));
  adamw_kernel<<<elementwise_blocks(p.n, kThreads), kThreads, 0, stream>>>(p, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
