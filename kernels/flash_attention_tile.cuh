// Device building blocks shared by flash_attention_fwd.cu and flash_attention_bwd.cu:
// shared-memory row strides, tile loads, and the two 16-row tile products on the
// tensor cores (WMMA bf16 16x16x16, fp32 accumulate).
//
// Layout habits (each warp owns 16 rows of the tile it iterates over):
// - bf16 tiles in shared memory are row-major with stride D + 8 (16 bytes of padding:
//   rows start on different banks, and every 16x16 fragment pointer stays 32-byte
//   aligned as WMMA requires).
// - fp32 scratch (the 16 x Bc score block, or the 16 x D accumulator dump) has stride
//   W + 4 floats, W = max(Bc, D).
// - Row-wise softmax work: lane l of a warp handles row l/2 of the warp's 16 rows and
//   half (l & 1) of the columns, so one shuffle (xor 1) completes a row reduction.
// The WMMA calls are the part wgmma (sm_90a) replaces later; the surrounding
// structure (tiles staged in shared memory, per-row statistics in registers) stays.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

namespace kdtrain::cuda::flash_detail {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kWarp = 32;
constexpr int kFrag = 16;  // WMMA tile edge

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// Row strides (elements) of the shared-memory tiles for head dim D.
template <int D>
struct Strides {
  static constexpr int kHalf = D + 8;  // bf16 tiles of D columns
  static_assert(D % 16 == 0, "head dim must be a multiple of 16");
};

// Copies rows [0, valid) of a strided global bf16 matrix (D columns) into shared
// memory (stride D + 8), zero-filling rows [valid, ROWS): padded keys must read as
// exact zeros, never as stale bits (0 * NaN would poison the products).
// 16-byte loads; the block's threads stride over the (row, 8-column chunk) pairs.
template <int D, int ROWS>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int64_t src_stride, int valid) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + r * src_stride + c);
    *reinterpret_cast<uint4*>(dst + r * Strides<D>::kHalf + c) = v;
  }
}

// acc (16x16) += A (16 x K, row-major, lda) * B^T, B (16 x K, row-major, ldb):
// a score block Q K^T with the key rows of B.
template <int K>
__device__ __forceinline__ void mma_abt(FragC& acc, const bf16* A, int lda, const bf16* B, int ldb) {
#pragma unroll
  for (int k = 0; k < K; k += kFrag) {
    FragA a;
    FragBCol b;
    wmma::load_matrix_sync(a, A + k, lda);
    wmma::load_matrix_sync(b, B + k, ldb);
    wmma::mma_sync(acc, a, b, acc);
  }
}

// acc (16x16) += A (16 x K, row-major, lda) * B (K x 16, row-major, ldb): P V, dS K.
template <int K>
__device__ __forceinline__ void mma_ab(FragC& acc, const bf16* A, int lda, const bf16* B, int ldb) {
#pragma unroll
  for (int k = 0; k < K; k += kFrag) {
    FragA a;
    FragBRow b;
    wmma::load_matrix_sync(a, A + k, lda);
    wmma::load_matrix_sync(b, B + static_cast<int64_t>(k) * ldb, ldb);
    wmma::mma_sync(acc, a, b, acc);
  }
}

// Butterfly sum over a warp: every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Writes N consecutive floats as bf16 with 16-byte stores (N a multiple of 8, dst
// 16-byte aligned).
template <int N>
__device__ __forceinline__ void store_bf16_row(bf16* dst, const float (&v)[N]) {
  static_assert(N % 8 == 0, "rows are stored in 8-element packs");
#pragma unroll
  for (int c = 0; c < N; c += 8) {
    alignas(16) bf16 pack[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) pack[k] = __float2bfloat16(v[c + k]);
    *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(pack);
  }
}

}  // namespace kdtrain::cuda::flash_detail
