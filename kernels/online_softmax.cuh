// The online softmax state the loss kernels keep per thread (loss.cu,
// sparse_kd_loss.cu): a running max, the sum of exp(x - max) and two weighted
// sums, folded in a pack at a time and merged across the block by fixed trees
// (deterministic).
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {

// Running (max, sum of exp(x - max), sums of exp(x - max) * d and * e).
struct Online {
  float m = -INFINITY, z = 0.f, a = 0.f, b = 0.f;
  // Folds in up to VEC values at once: one rescale per pack.
  template <int VEC>
  __device__ void add(const float (&x)[VEC], const float (&d)[VEC], const float (&e)[VEC],
                      int count) {
    float pm = m;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      if (j < count) pm = fmaxf(pm, x[j]);
    if (pm == -INFINITY) return;  // nothing finite yet: exp(-inf) contributes 0
    const float scale = m == -INFINITY ? 0.f : expf(m - pm);
    z *= scale;
    a *= scale;
    b *= scale;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (j < count && x[j] != -INFINITY) {
        const float w = expf(x[j] - pm);
        z += w;
        a += w * d[j];
        b += w * e[j];
      }
    }
    m = pm;
  }
};

struct Merged {
  float lse, mean_d, mean_e;  // log Z, E[d] and E[e]
};

// Merges every thread's Online into the row's (lse, E[d]) with fixed trees.
__device__ inline Merged block_merge(const Online& o, float* red) {
  const float M = block_max(o.m, red);
  const float scale = o.m == -INFINITY ? 0.f : expf(o.m - M);
  const float Z = block_sum(o.z * scale, red);
  const float A = block_sum(o.a * scale, red);
  const float B = block_sum(o.b * scale, red);
  return Merged{M + logf(Z), A / Z, B / Z};
}

template <int VEC>
__device__ __forceinline__ void load_values(float (&out)[VEC], const bf16* row, int64_t k,
                                            int count) {
  if (count == VEC) {
    const Pack<bf16, VEC> p = load_pack<VEC>(row + k);
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = to_f(p.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = j < count ? to_f(row[k + j]) : 0.f;
  }
}

}  // namespace kdtrain::cuda
