// Kernels for column_sum.cuh. Pass 1: grid (column packs, chunks); a thread owns
// VEC adjacent columns and walks its chunk's rows in order (16-byte loads when
// C allows; adjacent threads read adjacent packs, so loads coalesce). Pass 2: one
// thread per column adds the chunks in order.
#include "kernels/column_sum.cuh"
#include "kernels/cuda_check.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMinRowsPerChunk = 32;

template <int VEC>
__global__ void column_partial_kernel(float* partial, const bf16* x, int64_t N, int C,
                                      int64_t chunk_rows) {
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = min(N, r0 + chunk_rows);
  float acc[VEC] = {};
  for (int64_t r = r0; r < r1; ++r) {
    const Pack<bf16, VEC> p = load_pack<VEC>(x + r * C + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += to_f(p.v[k]);
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) partial[blockIdx.y * int64_t(C) + c + k] = acc[k];
}

__global__ void column_chunks_kernel(float* sums, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = global_thread();
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t i = 0; i < chunks; ++i) acc += partial[i * C + c];
  sums[c] += acc;
}

RowChunks plan(int64_t N) { return row_chunks(N, kMaxChunks, kMinRowsPerChunk); }
}  // namespace

size_t column_sum_scratch_bytes(int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return 0;
  return static_cast<size_t>(plan(N).chunks * C) * sizeof(float);
}

void sum_chunk_partials(float* out, const float* partial, int64_t chunks, int64_t C,
                        cudaStream_t stream) {
  if (C <= 0) return;
  column_chunks_kernel<<<static_cast<unsigned>(ceil_div(C, kThreads)), kThreads, 0, stream>>>(
      out, partial, chunks, C);
  CUDA_CHECK_LAUNCH();
}

void column_sum_accumulate(float* sums, const bf16* x, int64_t N, int64_t C, void* scratch,
                           cudaStream_t stream) {
  KD_CHECK(N >= 0 && C >= 0 && C < (int64_t(1) << 31), "column_sum_accumulate: bad shape N=", N,
           " C=", C);
  if (N == 0 || C == 0) return;
  KD_CHECK(scratch != nullptr, "column_sum_accumulate: scratch is null");
  const RowChunks rc = plan(N);
  float* partial = static_cast<float*>(scratch);
  dispatch_pack(widest_pack(C, x), [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const dim3 grid(static_cast<unsigned>(ceil_div(C / VEC, kThreads)),
                    static_cast<unsigned>(rc.chunks));
    column_partial_kernel<VEC><<<grid, kThreads, 0, stream>>>(partial, x, N, static_cast<int>(C),
                                                              rc.rows_per_chunk);
  });
  CUDA_CHECK_LAUNCH();
  sum_chunk_partials(sums, partial, rc.chunks, C, stream);
}
}  // namespace kdtrain::cuda
