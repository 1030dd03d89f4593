// Kernels for column_sum.cuh. Pass 1: grid (column blocks, chunks), one thread per
// column walks its chunk's rows in order (adjacent threads read adjacent columns,
// so loads coalesce). Pass 2: one thread per column adds the chunks in order.
#include <algorithm>

#include "column_sum.cuh"
#include "cuda_check.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMinRowsPerChunk = 32;

int64_t rows_per_chunk(int64_t N) { return std::max(kMinRowsPerChunk, ceil_div(N, kMaxChunks)); }

__global__ void column_partial_kernel(float* partial, const bf16* x, int64_t N, int64_t C,
                                      int64_t chunk_rows) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = min(N, r0 + chunk_rows);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; ++r) acc += to_f(x[r * C + c]);
  partial[blockIdx.y * C + c] = acc;
}

__global__ void column_chunks_kernel(float* sums, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t i = 0; i < chunks; ++i) acc += partial[i * C + c];
  sums[c] += acc;
}
}  // namespace

size_t column_sum_scratch_bytes(int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return 0;
  return static_cast<size_t>(ceil_div(N, rows_per_chunk(N)) * C) * sizeof(float);
}

void column_sum_accumulate(float* sums, const bf16* x, int64_t N, int64_t C, void* scratch,
                           cudaStream_t stream) {
  KD_CHECK(N >= 0 && C >= 0, "column_sum_accumulate: bad shape N=", N, " C=", C);
  if (N == 0 || C == 0) return;
  KD_CHECK(scratch != nullptr, "column_sum_accumulate: scratch is null");
  const int64_t chunk_rows = rows_per_chunk(N);
  const int64_t chunks = ceil_div(N, chunk_rows);
  float* partial = static_cast<float*>(scratch);
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kThreads)), static_cast<unsigned>(chunks));
  column_partial_kernel<<<grid, kThreads, 0, stream>>>(partial, x, N, C, chunk_rows);
  CUDA_CHECK_LAUNCH();
  column_chunks_kernel<<<static_cast<unsigned>(ceil_div(C, kThreads)), kThreads, 0, stream>>>(
      sums, partial, chunks, C);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
