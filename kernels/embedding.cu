// Kernels for embedding.cuh, and the host-side bucketing of token positions.
#include "cuda_check.cuh"
#include "embedding.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(bf16* out, const int32_t* tokens, const bf16* wte,
                                         int64_t N, int64_t C) {
  const int64_t total = N * C;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / C, c = k % C;
    const int32_t id = tokens[n];
    out[k] = id >= 0 ? wte[static_cast<int64_t>(id) * C + c] : to_bf(0.f);
  }
}

// grid (U, column blocks): block (u, cb) owns dwte[ids[u], cb*kThreads + threadIdx.x].
__global__ void embedding_backward_kernel(float* dwte, const bf16* dout, const int32_t* ids,
                                          const int32_t* offsets, const int32_t* positions,
                                          int64_t C) {
  const int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t u = blockIdx.x;
  float acc = 0.f;
  for (int32_t p = offsets[u]; p < offsets[u + 1]; ++p) acc += to_f(dout[positions[p] * C + c]);
  dwte[static_cast<int64_t>(ids[u]) * C + c] += acc;
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
  if (N <= 0 || C <= 0) return;
  embedding_forward_kernel<<<elementwise_blocks(N * C, kThreads), kThreads, 0, stream>>>(out, tokens,
                                                                                          wte, N, C);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, const bf16* dout, const int32_t* ids, const int32_t* offsets,
                        const int32_t* positions, int64_t U, int64_t C, cudaStream_t stream) {
  if (U <= 0 || C <= 0) return;
  KD_CHECK(U < (int64_t(1) << 31), "embedding_backward: too many distinct tokens ", U);
  const dim3 grid(static_cast<unsigned>(U), static_cast<unsigned>(ceil_div(C, kThreads)));
  embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(dwte, dout, ids, offsets, positions, C);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
