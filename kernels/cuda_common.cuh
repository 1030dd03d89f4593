// Small device helpers shared by the kernel files: bf16 <-> fp32, warp and block
// reductions with a fixed order (so every reduction gives the same bits run after
// run), and launch-size arithmetic. Header-only and internal to kernels/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kdtrain::cuda {

using bf16 = __nv_bfloat16;

constexpr int kWarpSize = 32;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid size for a grid-stride elementwise kernel: enough blocks to fill the GPU,
// never more than the work needs. The result of an elementwise kernel does not
// depend on the grid, so this may differ between devices.
inline unsigned elementwise_blocks(int64_t n, int threads) {
  const int64_t want = ceil_div(n, threads);
  const int64_t cap = 65536;
  return static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
}

#ifdef __CUDACC__  // device helpers: only for nvcc; the launcher headers stay plain C++.
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf(float x) { return __float2bfloat16(x); }

// Stable sigmoid: never forms exp of a large positive number.
__device__ __forceinline__ float sigmoidf_stable(float z) {
  if (z >= 0.f) return 1.f / (1.f + __expf(-z));
  const float e = __expf(z);
  return e / (1.f + e);
}

// Butterfly reductions: every lane ends with the same bits (each step combines the
// same two values on both partner lanes; fp addition commutes).
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); every thread gets
// the result. `shared` holds at least 32 values. The combination tree is fixed by
// blockDim.x alone, hence deterministic. Ends with a barrier so `shared` can be reused.
template <typename T>
__device__ T block_sum(T x, T* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

__device__ inline float block_max(float x, float* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = warp_max(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}
#endif  // __CUDACC__

}  // namespace kdtrain::cuda
