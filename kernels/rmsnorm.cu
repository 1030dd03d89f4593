// RMSNorm forward/backward kernels and the fused residual add + RMSNorm forward.
// Numerics and contracts: see rmsnorm.cuh.
//
// Layout of the work:
// - forward and the dinp half of backward: one warp per row, 8 rows per block.
//   A row is read twice (sum of squares, then the output); the second read hits
//   L1/L2, which is cheaper than holding C/32 values per lane in registers for
//   every C we support. The fused forward writes the bf16 sum in the first pass
//   and reads it back (the lane's own writes) in the second.
// - dweight: a column-parallel kernel sums a fixed chunk of rows per blockIdx.y
//   into scratch(chunks, C), then sum_chunk_partials adds the chunks in order.
#include <climits>

#include "kernels/column_sum.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/rmsnorm.cuh"

namespace kdtrain::cuda {
namespace {

constexpr int kRowsPerBlock = 8;          // warps per block in the row kernels
constexpr int kColumnThreads = 256;       // threads per block in the column kernels
constexpr int64_t kMaxChunks = 512;       // dweight scratch rows at most (and blockIdx.y < 65536)
constexpr int64_t kMinRowsPerChunk = 16;  // keep each thread's serial loop worth its launch

// Block (32, kRowsPerBlock): lane threadIdx.x of warp threadIdx.y handles row
// blockIdx.x*kRowsPerBlock + threadIdx.y. VEC divides C, so a pack never straddles
// a row end. With ADD, x = bf16(inp + residual) is written to sum_out first.
template <int VEC, bool ADD>
__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, bf16* sum_out, const bf16* inp,
                                       const bf16* residual, const bf16* weight, int64_t N, int C,
                                       float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const bf16* x = (ADD ? sum_out : inp) + row * C;

  float sum_sq = 0.f;
  for (int c = threadIdx.x * VEC; c < C; c += kWarpSize * VEC) {
    Pack<bf16, VEC> xp = load_pack<VEC>(inp + row * C + c);
    if (ADD) {
      const Pack<bf16, VEC> rp = load_pack<VEC>(residual + row * C + c);
#pragma unroll
      for (int k = 0; k < VEC; ++k) xp.v[k] = to_bf(to_f(xp.v[k]) + to_f(rp.v[k]));
      store_pack<VEC>(sum_out + row * C + c, xp);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum_sq += to_f(xp.v[k]) * to_f(xp.v[k]);
  }
  sum_sq = warp_sum(sum_sq);
  const float r = 1.f / sqrtf(sum_sq / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[row] = r;

  bf16* y = out + row * C;
  for (int c = threadIdx.x * VEC; c < C; c += kWarpSize * VEC) {
    const Pack<bf16, VEC> xp = load_pack<VEC>(x + c);
    const Pack<bf16, VEC> wp = load_pack<VEC>(weight + c);
    Pack<bf16, VEC> yp;
#pragma unroll
    for (int k = 0; k < VEC; ++k) yp.v[k] = to_bf((to_f(xp.v[k]) * r) * to_f(wp.v[k]));
    store_pack<VEC>(y + c, yp);
  }
}

// d/dx of y = x*r*w with r = (mean(x^2)+eps)^-1/2:
//   dx_c = r*w_c*g_c - (r^3/C) * x_c * sum_k g_k*w_k*x_k
template <int VEC>
__global__ void rmsnorm_backward_dinp_kernel(bf16* dinp, const bf16* dout, const bf16* inp,
                                             const bf16* weight, const float* rstd, int64_t N,
                                             int C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const bf16* x = inp + row * C;
  const bf16* g = dout + row * C;
  bf16* dx = dinp + row * C;

  float dot = 0.f;
  for (int c = threadIdx.x * VEC; c < C; c += kWarpSize * VEC) {
    const Pack<bf16, VEC> xp = load_pack<VEC>(x + c);
    const Pack<bf16, VEC> gp = load_pack<VEC>(g + c);
    const Pack<bf16, VEC> wp = load_pack<VEC>(weight + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) dot += to_f(gp.v[k]) * to_f(wp.v[k]) * to_f(xp.v[k]);
  }
  dot = warp_sum(dot);
  const float r = rstd[row];
  const float coef = r * r * r * dot / static_cast<float>(C);

  for (int c = threadIdx.x * VEC; c < C; c += kWarpSize * VEC) {
    const Pack<bf16, VEC> xp = load_pack<VEC>(x + c);
    const Pack<bf16, VEC> gp = load_pack<VEC>(g + c);
    const Pack<bf16, VEC> wp = load_pack<VEC>(weight + c);
    Pack<bf16, VEC> dp = load_pack<VEC>(dx + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = r * to_f(wp.v[k]) * to_f(gp.v[k]) - coef * to_f(xp.v[k]);
      dp.v[k] = to_bf(to_f(dp.v[k]) + d);
    }
    store_pack<VEC>(dx + c, dp);
  }
}

// partial(chunk, c) = sum over rows [chunk*rows_per_chunk, +rows_per_chunk) of g*(x*r),
// rows in increasing order. Thread t of the grid owns columns [t*VEC, t*VEC+VEC).
template <int VEC>
__global__ void rmsnorm_dweight_partial_kernel(float* partial, const bf16* dout, const bf16* inp,
                                               const float* rstd, int64_t N, int C,
                                               int64_t rows_per_chunk) {
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (c >= C) return;
  const int64_t chunk = blockIdx.y;
  const int64_t chunk_end = (chunk + 1) * rows_per_chunk;
  const int64_t row_end = chunk_end < N ? chunk_end : N;
  float acc[VEC] = {};
  for (int64_t n = chunk * rows_per_chunk; n < row_end; ++n) {
    const float r = rstd[n];
    const Pack<bf16, VEC> xp = load_pack<VEC>(inp + n * C + c);
    const Pack<bf16, VEC> gp = load_pack<VEC>(dout + n * C + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += to_f(gp.v[k]) * (to_f(xp.v[k]) * r);
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) partial[chunk * C + c + k] = acc[k];
}

RowChunks dweight_chunks(int64_t N) { return row_chunks(N, kMaxChunks, kMinRowsPerChunk); }

void check_shape(const char* op, int64_t N, int64_t C) {
  KD_CHECK(N >= 0 && C > 0 && C <= INT_MAX, op, ": bad shape N=", N, " C=", C);
}

dim3 row_grid(int64_t N) { return dim3(static_cast<unsigned>(ceil_div(N, kRowsPerBlock))); }
const dim3 kRowBlock(kWarpSize, kRowsPerBlock);

template <bool ADD>
void launch_forward(bf16* out, float* rstd, bf16* sum_out, const bf16* inp, const bf16* residual,
                    const bf16* weight, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (N == 0) return;
  const int vec = ADD ? widest_pack(C, out, sum_out, inp, residual, weight)
                      : widest_pack(C, out, inp, weight);
  dispatch_pack(vec, [&](auto v) {
    rmsnorm_forward_kernel<decltype(v)::value, ADD><<<row_grid(N), kRowBlock, 0, stream>>>(
        out, rstd, sum_out, inp, residual, weight, N, static_cast<int>(C), eps);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t N,
                     int64_t C, float eps, cudaStream_t stream) {
  check_shape("rmsnorm_forward", N, C);
  launch_forward<false>(out, rstd, nullptr, inp, nullptr, weight, N, C, eps, stream);
}

void add_rmsnorm_forward(bf16* sum_out, bf16* out, float* rstd, const bf16* a, const bf16* b,
                         const bf16* weight, int64_t N, int64_t C, float eps,
                         cudaStream_t stream) {
  check_shape("add_rmsnorm_forward", N, C);
  launch_forward<true>(out, rstd, sum_out, a, b, weight, N, C, eps, stream);
}

size_t rmsnorm_backward_scratch_bytes(int64_t N, int64_t C) {
  check_shape("rmsnorm_backward_scratch_bytes", N, C);
  if (N == 0) return 0;
  return static_cast<size_t>(dweight_chunks(N).chunks * C) * sizeof(float);
}

void rmsnorm_backward(bf16* dinp, float* dweight, void* scratch, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int64_t N, int64_t C,
                      cudaStream_t stream) {
  check_shape("rmsnorm_backward", N, C);
  if (N == 0) return;
  KD_CHECK(scratch != nullptr, "rmsnorm_backward: scratch is null (need ",
           rmsnorm_backward_scratch_bytes(N, C), " bytes)");
  const int c = static_cast<int>(C);
  const RowChunks rc = dweight_chunks(N);
  float* partial = static_cast<float*>(scratch);
  dispatch_pack(widest_pack(C, dinp, dout, inp, weight), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    rmsnorm_backward_dinp_kernel<VEC><<<row_grid(N), kRowBlock, 0, stream>>>(dinp, dout, inp,
                                                                             weight, rstd, N, c);
    CUDA_CHECK_LAUNCH();
    const dim3 grid(static_cast<unsigned>(ceil_div(C / VEC, kColumnThreads)),
                    static_cast<unsigned>(rc.chunks));
    rmsnorm_dweight_partial_kernel<VEC><<<grid, kColumnThreads, 0, stream>>>(
        partial, dout, inp, rstd, N, c, rc.rows_per_chunk);
  });
  CUDA_CHECK_LAUNCH();
  sum_chunk_partials(dweight, partial, rc.chunks, C, stream);
}

}  // namespace kdtrain::cuda
