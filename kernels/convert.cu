// Kernels for convert.cuh: flat packs (elementwise.cuh); 8 values per pack, so
// 16-byte bf16 accesses and two 16-byte fp32 accesses.
#include "convert.cuh"
#include "elementwise.cuh"

namespace kdtrain::cuda {
namespace {
struct ToBf16Op {
  bf16* dst;
  const float* src;
  template <int V>
  __device__ void apply(int64_t k) const {
    const Pack<float, V> s = load_pack<V>(src + k);
    Pack<bf16, V> d;
#pragma unroll
    for (int j = 0; j < V; ++j) d.v[j] = to_bf(s.v[j]);
    store_pack<V>(dst + k, d);
  }
};
struct ToF32Op {
  float* dst;
  const bf16* src;
  template <int V>
  __device__ void apply(int64_t k) const {
    const Pack<bf16, V> s = load_pack<V>(src + k);
    Pack<float, V> d;
#pragma unroll
    for (int j = 0; j < V; ++j) d.v[j] = to_f(s.v[j]);
    store_pack<V>(dst + k, d);
  }
};
}  // namespace

void convert_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
  launch_flat(ToBf16Op{dst, src}, n, stream, dst, src);
}
void convert_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  launch_flat(ToF32Op{dst, src}, n, stream, dst, src);
}
}  // namespace kdtrain::cuda
