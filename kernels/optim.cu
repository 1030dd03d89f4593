// Kernels for optim.cuh.
#include <cmath>

#include "kernels/cuda_check.cuh"
#include "kernels/optim.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;
constexpr int64_t kSumChunk = int64_t(1) << 16;
constexpr int kQuad = 4;  // sum_squares: each thread adds 4 consecutive values per step

// grid (chunks): partial[c] = sum of x^2 over chunk c, in double. Thread t adds quads
// t, t + blockDim, ... of the chunk, the 4 values of a quad in order, whether read as
// one 16-byte load (aligned) or four scalars: the same additions either way, so the
// bits do not depend on the pointer's alignment.
__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n,
                                           bool aligned16) {
  __shared__ double red[kWarpSize];
  const int64_t c0 = blockIdx.x * kSumChunk;
  const int64_t c1 = min(n, c0 + kSumChunk);
  double acc = 0.0;
  for (int64_t k = c0 + int64_t(threadIdx.x) * kQuad; k < c1; k += int64_t(blockDim.x) * kQuad) {
    if (aligned16 && k + kQuad <= c1) {
      const Pack<float, kQuad> q = load_pack<kQuad>(x + k);
#pragma unroll
      for (int j = 0; j < kQuad; ++j) acc += static_cast<double>(q.v[j]) * q.v[j];
    } else {
      for (int64_t j = k; j < k + kQuad && j < c1; ++j) acc += static_cast<double>(x[j]) * x[j];
    }
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

// Elements [k, k + VEC) of one AdamW update with weight decay wd.
template <int VEC>
__device__ __forceinline__ void adamw_pack(const AdamWParams& p, int64_t k, float wd, float bc1,
                                           float bc2) {
  const Pack<float, VEC> g = load_pack<VEC>(p.grad + k);
  Pack<float, VEC> m = load_pack<VEC>(p.m + k), v = load_pack<VEC>(p.v + k),
                   w = load_pack<VEC>(p.master + k);
  Pack<bf16, VEC> c;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float gj = p.grad_scale * g.v[j];
    m.v[j] = p.beta1 * m.v[j] + (1.f - p.beta1) * gj;
    v.v[j] = p.beta2 * v.v[j] + (1.f - p.beta2) * gj * gj;
    const float upd = (m.v[j] / bc1) / (sqrtf(v.v[j] / bc2) + p.eps) + wd * w.v[j];
    w.v[j] = w.v[j] - p.lr * upd;
    c.v[j] = p.stochastic_rounding ? round_stochastic(w.v[j], mix(p.seed, k + j)) : to_bf(w.v[j]);
  }
  store_pack<VEC>(p.m + k, m);
  store_pack<VEC>(p.v + k, v);
  store_pack<VEC>(p.master + k, w);
  if (p.compute != nullptr) store_pack<VEC>(p.compute + k, c);
}

template <int VEC>
__global__ void adamw_kernel(AdamWParams p, float bc1, float bc2) {
  flat_split_loop<VEC>(
      p.n, global_thread(), grid_threads(),
      [&](int64_t k) { adamw_pack<VEC>(p, k, p.weight_decay, bc1, bc2); },
      [&](int64_t k) { adamw_pack<1>(p, k, p.weight_decay, bc1, bc2); });
}

constexpr int kSegmentPacksPerThread = 8;

// Block b owns elements [start + b*chunk, +chunk) (start and chunk multiples of VEC).
// Each thread walks its packs in increasing order with its own cursor into the
// sorted segments: a pack wholly inside a segment goes as one vector update, a pack
// that touches a boundary or a gap element by element.
template <int VEC>
__global__ void adamw_segments_kernel(AdamWParams p, const AdamWSegment* segs, int64_t count,
                                     int64_t start, int64_t end, int64_t chunk, float bc1,
                                     float bc2) {
  const int64_t c0 = start + blockIdx.x * chunk;
  const int64_t c1 = min(end, c0 + chunk);
  int64_t s = first_range_ending_after(segs, count, c0);
  for (int64_t k = c0 + int64_t(threadIdx.x) * VEC; k < c1; k += int64_t(blockDim.x) * VEC) {
    while (s < count && segs[s].end <= k) ++s;
    if (s == count) return;
    if (k >= segs[s].begin && k + VEC <= segs[s].end) {
      adamw_pack<VEC>(p, k, segs[s].weight_decay, bc1, bc2);
      continue;
    }
    for (int64_t e = k; e < k + VEC && e < c1; ++e) {
      while (s < count && segs[s].end <= e) ++s;
      if (s == count) return;
      if (e >= segs[s].begin) adamw_pack<1>(p, e, segs[s].weight_decay, bc1, bc2);
    }
  }
}

void bias_corrections(const AdamWParams& p, float* bc1, float* bc2) {
  KD_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got ", p.step);
  const double t = static_cast<double>(p.step);
  *bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), t));
  *bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), t));
}

int adamw_pack_width(const AdamWParams& p) {
  return p.compute ? widest_pack(0, p.master, p.grad, p.m, p.v, p.compute)
                   : widest_pack(0, p.master, p.grad, p.m, p.v);
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
  sum_squares_partial_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
      partial, x, n, address_aligned(x, kPackBytes));
  CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(out, partial, chunks);
  CUDA_CHECK_LAUNCH();
  double result = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&result, out, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

void adamw_update(const AdamWParams& p, cudaStream_t stream) {
  float bc1, bc2;
  bias_corrections(p, &bc1, &bc2);
  if (p.n <= 0) return;
  dispatch_pack(adamw_pack_width(p), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    adamw_kernel<VEC><<<elementwise_blocks(ceil_div(p.n, VEC), kThreads), kThreads, 0, stream>>>(
        p, bc1, bc2);
  });
  CUDA_CHECK_LAUNCH();
}

void adamw_update_segments(const AdamWParams& p, const AdamWSegment* segments, int64_t count,
                           int64_t range_begin, int64_t range_end, cudaStream_t stream) {
  float bc1, bc2;
  bias_corrections(p, &bc1, &bc2);
  if (count <= 0 || range_end <= range_begin) return;
  dispatch_pack(adamw_pack_width(p), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    const int64_t start = range_begin / VEC * VEC;  // packs stay aligned to the arrays
    const int64_t chunk = int64_t(kThreads) * VEC * kSegmentPacksPerThread;
    const int64_t blocks = ceil_div(range_end - start, chunk);
    KD_CHECK(blocks < (int64_t(1) << 31), "adamw_update: range of ", range_end - start,
             " elements too large");
    adamw_segments_kernel<VEC><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p, segments, count, start, range_end, chunk, bc1, bc2);
  });
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
