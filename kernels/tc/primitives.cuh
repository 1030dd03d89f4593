// Tensor-core building blocks for the attention kernels (sm_80+ instructions, run on
// sm_90): mma.sync m16n8k16 bf16 -> fp32, ldmatrix, cp.async with its groups, a
// shared-memory swizzle, warp/quad shuffles, exp2/log2, bf16 packing, and the thread
// and block indices.
//
// One source, two targets. Kernel bodies are templates written only against the
// functions below (never against threadIdx, __syncthreads or inline PTX directly):
// - under nvcc (__CUDACC__) they are inline PTX / CUDA intrinsics;
// - under a plain host compiler they call the SIMT emulator (kernels/tc/sim/simt.h),
//   which runs one block's threads as fibers and computes each warp collective from
//   the PTX ISA's fragment layouts. Tests run the real kernel source that way.
// Bodies therefore use raw 16-bit words (uint16_t) for bf16 and packed pairs
// (uint32_t, low half = lower index) for bf16x2, so no CUDA header is needed on the host.
//
// Fragment layouts (PTX ISA 9.7.14.5.8, mma.m16n8k16 with .bf16; g = lane / 4,
// t = lane % 4):
//   A (16x16, row): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
//                   a[3] = A[g+8][2t+8..]
//   B (16x8, col):  b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   C/D (16x8 f32): c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
// ldmatrix (ISA 9.7.14.5.15): lanes 8m..8m+7 give the row addresses of matrix m; lane
// l receives in r[m] the pair (row l/4, cols 2(l%4)..+1) of matrix m, or with .trans
// (rows 2(l%4)..+1, col l/4).
#pragma once
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define TC_DEVICE __device__ __forceinline__
#define TC_HOST_DEVICE __host__ __device__ __forceinline__
#define TC_UNROLL _Pragma("unroll")
#define TC_ROLLED _Pragma("unroll 1")  // a loop kept rolled: fewer registers (e.g. after setmaxnreg.dec)
#else
#include <cmath>
#include <cstring>

#include "kernels/tc/sim/simt.h"
#define TC_DEVICE inline
#define TC_HOST_DEVICE inline
#define TC_UNROLL
#define TC_ROLLED
#endif

namespace kdtrain::tc {

constexpr int kWarpSize = 32;

// ------------------------------------------------------------ thread and block indices

#if defined(__CUDACC__)
using Index3 = uint3;
TC_DEVICE Index3 thread_idx() { return threadIdx; }
TC_DEVICE Index3 block_idx() { return blockIdx; }
TC_DEVICE Index3 block_dim() { return blockDim; }
TC_DEVICE Index3 grid_dim() { return gridDim; }
// __syncthreads: every thread of the block, and shared memory ordered across it.
TC_DEVICE void sync_block() { __syncthreads(); }
// __syncwarp: the 32 lanes of the warp, shared memory ordered among them.
TC_DEVICE void sync_warp() { __syncwarp(); }
#else
using Index3 = sim::Index3;
TC_DEVICE Index3 thread_idx() { return sim::thread_idx(); }
TC_DEVICE Index3 block_idx() { return sim::block_idx(); }
TC_DEVICE Index3 block_dim() { return sim::block_dim(); }
TC_DEVICE Index3 grid_dim() { return sim::grid_dim(); }
TC_DEVICE void sync_block() { sim::sync_block(); }
TC_DEVICE void sync_warp() { sim::sync_warp(); }
#endif

// Kernels using these are 1-D blocks of whole warps.
TC_DEVICE int lane_id() { return static_cast<int>(thread_idx().x) % kWarpSize; }
TC_DEVICE int warp_id() { return static_cast<int>(thread_idx().x) / kWarpSize; }

// ------------------------------------------------------------ scalar helpers

TC_DEVICE float bits_to_float(uint32_t u) {
#if defined(__CUDACC__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

TC_DEVICE uint32_t float_to_bits(float f) {
#if defined(__CUDACC__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

#if !defined(__CUDACC__)
// .ftz: a subnormal input or result becomes a zero of its sign.
inline float flush_subnormal(float v) { return std::fabs(v) < 0x1p-126f ? std::copysign(0.f, v) : v; }
#endif

// 2^x, ex2.approx.ftz: within 2 ulp of the correctly rounded result, not bit-exactly
// specified (2^-inf = +0). Host: std::exp2 with the flushes, which meets that bound but
// does not reproduce the hardware's bits (docs/flash_attention.md, "Tensor-core primitives").
TC_DEVICE float exp2_approx(float x) {
#if defined(__CUDACC__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return flush_subnormal(std::exp2(flush_subnormal(x)));
#endif
}

// log2(x), lg2.approx.ftz: absolute error <= 2^-22 in (0.5, 2), relative elsewhere; not
// bit-exact either. Host: std::log2 of the flushed input (a subnormal gives -inf).
TC_DEVICE float log2_approx(float x) {
#if defined(__CUDACC__)
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::log2(flush_subnormal(x));
#endif
}

// bf16 (raw bits) -> float: exact.
TC_DEVICE float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// float -> bf16 bits, round to nearest even (== __float2bfloat16_rn; NaN -> 0x7fff).
TC_DEVICE uint16_t float_to_bf16(float x) {
#if defined(__CUDACC__)
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  return sim::bf16_round(x);
#endif
}

// Two floats -> bf16x2 (lo in the low half), round to nearest even.
TC_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDACC__)
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // first source -> upper half
  return r;
#else
  return static_cast<uint32_t>(sim::bf16_round(lo)) | (static_cast<uint32_t>(sim::bf16_round(hi)) << 16);
#endif
}

TC_DEVICE float bf16x2_lo(uint32_t v) { return bits_to_float(v << 16); }
TC_DEVICE float bf16x2_hi(uint32_t v) { return bits_to_float(v & 0xffff0000u); }

// 16-byte copy between 16-byte aligned addresses (global <-> shared, plain ld/st.v4).
TC_DEVICE void copy16(void* dst, const void* src) {
#if defined(__CUDACC__)
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#else
  sim::check_aligned16(dst, "copy16 destination");
  sim::check_aligned16(src, "copy16 source");
  std::memcpy(dst, src, 16);
#endif
}

// The bytes of N elements of T moved by one vector access: 4, 8 or 16.
template <int N, typename T>
constexpr int vec_bytes() {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "4, 8 or 16 bytes");
  return kBytes;
}

// N contiguous elements of 2 or 4 bytes, 4, 8 or 16 bytes in all, between addresses
// aligned to that size: one vector load and store instead of N scalar ones (global memory,
// shared memory or registers, e.g. a row's columns into a lane's array).
template <int N, typename T>
TC_DEVICE void copy_vec(T* dst, const T* src) {
  constexpr int kBytes = vec_bytes<N, T>();
#if defined(__CUDACC__)
  using V = std::conditional_t<kBytes == 4, uint32_t, std::conditional_t<kBytes == 8, uint2, uint4>>;
  *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
#else
  sim::copy_aligned(dst, src, kBytes, "copy_vec");
#endif
}

// The same vector copy to global memory, as one st.global.v* written in PTX: nvcc 13.0
// split copy_vec's plain vector store into 4-byte stores where the address had two
// variable terms (a __grid_constant__ pointer plus two products: the backward prep's u
// rows, the backward's dq rows); __stwb kept one store but made it STG.STRONG.SM.
template <int N, typename T>
TC_DEVICE void store_global_vec(T* dst, const T* src) {
  constexpr int kBytes = vec_bytes<N, T>();
#if defined(__CUDACC__)
  const auto* w = reinterpret_cast<const uint32_t*>(src);
  if constexpr (kBytes == 16)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  else if constexpr (kBytes == 8)
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(w[0]), "r"(w[1]) : "memory");
  else
    asm volatile("st.global.b32 [%0], %1;" ::"l"(dst), "r"(w[0]) : "memory");
#else
  sim::copy_aligned(dst, src, kBytes, "store_global_vec");
#endif
}

// ------------------------------------------------------------ warp shuffles (full warp)

TC_DEVICE uint32_t shfl_xor(uint32_t v, int lane_mask) {
#if defined(__CUDACC__)
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#else
  return sim::shfl_xor(v, lane_mask);
#endif
}
TC_DEVICE float shfl_xor(float v, int lane_mask) { return bits_to_float(shfl_xor(float_to_bits(v), lane_mask)); }

TC_DEVICE uint32_t shfl_idx(uint32_t v, int src_lane) {
#if defined(__CUDACC__)
  return __shfl_sync(0xffffffffu, v, src_lane);
#else
  return sim::shfl_idx(v, src_lane);
#endif
}
TC_DEVICE float shfl_idx(float v, int src_lane) { return bits_to_float(shfl_idx(float_to_bits(v), src_lane)); }

// Reductions over the 4 lanes of a quad (the lanes sharing a row of an mma C fragment);
// every lane of the quad ends with the same bits.
TC_DEVICE float quad_max(float v) {
  v = fmaxf(v, shfl_xor(v, 1));
  return fmaxf(v, shfl_xor(v, 2));
}
TC_DEVICE float quad_sum(float v) {
  v += shfl_xor(v, 1);
  return v + shfl_xor(v, 2);
}
// A 4 x 4 transpose of 32-bit words over the 4 lanes of a quad: lane q's x[k] becomes the
// x[q] that lane k of its quad held. A row of an mma C fragment is spread over its quad, two
// columns a lane; after the transpose a lane holds four of them, contiguous, for one
// 16-byte store. Two butterfly stages of 2 shuffles: lanes 2 apart swap their off-diagonal
// 2 x 2 blocks, then lanes 1 apart their off-diagonal words.
TC_DEVICE void quad_transpose(uint32_t (&x)[4]) {
  const int q = lane_id() % 4;
  TC_UNROLL
  for (int stage = 2; stage >= 1; stage /= 2) {
    const bool upper = (q & stage) != 0;
    TC_UNROLL
    for (int j = 0; j < 4; ++j) {
      if (j & stage) continue;  // the pair (j, j + stage): the lower lane gives j + stage, the upper j
      const uint32_t got = shfl_xor(upper ? x[j] : x[j + stage], stage);
      if (upper)
        x[j] = got;
      else
        x[j + stage] = got;
    }
  }
}

// Butterfly over the whole warp; every lane ends with the same bits.
TC_DEVICE float warp_sum(float v) {
  for (int m = kWarpSize / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  return v;
}
TC_DEVICE float warp_max(float v) {
  for (int m = kWarpSize / 2; m > 0; m /= 2) v = fmaxf(v, shfl_xor(v, m));
  return v;
}

// ------------------------------------------------------------ tensor cores

// d = a * b + c: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (layouts above).
TC_DEVICE void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                              const float (&c)[4]) {
#if defined(__CUDACC__)
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  sim::mma_bf16_16816(d, a, b, c);
#endif
}
// acc += a * b.
TC_DEVICE void mma_bf16_16816(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_bf16_16816(acc, a, b, acc);
}

// ldmatrix.sync.aligned.m8n8.x{N}{.trans}.shared.b16: N 8x8 b16 matrices; this lane's
// row address (16-byte aligned, shared memory) is that of row lane % 8 of matrix lane / 8
// (lanes >= 8N give unused addresses). The "memory" clobber keeps the compiler from
// moving the read across plain shared-memory stores (the operand is only an address).
template <int N, bool kTrans = false>
TC_DEVICE void ldmatrix(uint32_t (&r)[N], const void* smem_row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDACC__)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  if constexpr (N == 1) {
    if constexpr (kTrans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr) : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr) : "memory");
  } else if constexpr (N == 2) {
    if constexpr (kTrans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                   : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                   : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  } else {
    if constexpr (kTrans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  }
#else
  sim::ldmatrix(r, N, kTrans, smem_row);
#endif
}

// ------------------------------------------------------------ asynchronous copies

// cp.async.cg.shared.global, 16 bytes (L2 only, bypassing L1). With valid == false the
// 16 destination bytes are zero-filled and nothing is read (src-size 0); src must still
// be a mapped global address. Both addresses 16-byte aligned.
TC_DEVICE void cp_async_16(void* smem_dst, const void* gmem_src, bool valid = true) {
#if defined(__CUDACC__)
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem_src), "r"(src_size)
               : "memory");
#else
  sim::cp_async_16(smem_dst, gmem_src, valid);
#endif
}

// cp.async.commit_group: the copies this thread issued since the last commit form a group.
TC_DEVICE void cp_async_commit() {
#if defined(__CUDACC__)
  asm volatile("cp.async.commit_group;" ::: "memory");
#else
  sim::cp_async_commit();
#endif
}

// cp.async.wait_group N: all but the N most recent committed groups of THIS thread have
// landed. Other threads see them only after a following sync_block().
template <int N>
TC_DEVICE void cp_async_wait() {
  static_assert(N >= 0, "wait_group count");
#if defined(__CUDACC__)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#else
  sim::cp_async_wait(N);
#endif
}

// ------------------------------------------------------------ shared-memory swizzle

// Tiles of bf16 rows of kRowElems (64: 128 bytes; 128: 256 bytes) in shared memory.
// The 16-byte chunk c of row r is stored at chunk c ^ (r % 8) of that row: the eight
// rows an ldmatrix phase reads at one logical chunk land on eight distinct 16-byte
// bank groups, and so do the eight chunks of a row written by eight consecutive lanes.
// Chunks stay whole, so every 16-byte access stays aligned.
template <int kRowElems>
struct Swizzle {
  static_assert(kRowElems == 64 || kRowElems == 128, "swizzled rows are 64 or 128 bf16");
  static constexpr int kChunks = kRowElems / 8;  // 16-byte chunks per row
  // Element offset of (row, col); col a multiple of 8 addresses a whole chunk.
  static TC_HOST_DEVICE int offset(int row, int col) {
    return row * kRowElems + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
  }
};

}  // namespace kdtrain::tc
