// Kernels for embedding.cuh, and the host-side bucketing of token positions.
#include "kernels/cuda_check.cuh"
#include "kernels/embedding.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

// Rows from the grid's y dimension, VEC-wide column packs from x: a 16-byte copy
// of wte's row per thread when C allows (row_pack_loop in vec_layout.h).
template <int VEC>
__global__ void embedding_forward_kernel(bf16* out, const int32_t* tokens, const bf16* wte,
                                         int64_t N, int C) {
  row_pack_loop<VEC>(N, blockIdx.y, gridDim.y, C / VEC, blockIdx.x * blockDim.x + threadIdx.x,
                     gridDim.x * blockDim.x, [&](int64_t n, int c) {
                       const int32_t id = tokens[n];
                       Pack<bf16, VEC> p;
                       if (id >= 0) {
                         p = load_pack<VEC>(wte + static_cast<int64_t>(id) * C + c);
                       } else {
#pragma unroll
                         for (int k = 0; k < VEC; ++k) p.v[k] = to_bf(0.f);
                       }
                       store_pack<VEC>(out + n * C + c, p);
                     });
}

// grid (U, column packs): block (u, cb) owns dwte[ids[u], (cb*kThreads + threadIdx.x)*VEC + k].
template <int VEC>
__global__ void embedding_backward_kernel(float* dwte, const bf16* dout, const int32_t* ids,
                                          const int32_t* offsets, const int32_t* positions,
                                          int C) {
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * VEC;
  if (c >= C) return;
  const int64_t u = blockIdx.x;
  float acc[VEC] = {};
  for (int32_t p = offsets[u]; p < offsets[u + 1]; ++p) {
    const Pack<bf16, VEC> g = load_pack<VEC>(dout + static_cast<int64_t>(positions[p]) * C + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += to_f(g.v[k]);
  }
  float* row = dwte + static_cast<int64_t>(ids[u]) * C + c;
  Pack<float, VEC> w = load_pack<VEC>(row);
#pragma unroll
  for (int k = 0; k < VEC; ++k) w.v[k] += acc[k];
  store_pack<VEC>(row, w);
}
}  // namespace

TokenBuckets bucket_tokens(const int32_t* tokens, int64_t N, int64_t V) {
  std::vector<int32_t> count(static_cast<size_t>(V) + 1, 0);
  for (int64_t n = 0; n < N; ++n) {
    KD_CHECK(tokens[n] >= 0 && tokens[n] < V, "embedding_backward: token ", tokens[n],
             " at position ", n, " is outside the vocabulary of ", V);
    ++count[tokens[n]];
  }
  TokenBuckets b;
  std::vector<int32_t> start(static_cast<size_t>(V), -1);
  b.offsets.push_back(0);
  for (int64_t id = 0; id < V; ++id) {
    if (count[id] == 0) continue;
    start[id] = b.offsets.back();
    b.ids.push_back(static_cast<int32_t>(id));
    b.offsets.push_back(b.offsets.back() + count[id]);
  }
  b.positions.resize(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) b.positions[start[tokens[n]]++] = static_cast<int32_t>(n);
  return b;
}

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, int64_t N, int64_t C,
                       cudaStream_t stream) {
  KD_CHECK(C < (int64_t(1) << 31), "embedding_forward: C=", C, " too large");
  if (N <= 0 || C <= 0) return;
  dispatch_pack(widest_pack(C, out, wte), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    embedding_forward_kernel<VEC><<<row_pack_grid(N, C / VEC, kThreads), kThreads, 0, stream>>>(
        out, tokens, wte, N, static_cast<int>(C));
  });
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, const bf16* dout, const int32_t* ids, const int32_t* offsets,
                        const int32_t* positions, int64_t U, int64_t C, cudaStream_t stream) {
  if (U <= 0 || C <= 0) return;
  KD_CHECK(U < (int64_t(1) << 31) && C < (int64_t(1) << 31),
           "embedding_backward: too many distinct tokens ", U, " or columns ", C);
  dispatch_pack(widest_pack(C, dout, dwte), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    const dim3 grid(static_cast<unsigned>(U), static_cast<unsigned>(ceil_div(C / VEC, kThreads)));
    embedding_backward_kernel<VEC><<<grid, kThreads, 0, stream>>>(dwte, dout, ids, offsets,
                                                                  positions, static_cast<int>(C));
  });
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
