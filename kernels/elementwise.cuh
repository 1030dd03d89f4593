// One launcher for the flat elementwise kernels (add, conversions, gate, alpha
// activation): an op is a functor whose templated call operator<VEC>(k) handles
// elements [k, k + VEC) with pack loads and stores. The kernel runs it on whole
// packs and, for the scalar tail and for misaligned pointers, with VEC = 1, so
// each op writes its arithmetic once. Index math: flat_split_loop (vec_layout.h).
// Most ops are maps, one output from one or more inputs element by element in
// fp32: launch_map takes the per-element function alone. Device code: include
// only from .cu files.
#pragma once
#include <cuda/std/tuple>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_common.cuh"

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

// fp32 -> the stored type (bf16 rounds to nearest even; fp32 as is).
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float x) { return to_bf(x); }
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }

// out[k] = f(in[k]...) in fp32, packs of VEC elements at a time. F is a base,
// not a member, so a stateless f adds no bytes to the kernel's parameters.
template <typename Out, typename F, typename... In>
struct MapOp : F {
  Out* out;
  ::cuda::std::tuple<const In*...> in;
  template <int V>
  __device__ void apply(int64_t k) const {
    ::cuda::std::apply([&](const In*... p) { store_map<V>(out + k, load_pack<V>(p + k)...); }, in);
  }
  template <int V, typename... P>
  __device__ __forceinline__ void store_map(Out* dst, const P&... packs) const {
    Pack<Out, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_f<Out>(F::operator()(to_f(packs.v[j])...));
    store_pack<V>(dst, o);
  }
};

// Runs out[k] = f(in[k]...) over [0, n); f is a functor taking and returning float.
template <typename F, typename Out, typename... In>
void launch_map(const F& f, int64_t n, cudaStream_t stream, Out* out, const In*... in) {
  launch_flat(MapOp<Out, F, In...>{f, out, {in...}}, n, stream, out, in...);
}

}  // namespace kdtrain::cuda
