// One launcher for the flat elementwise kernels (add, conversions, gate, alpha
// activation): an op is a functor whose templated call operator<VEC>(k) handles
// elements [k, k + VEC) with pack loads and stores. The kernel runs it on whole
// packs and, for the scalar tail and for misaligned pointers, with VEC = 1, so
// each op writes its arithmetic once. Index math: flat_split_loop (vec_layout.h).
// Device code: include only from .cu files.
#pragma once
#include "cuda_check.cuh"
#include "cuda_common.cuh"

namespace kdtrain::cuda {

template <int VEC, typename Op>
__global__ void flat_kernel(Op op, int64_t n) {
  flat_split_loop<VEC>(
      n, global_thread(), grid_threads(), [&](int64_t k) { op.template apply<VEC>(k); },
      [&](int64_t k) { op.template apply<1>(k); });
}

constexpr int kFlatThreads = 256;

// Runs op over [0, n) with the widest pack every pointer's alignment allows.
template <typename Op, typename... Ts>
void launch_flat(const Op& op, int64_t n, cudaStream_t stream, const Ts*... ptrs) {
  if (n <= 0) return;
  dispatch_pack(widest_pack(0, ptrs...), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    flat_kernel<VEC><<<elementwise_blocks(ceil_div(n, VEC), kFlatThreads), kFlatThreads, 0,
                       stream>>>(op, n);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace kdtrain::cuda
