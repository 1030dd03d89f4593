// RMSNorm forward/backward kernels. Numerics and contracts: see rmsnorm.cuh.
//
// Layout of the work:
// - forward and the dinp half of backward: one warp per row, 8 rows per block.
//   A row is read twice (sum of squares, then the output); the second read hits
//   L1/L2, which is cheaper than holding C/32 values per lane in registers for
//   every C we support.
// - dweight: a column-parallel kernel sums a fixed chunk of rows per blockIdx.y
//   into scratch(chunks, C), then a second kernel adds the chunks in order.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda_check.cuh"
#include "rmsnorm.cuh"

namespace kdtrain::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;          // warps per block in the row kernels
constexpr int kColumnThreads = 256;       // threads per block in the column kernels
constexpr int64_t kMaxChunks = 512;       // dweight scratch rows at most (and blockIdx.y < 65536)
constexpr int64_t kMinRowsPerChunk = 16;  // keep each thread's serial loop worth its launch

// VEC consecutive bf16 values moved as one load/store (VEC=8 -> 16 bytes).
template <int VEC>
struct alignas(2 * VEC) Pack {
  bf16 v[VEC];
};

template <int VEC>
__device__ __forceinline__ Pack<VEC> load_pack(const bf16* p) {
  return *reinterpret_cast<const Pack<VEC>*>(p);
}

template <int VEC>
__device__ __forceinline__ void store_pack(bf16* p, const Pack<VEC>& pack) {
  *reinterpret_cast<Pack<VEC>*>(p) = pack;
}

// Butterfly sum: every lane ends with the same bits, because each step adds the
// same two values on both partner lanes (fp addition commutes).
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Block (32, kRowsPerBlock): lane threadIdx.x of warp threadIdx.y handles row
// blockIdx.x*kRowsPerBlock + threadIdx.y. VEC divides C, so a pack never straddles a row end.
template <int VEC>
__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                                       int64_t N, int C, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const bf16* x = inp + row * C;

  float sum_sq = 0.f;
  for (int c = threadIdx.x * VEC; c < C; c += kWarp * VEC) {
    const Pack<VEC> xp = load_pack<VEC>(x + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float xf = __bfloat162float(xp.v[k]);
      sum_sq += xf * xf;
    }
  }
  sum_sq = warp_sum(sum_sq);
  const float r = 1.f / sqrtf(sum_sq / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[row] = r;

  bf16* y = out + row * C;
  for (int c = threadIdx.x * VEC; c < C; c += kWarp * VEC) {
    const Pack<VEC> xp = load_pack<VEC>(x + c);
    const Pack<VEC> wp = load_pack<VEC>(weight + c);
    Pack<VEC> yp;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      yp.v[k] = __float2bfloat16((__bfloat162float(xp.v[k]) * r) * __bfloat162float(wp.v[k]));
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
  for (int c = threadIdx.x * VEC; c < C; c += kWarp * VEC) {
    const Pack<VEC> xp = load_pack<VEC>(x + c);
    const Pack<VEC> gp = load_pack<VEC>(g + c);
    const Pack<VEC> wp = load_pack<VEC>(weight + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      dot += __bfloat162float(gp.v[k]) * __bfloat162float(wp.v[k]) * __bfloat162float(xp.v[k]);
  }
  dot = warp_sum(dot);
  const float r = rstd[row];
  const float coef = r * r * r * dot / static_cast<float>(C);

  for (int c = threadIdx.x * VEC; c < C; c += kWarp * VEC) {
    const Pack<VEC> xp = load_pack<VEC>(x + c);
    const Pack<VEC> gp = load_pack<VEC>(g + c);
    const Pack<VEC> wp = load_pack<VEC>(weight + c);
    Pack<VEC> dp = load_pack<VEC>(dx + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = r * __bfloat162float(wp.v[k]) * __bfloat162float(gp.v[k]) -
                      coef * __bfloat162float(xp.v[k]);
      dp.v[k] = __float2bfloat16(__bfloat162float(dp.v[k]) + d);
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
  float acc[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = 0.f;
  for (int64_t n = chunk * rows_per_chunk; n < row_end; ++n) {
    const float r = rstd[n];
    const Pack<VEC> xp = load_pack<VEC>(inp + n * C + c);
    const Pack<VEC> gp = load_pack<VEC>(dout + n * C + c);
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += __bfloat162float(gp.v[k]) * (__bfloat162float(xp.v[k]) * r);
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) partial[chunk * C + c + k] = acc[k];
}

// dweight(c) += sum_chunk partial(chunk, c), chunks in increasing order.
__global__ void column_chunk_sum_kernel(float* dweight, const float* partial, int64_t chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = 0.f;
  for (int64_t i = 0; i < chunks; ++i) sum += partial[i * C + c];
  dweight[c] += sum;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows per dweight chunk: a pure function of N so results never depend on the device.
int64_t rows_per_chunk(int64_t N) { return std::max(kMinRowsPerChunk, ceil_div(N, kMaxChunks)); }

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Widest pack (8, 4, 2 or 1 bf16) that divides C and whose size every pointer is aligned to;
// then every row start is aligned too, because C*2 bytes is a multiple of the pack size.
template <typename... Ptrs>
int pick_vec(int64_t C, const Ptrs*... ptrs) {
  for (int vec : {8, 4, 2}) {
    if (C % vec == 0 && (aligned(ptrs, 2 * vec) && ...)) return vec;
  }
  return 1;
}

void check_shape(const char* op, int64_t N, int64_t C) {
  KD_CHECK(N >= 0 && C > 0 && C <= INT_MAX, op, ": bad shape N=", N, " C=", C);
}

dim3 row_grid(int64_t N) { return dim3(static_cast<unsigned>(ceil_div(N, kRowsPerBlock))); }
const dim3 kRowBlock(kWarp, kRowsPerBlock);

}  // namespace

void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t N,
                     int64_t C, float eps, cudaStream_t stream) {
  check_shape("rmsnorm_forward", N, C);
  if (N == 0) return;
  const int c = static_cast<int>(C);
  switch (pick_vec(C, out, inp, weight)) {
    case 8: rmsnorm_forward_kernel<8><<<row_grid(N), kRowBlock, 0, stream>>>(out, rstd, inp, weight, N, c, eps); break;
    case 4: rmsnorm_forward_kernel<4><<<row_grid(N), kRowBlock, 0, stream>>>(out, rstd, inp, weight, N, c, eps); break;
    case 2: rmsnorm_forward_kernel<2><<<row_grid(N), kRowBlock, 0, stream>>>(out, rstd, inp, weight, N, c, eps); break;
    default: rmsnorm_forward_kernel<1><<<row_grid(N), kRowBlock, 0, stream>>>(out, rstd, inp, weight, N, c, eps); break;
  }
  CUDA_CHECK_LAUNCH();
}

size_t rmsnorm_backward_scratch_bytes(int64_t N, int64_t C) {
  check_shape("rmsnorm_backward_scratch_bytes", N, C);
  if (N == 0) return 0;
  return static_cast<size_t>(ceil_div(N, rows_per_chunk(N)) * C) * sizeof(float);
}

template <int VEC>
static void launch_backward(bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                            const bf16* weight, const float* rstd, int64_t N, int C,
                            int64_t chunk_rows, int64_t chunks, cudaStream_t stream) {
  rmsnorm_backward_dinp_kernel<VEC><<<row_grid(N), kRowBlock, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  const dim3 grid(static_cast<unsigned>(ceil_div(C / VEC, kColumnThreads)), static_cast<unsigned>(chunks));
  rmsnorm_dweight_partial_kernel<VEC><<<grid, kColumnThreads, 0, stream>>>(partial, dout, inp, rstd, N, C, chunk_rows);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(bf16* dinp, float* dweight, void* scratch, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int64_t N, int64_t C,
                      cudaStream_t stream) {
  check_shape("rmsnorm_backward", N, C);
  if (N == 0) return;
  KD_CHECK(scratch != nullptr, "rmsnorm_backward: scratch is null (need ",
           rmsnorm_backward_scratch_bytes(N, C), " bytes)");
  const int c = static_cast<int>(C);
  const int64_t chunk_rows = rows_per_chunk(N);
  const int64_t chunks = ceil_div(N, chunk_rows);
  float* partial = static_cast<float*>(scratch);
  switch (pick_vec(C, dinp, dout, inp, weight)) {
    case 8: launch_backward<8>(dinp, partial, dout, inp, weight, rstd, N, c, chunk_rows, chunks, stream); break;
    case 4: launch_backward<4>(dinp, partial, dout, inp, weight, rstd, N, c, chunk_rows, chunks, stream); break;
    case 2: launch_backward<2>(dinp, partial, dout, inp, weight, rstd, N, c, chunk_rows, chunks, stream); break;
    default: launch_backward<1>(dinp, partial, dout, inp, weight, rstd, N, c, chunk_rows, chunks, stream); break;
  }
  column_chunk_sum_kernel<<<static_cast<unsigned>(ceil_div(C, kColumnThreads)), kColumnThreads, 0, stream>>>(
      dweight, partial, chunks, c);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kdtrain::cuda
