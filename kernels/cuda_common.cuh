// The device helpers every kernel file shares, defined here once: bf16 <-> fp32,
// the stable sigmoid, warp and block reductions with a fixed order (so every
// reduction gives the same bits run after run), packs for 16-byte loads and
// stores, and launch-size arithmetic. The index arithmetic of the vectorised
// loops is in vec_layout.h (host-testable); error and launch checks in
// cuda_check.cuh. Header-only and internal to kernels/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/vec_layout.h"

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

// Grid for a kernel whose blocks each cover `per_block` items of n: enough to fill
// the GPU, capped like elementwise_blocks (the kernels loop over the rest).
inline unsigned blocks_for(int64_t n, int64_t per_block) {
  return elementwise_blocks(ceil_div(n, per_block), 1);
}

// Grid of a row_pack_loop kernel: x covers one row's packs with `threads` per block,
// y the rows, at most 65535 of them (the kernels loop over the rest).
inline dim3 row_pack_grid(int64_t rows, int64_t packs_per_row, int threads) {
  return dim3(static_cast<unsigned>(ceil_div(packs_per_row, threads)),
              static_cast<unsigned>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535));
}

// Calls launch(std::integral_constant<int, VEC>{}) for vec in {8, 4, 2, 1}, so one
// launcher instantiates the kernel for each pack width widest_pack may return.
template <typename Launch>
void dispatch_pack(int vec, Launch&& launch) {
  switch (vec) {
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
}

// VEC consecutive values of T moved as one access (16 bytes for 8 bf16 or 4 fp32).
// Packs wider than 16 bytes are moved as several 16-byte accesses.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC < kPackBytes ? sizeof(T) * VEC : kPackBytes) Pack {
  T v[VEC];
};

#ifdef __CUDACC__  // device helpers: only for nvcc; the launcher headers stay plain C++.
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ bf16 to_bf(float x) { return __float2bfloat16(x); }

// p must be aligned to pack_alignment(VEC, sizeof(T)) (the launchers pick VEC with
// widest_pack). At most 16 bytes per access: LDG.E.128 / STG.E.128 in the SASS.
template <int VEC, typename T>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* p) {
  constexpr int kPer = sizeof(T) * VEC <= kPackBytes ? VEC : kPackBytes / sizeof(T);
  Pack<T, VEC> out;
#pragma unroll
  for (int i = 0; i < VEC; i += kPer)
    *reinterpret_cast<Pack<T, kPer>*>(&out.v[i]) = *reinterpret_cast<const Pack<T, kPer>*>(p + i);
  return out;
}
template <int VEC, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, VEC>& pack) {
  constexpr int kPer = sizeof(T) * VEC <= kPackBytes ? VEC : kPackBytes / sizeof(T);
#pragma unroll
  for (int i = 0; i < VEC; i += kPer)
    *reinterpret_cast<Pack<T, kPer>*>(p + i) = *reinterpret_cast<const Pack<T, kPer>*>(&pack.v[i]);
}
// Global thread index and count of a 1-D grid, for grid-stride loops.
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

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
