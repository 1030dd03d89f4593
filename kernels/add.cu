// Kernels for add.cuh: flat packs (elementwise.cuh).
#include "add.cuh"
#include "elementwise.cuh"

namespace kdtrain::cuda {
namespace {
struct AddOp {
  bf16* out;
  const bf16 *a, *b;
  template <int V>
  __device__ void apply(int64_t k) const {
    const Pack<bf16, V> pa = load_pack<V>(a + k), pb = load_pack<V>(b + k);
    Pack<bf16, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = to_bf(to_f(pa.v[j]) + to_f(pb.v[j]));
    store_pack<V>(out + k, o);
  }
};
}  // namespace

void add(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
  launch_flat(AddOp{out, a, b}, n, stream, out, a, b);
}
void accumulate(bf16* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  add(dst, dst, src, n, stream);
}
}  // namespace kdtrain::cuda
