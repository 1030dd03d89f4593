// Kernels for alpha_activation.cuh: flat packs (elementwise.cuh). The activation
// is a runtime field of the op (one instantiation): the branch is uniform across
// the grid, so it costs nothing.
#include "alpha_activation.cuh"
#include "elementwise.cuh"

namespace kdtrain::cuda {
namespace {
__device__ __forceinline__ float linear_clip(float x) {
  return x <= -5.f ? 0.f : (x >= 5.f ? 1.f : 0.1f * x + 0.5f);
}

struct AlphaForwardOp {
  bf16* alpha;
  const bf16* z;
  bool sigmoid;
  template <int V>
  __device__ void apply(int64_t k) const {
    const Pack<bf16, V> zp = load_pack<V>(z + k);
    Pack<bf16, V> a;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float x = to_f(zp.v[j]);
      a.v[j] = to_bf(sigmoid ? sigmoidf_stable(x) : linear_clip(x));
    }
    store_pack<V>(alpha + k, a);
  }
};

struct AlphaBackwardOp {
  bf16* dz;
  const bf16 *dalpha, *z;
  bool sigmoid;
  template <int V>
  __device__ void apply(int64_t k) const {
    const Pack<bf16, V> zp = load_pack<V>(z + k), gp = load_pack<V>(dalpha + k);
    Pack<bf16, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float x = to_f(zp.v[j]);
      float d;
      if (sigmoid) {
        const float s = sigmoidf_stable(x);
        d = s * (1.f - s);
      } else {
        d = (x > -5.f && x < 5.f) ? 0.1f : 0.f;
      }
      out.v[j] = to_bf(to_f(gp.v[j]) * d);
    }
    store_pack<V>(dz + k, out);
  }
};
}  // namespace

void alpha_activation_forward(bf16* alpha, const bf16* z, int64_t n, bool sigmoid,
                              cudaStream_t stream) {
  launch_flat(AlphaForwardOp{alpha, z, sigmoid}, n, stream, alpha, z);
}

void alpha_activation_backward(bf16* dz, const bf16* dalpha, const bf16* z, int64_t n,
                               bool sigmoid, cudaStream_t stream) {
  launch_flat(AlphaBackwardOp{dz, dalpha, z, sigmoid}, n, stream, dz, dalpha, z);
}
}  // namespace kdtrain::cuda
