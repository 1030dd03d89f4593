// Fused causal attention, backward (FlashAttention-2 structure, no float atomics).
// Contract and numerics: flash_attention.cuh; the CPU mirror is
// src/backend/cpu/cpu_flash_attention_bwd.cpp.
//
// Kernels, in launch order (workspace: drow, sigma (B,H,T) fp32; prefix (B,T,Hkv,D) fp32):
//   prefix_kernel   [affine] S_i = sum_{j<=i} v_j per (b, kv head), one thread per column
//   rowstat_kernel  one warp per (b, h, i): D_i = dO_i.(out_i - beta_i S_i) (= dO'_i.(PV)_i,
//                   no division by alpha), sigma_i = dO_i.S_i [affine]
//   dsink_kernel    [sink] one block per head: dsinks_h -= sum_{b,i} e^{s_h - lse_i} D_i,
//                   a fixed per-thread stride then a fixed tree
//   dq_kernel       one block per (b, h, query tile): loops key tiles; recomputes
//                   P = e^{scale QK^T - lse}, dPraw = dO V^T, dS = P (alpha dPraw - D);
//                   dq = scale dS K (fragments held across the loop); affine:
//                   dalpha_i = sum_j P_ij dPraw_ij - sigma_i / N_i
//   dkdv_kernel     one block per (b, kv head, key tile), warp w owns 16 key rows:
//                   loops the group's heads, then query tiles from the diagonal on;
//                   dv += (P^T alpha) dO, dk += dS^T Q (fragments held across the loops);
//                   affine: dv_j += sum_{i>=j} beta_i dO_i, whole query tiles into a
//                   shared vector, the diagonal tile by a reverse column scan.
#include <algorithm>
#include <cmath>

#include "cuda_check.cuh"
#include "flash_attention.cuh"
#include "flash_attention_tile.cuh"
#include "flash_params.h"

namespace kdtrain::cuda {
namespace {

using namespace flash_detail;
using kdtrain::flash::FlashParams;

constexpr int kRowWarps = 8;        // rows per block in rowstat_kernel
constexpr int kSinkThreads = 256;   // threads per block in dsink_kernel

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Workspace carve-up, shared by the size query and the launcher.
struct Workspace {
  size_t drow = 0, sigma = 0, prefix = 0, bytes = 0;  // byte offsets and total
  explicit Workspace(const AttentionParams& s) {
    const bool affine = s.affine;
    const size_t rows = static_cast<size_t>(s.B * s.H * s.T) * sizeof(float);
    drow = 0;
    sigma = align256(rows);
    prefix = sigma + (affine ? align256(rows) : 0);
    bytes = prefix + (affine ? align256(static_cast<size_t>(s.B * s.T * s.Hkv * s.D) * sizeof(float)) : 0);
  }
};

// ------------------------------------------------------------ small kernels

// grid (B * Hkv), block D: thread d scans column d of v over t in order.
template <int D>
__global__ void prefix_kernel(FlashParams p, const bf16* __restrict__ qkv, float* __restrict__ prefix) {
  const int64_t b = blockIdx.x / p.Hkv, g = blockIdx.x % p.Hkv;
  const int d = threadIdx.x;
  const bf16* v = qkv + b * p.qkv_batch + p.v_offset + g * D + d;
  float* s = prefix + (b * p.T * p.Hkv + g) * D + d;
  float run = 0.f;
  for (int64_t t = 0; t < p.T; ++t) {
    run += __bfloat162float(v[t * p.qkv_token]);
    s[t * p.Hkv * D] = run;
  }
}

// grid ceil(B*H*T / kRowWarps), block kRowWarps warps; warp -> row (b, h, i).
template <int D, bool kAffine>
__global__ void rowstat_kernel(FlashParams p, const bf16* __restrict__ out, const bf16* __restrict__ dout,
                               const bf16* __restrict__ alpha, const float* __restrict__ alpha_ma,
                               const float* __restrict__ prefix, float* __restrict__ drow,
                               float* __restrict__ sigma) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (row >= p.B * p.H * p.T) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t b = row / (p.H * p.T), h = (row / p.T) % p.H, i = row % p.T;
  const int64_t o = b * p.o_batch + i * p.o_token + h * D;
  float beta = 0.f;
  const float* s = nullptr;
  if constexpr (kAffine) {
    const float a = __bfloat162float(alpha[b * p.alpha_batch + i * p.alpha_token + h]);
    beta = (alpha_ma[h] - a) / static_cast<float>(i + 1);
    s = prefix + ((b * p.T + i) * p.Hkv + h / p.group) * D;
  }
  float dsum = 0.f, ssum = 0.f;
#pragma unroll
  for (int d = lane; d < D; d += kWarp) {
    const float go = __bfloat162float(dout[o + d]);
    float y = __bfloat162float(out[o + d]);
    if constexpr (kAffine) {
      y -= beta * s[d];
      ssum += go * s[d];
    }
    dsum += go * y;
  }
  dsum = warp_sum(dsum);
  if constexpr (kAffine) ssum = warp_sum(ssum);
  if (lane == 0) {
    drow[row] = dsum;  // row == (b*H + h)*T + i: the (B,H,T) layout of lse
    if constexpr (kAffine) sigma[row] = ssum;
  }
}

// grid H, block kSinkThreads. Thread t adds rows t, t + kSinkThreads, ... in order,
// then a fixed tree: the same bits on every run and every GPU.
__global__ void dsink_kernel(FlashParams p, const float* __restrict__ sinks, const float* __restrict__ lse,
                             const float* __restrict__ drow, float* __restrict__ dsinks) {
  __shared__ float part[kSinkThreads];
  const int64_t h = blockIdx.x;
  float acc = 0.f;
  for (int64_t k = threadIdx.x; k < p.B * p.T; k += kSinkThreads) {
    const int64_t r = (k / p.T) * p.lse_batch + h * p.lse_head + k % p.T;
    acc += __expf(sinks[h] - lse[r]) * drow[r];
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kSinkThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) part[threadIdx.x] += part[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) dsinks[h] -= part[0];
}

// ------------------------------------------------------------ dq pass

template <int D, int Br, int Bc>
struct DqLayout {
  static constexpr int kWarps = Br / kFrag;
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kLdh = Strides<D>::kHalf;
  static constexpr int kLds = (Bc > D ? Bc : D) + 4;
  static constexpr int kLdp = Bc + 8;
  static constexpr size_t kQ = 0;                                    // Q (Br x D)
  static constexpr size_t kDo = kQ + sizeof(bf16) * Br * kLdh;       // dO (Br x D)
  static constexpr size_t kK = kDo + sizeof(bf16) * Br * kLdh;       // K (Bc x D)
  static constexpr size_t kV = kK + sizeof(bf16) * Bc * kLdh;        // V (Bc x D)
  static constexpr size_t kS = kV + sizeof(bf16) * Bc * kLdh;        // S, then dq (Br x W)
  static constexpr size_t kDp = kS + sizeof(float) * Br * kLds;      // dPraw (Br x Bc)
  static constexpr size_t kDs = kDp + sizeof(float) * Br * kLds;     // dS bf16 (Br x Bc)
  static constexpr size_t kBytes = kDs + sizeof(bf16) * Br * kLdp;
  static_assert(Br % kFrag == 0 && Bc % kFrag == 0, "tile shape");
  static_assert(kDo % 32 == 0 && kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kDp % 32 == 0 &&
                    kDs % 32 == 0, "WMMA alignment");
};

template <int D, int Br, int Bc, typename Flags>
__global__ void __launch_bounds__(DqLayout<D, Br, Bc>::kThreads)
    dq_kernel(FlashParams p, const bf16* __restrict__ qkv, const bf16* __restrict__ dout,
              const float* __restrict__ lse, const bf16* __restrict__ alpha,
              const float* __restrict__ drow, const float* __restrict__ sigma,
              bf16* __restrict__ dqkv, bf16* __restrict__ dalpha) {
  using L = DqLayout<D, Br, Bc>;
  constexpr bool kAffine = Flags::kAffine;
  constexpr int kHalfD = D / 2, kHalfC = Bc / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* dOs = reinterpret_cast<bf16*>(smem + L::kDo);
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::kV);
  float* Ss = reinterpret_cast<float*>(smem + L::kS);
  float* dPs = reinterpret_cast<float*>(smem + L::kDp);
  bf16* dSs = reinterpret_cast<bf16*>(smem + L::kDs);

  const int qt = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / p.group;
  const int T = static_cast<int>(p.T);
  const int i0 = qt * Br;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int r_local = warp * kFrag + lane / 2, half = lane & 1;
  const int i = i0 + r_local;
  const bool row_ok = i < T;

  const bf16* kbase = qkv + b * p.qkv_batch + p.k_offset + g * p.D;
  const bf16* vbase = qkv + b * p.qkv_batch + p.v_offset + g * p.D;
  load_rows<D, Br>(Qs, qkv + b * p.qkv_batch + static_cast<int64_t>(i0) * p.qkv_token + h * p.D,
                   p.qkv_token, min(Br, T - i0));
  load_rows<D, Br>(dOs, dout + b * p.o_batch + static_cast<int64_t>(i0) * p.o_token + h * p.D,
                   p.o_token, min(Br, T - i0));
  const int64_t stat = b * p.lse_batch + h * p.lse_head + i;
  // Rows past T get lse = +inf, so their recomputed P is exactly 0.
  const float lse_i = row_ok ? lse[stat] : INFINITY;
  const float D_i = row_ok ? drow[stat] : 0.f;
  float a_i = 1.f;
  if constexpr (kAffine) {
    if (row_ok) a_i = __bfloat162float(alpha[b * p.alpha_batch + static_cast<int64_t>(i) * p.alpha_token + h]);
  }
  float rsum = 0.f;  // sum_j P_ij dPraw_ij = dO_i . (PV)_i   [affine]

  FragC dq[D / kFrag];
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n) wmma::fill_fragment(dq[n], 0.f);
  float* S_warp = Ss + warp * kFrag * L::kLds;
  float* dP_warp = dPs + warp * kFrag * L::kLds;
  bf16* dS_warp = dSs + warp * kFrag * L::kLdp;

  const int kend = min(T, i0 + Br);
  for (int j0 = 0; j0 < kend; j0 += Bc) {
    __syncthreads();
    load_rows<D, Bc>(Ks, kbase + static_cast<int64_t>(j0) * p.qkv_token, p.qkv_token, min(Bc, T - j0));
    load_rows<D, Bc>(Vs, vbase + static_cast<int64_t>(j0) * p.qkv_token, p.qkv_token, min(Bc, T - j0));
    __syncthreads();
#pragma unroll
    for (int n = 0; n < Bc; n += kFrag) {
      FragC c;
      wmma::fill_fragment(c, 0.f);
      mma_abt<D>(c, Qs + warp * kFrag * L::kLdh, L::kLdh, Ks + n * L::kLdh, L::kLdh);
      wmma::store_matrix_sync(S_warp + n, c, L::kLds, wmma::mem_row_major);
      wmma::fill_fragment(c, 0.f);
      mma_abt<D>(c, dOs + warp * kFrag * L::kLdh, L::kLdh, Vs + n * L::kLdh, L::kLdh);
      wmma::store_matrix_sync(dP_warp + n, c, L::kLds, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalfC; ++c) {
      const int col = half * kHalfC + c;
      const float x = S_warp[(lane / 2) * L::kLds + col] * p.scale;
      const float pij = (j0 + col <= i) ? __expf(x - lse_i) : 0.f;
      const float dpr = dP_warp[(lane / 2) * L::kLds + col];
      if constexpr (kAffine) rsum += pij * dpr;
      dS_warp[(lane / 2) * L::kLdp + col] = __float2bfloat16(pij * (a_i * dpr - D_i));
    }
    __syncwarp();
#pragma unroll
    for (int n = 0; n < D / kFrag; ++n) mma_ab<Bc>(dq[n], dS_warp, L::kLdp, Ks + n * kFrag, L::kLdh);
  }

  // dq: fragments -> scratch -> scaled bf16 rows.
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n)
    wmma::store_matrix_sync(S_warp + n * kFrag, dq[n], L::kLds, wmma::mem_row_major);
  __syncwarp();
  float v[kHalfD];
#pragma unroll
  for (int d = 0; d < kHalfD; ++d) v[d] = p.scale * S_warp[(lane / 2) * L::kLds + half * kHalfD + d];
  if (row_ok)
    store_bf16_row<kHalfD>(dqkv + b * p.qkv_batch + static_cast<int64_t>(i) * p.qkv_token + h * p.D + half * kHalfD, v);
  if constexpr (kAffine) {
    rsum += __shfl_xor_sync(0xffffffffu, rsum, 1);
    if (row_ok && half == 0)
      dalpha[b * p.alpha_batch + static_cast<int64_t>(i) * p.alpha_token + h] =
          __float2bfloat16(rsum - sigma[stat] / static_cast<float>(i + 1));
  }
}

// ------------------------------------------------------------ dk/dv pass

template <int D, int Br, int Bc>
struct DkvLayout {
  static constexpr int kWarps = Bc / kFrag;
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kLdh = Strides<D>::kHalf;
  static constexpr int kLds = (Br > D ? Br : D) + 4;
  static constexpr int kLdp = Br + 8;
  static constexpr size_t kK = 0;                                     // K (Bc x D)
  static constexpr size_t kV = kK + sizeof(bf16) * Bc * kLdh;         // V (Bc x D)
  static constexpr size_t kQ = kV + sizeof(bf16) * Bc * kLdh;         // Q (Br x D)
  static constexpr size_t kDo = kQ + sizeof(bf16) * Br * kLdh;        // dO (Br x D)
  static constexpr size_t kS = kDo + sizeof(bf16) * Br * kLdh;        // S^T, then dv/dk (Bc x W)
  static constexpr size_t kDp = kS + sizeof(float) * Bc * kLds;       // dPraw^T (Bc x Br)
  static constexpr size_t kP = kDp + sizeof(float) * Bc * kLds;       // (alpha P)^T bf16 (Bc x Br)
  static constexpr size_t kDs = kP + sizeof(bf16) * Bc * kLdp;        // dS^T bf16 (Bc x Br)
  static constexpr size_t kStat = kDs + sizeof(bf16) * Bc * kLdp;     // lse, D, alpha, beta (4 x Br)
  static constexpr size_t kRfull = kStat + sizeof(float) * 4 * Br;   // (D) [affine]
  static constexpr size_t kRpart = kRfull + sizeof(float) * D;        // (Bc x D) [affine]
  static constexpr size_t bytes(bool affine) { return affine ? kRpart + sizeof(float) * Bc * D : kRfull; }
  static_assert(Br == Bc, "the diagonal query tile of key tile kt is query tile kt");
  static_assert(kV % 32 == 0 && kQ % 32 == 0 && kDo % 32 == 0 && kS % 32 == 0 && kDp % 32 == 0 &&
                    kP % 32 == 0 && kDs % 32 == 0, "WMMA alignment");
};

template <int D, int Br, int Bc, typename Flags>
__global__ void __launch_bounds__(DkvLayout<D, Br, Bc>::kThreads)
    dkdv_kernel(FlashParams p, const bf16* __restrict__ qkv, const bf16* __restrict__ dout,
                const float* __restrict__ lse, const bf16* __restrict__ alpha,
                const float* __restrict__ alpha_ma, const float* __restrict__ drow,
                bf16* __restrict__ dqkv) {
  using L = DkvLayout<D, Br, Bc>;
  constexpr bool kAffine = Flags::kAffine;
  constexpr int kHalfD = D / 2, kHalfR = Br / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::kV);
  bf16* Qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* dOs = reinterpret_cast<bf16*>(smem + L::kDo);
  float* Ss = reinterpret_cast<float*>(smem + L::kS);
  float* dPs = reinterpret_cast<float*>(smem + L::kDp);
  bf16* Ps = reinterpret_cast<bf16*>(smem + L::kP);
  bf16* dSs = reinterpret_cast<bf16*>(smem + L::kDs);
  float* lse_s = reinterpret_cast<float*>(smem + L::kStat);
  float* D_s = lse_s + Br;
  float* a_s = D_s + Br;
  float* beta_s = a_s + Br;
  float* rfull = reinterpret_cast<float*>(smem + L::kRfull);
  float* rpart = reinterpret_cast<float*>(smem + L::kRpart);

  const int kt = static_cast<int>(blockIdx.x);
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const int T = static_cast<int>(p.T);
  const int j0 = kt * Bc;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int c_local = warp * kFrag + lane / 2, half = lane & 1;
  const int j = j0 + c_local;  // this lane's key row

  load_rows<D, Bc>(Ks, qkv + b * p.qkv_batch + static_cast<int64_t>(j0) * p.qkv_token + p.k_offset + g * p.D,
                   p.qkv_token, min(Bc, T - j0));
  load_rows<D, Bc>(Vs, qkv + b * p.qkv_batch + static_cast<int64_t>(j0) * p.qkv_token + p.v_offset + g * p.D,
                   p.qkv_token, min(Bc, T - j0));
  if constexpr (kAffine) {
    for (int d = threadIdx.x; d < D; d += L::kThreads) rfull[d] = 0.f;
    for (int k = threadIdx.x; k < Bc * D; k += L::kThreads) rpart[k] = 0.f;
  }

  FragC dk[D / kFrag], dv[D / kFrag];
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n) {
    wmma::fill_fragment(dk[n], 0.f);
    wmma::fill_fragment(dv[n], 0.f);
  }
  float* S_warp = Ss + warp * kFrag * L::kLds;
  float* dP_warp = dPs + warp * kFrag * L::kLds;
  bf16* P_warp = Ps + warp * kFrag * L::kLdp;
  bf16* dS_warp = dSs + warp * kFrag * L::kLdp;

  for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
    for (int i0 = j0; i0 < T; i0 += Br) {
      __syncthreads();  // previous Q/dO/statistics and scratch fully consumed
      const int rows = min(Br, T - i0);
      load_rows<D, Br>(Qs, qkv + b * p.qkv_batch + static_cast<int64_t>(i0) * p.qkv_token + h * p.D,
                       p.qkv_token, rows);
      load_rows<D, Br>(dOs, dout + b * p.o_batch + static_cast<int64_t>(i0) * p.o_token + h * p.D,
                       p.o_token, rows);
      for (int r = threadIdx.x; r < Br; r += L::kThreads) {
        const int i = i0 + r;
        const int64_t stat = b * p.lse_batch + h * p.lse_head + i;
        lse_s[r] = i < T ? lse[stat] : INFINITY;  // rows past T: P = 0
        D_s[r] = i < T ? drow[stat] : 0.f;
        float a = 1.f, beta = 0.f;
        if constexpr (kAffine) {
          if (i < T) {
            a = __bfloat162float(alpha[b * p.alpha_batch + static_cast<int64_t>(i) * p.alpha_token + h]);
            beta = (alpha_ma[h] - a) / static_cast<float>(i + 1);
          }
        }
        a_s[r] = a;
        beta_s[r] = beta;
      }
      __syncthreads();

      // S^T = K_w Q^T and dPraw^T = V_w dO^T for the warp's 16 key rows.
#pragma unroll
      for (int n = 0; n < Br; n += kFrag) {
        FragC c;
        wmma::fill_fragment(c, 0.f);
        mma_abt<D>(c, Ks + warp * kFrag * L::kLdh, L::kLdh, Qs + n * L::kLdh, L::kLdh);
        wmma::store_matrix_sync(S_warp + n, c, L::kLds, wmma::mem_row_major);
        wmma::fill_fragment(c, 0.f);
        mma_abt<D>(c, Vs + warp * kFrag * L::kLdh, L::kLdh, dOs + n * L::kLdh, L::kLdh);
        wmma::store_matrix_sync(dP_warp + n, c, L::kLds, wmma::mem_row_major);
      }
      __syncwarp();
#pragma unroll
      for (int c = 0; c < kHalfR; ++c) {
        const int r = half * kHalfR + c;
        const float x = S_warp[(lane / 2) * L::kLds + r] * p.scale;
        const float pij = (j <= i0 + r) ? __expf(x - lse_s[r]) : 0.f;
        const float dpr = dP_warp[(lane / 2) * L::kLds + r];
        P_warp[(lane / 2) * L::kLdp + r] = __float2bfloat16(pij * a_s[r]);
        dS_warp[(lane / 2) * L::kLdp + r] = __float2bfloat16(pij * (a_s[r] * dpr - D_s[r]));
      }
      __syncwarp();
#pragma unroll
      for (int n = 0; n < D / kFrag; ++n) {
        mma_ab<Br>(dv[n], P_warp, L::kLdp, dOs + n * kFrag, L::kLdh);
        mma_ab<Br>(dk[n], dS_warp, L::kLdp, Qs + n * kFrag, L::kLdh);
      }

      if constexpr (kAffine) {
        // sum_{i >= j} beta_i dO_i: query tiles past the diagonal add to every key row
        // alike; the diagonal tile (i0 == j0) adds a reverse scan per key row.
        for (int d = threadIdx.x; d < D; d += L::kThreads) {
          if (i0 > j0) {
            float s = 0.f;
            for (int r = 0; r < Br; ++r) s += beta_s[r] * __bfloat162float(dOs[r * L::kLdh + d]);
            rfull[d] += s;
          } else {
            float run = 0.f;
            for (int r = Br - 1; r >= 0; --r) {
              run += beta_s[r] * __bfloat162float(dOs[r * L::kLdh + d]);
              rpart[r * D + d] += run;
            }
          }
        }
      }
    }
  }

  // Epilogue: fragments -> scratch -> bf16 rows of dqkv.
  __syncthreads();  // rfull/rpart complete; scratch free
  const bool key_ok = j < T;
  bf16* dk_row = dqkv + b * p.qkv_batch + static_cast<int64_t>(j) * p.qkv_token + p.k_offset + g * p.D + half * kHalfD;
  bf16* dv_row = dqkv + b * p.qkv_batch + static_cast<int64_t>(j) * p.qkv_token + p.v_offset + g * p.D + half * kHalfD;
  float v[kHalfD];
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n)
    wmma::store_matrix_sync(S_warp + n * kFrag, dv[n], L::kLds, wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int d = 0; d < kHalfD; ++d) {
    const int col = half * kHalfD + d;
    v[d] = S_warp[(lane / 2) * L::kLds + col];
    if constexpr (kAffine) v[d] += rfull[col] + rpart[c_local * D + col];
  }
  if (key_ok) store_bf16_row<kHalfD>(dv_row, v);
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n)
    wmma::store_matrix_sync(S_warp + n * kFrag, dk[n], L::kLds, wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int d = 0; d < kHalfD; ++d) v[d] = p.scale * S_warp[(lane / 2) * L::kLds + half * kHalfD + d];
  if (key_ok) store_bf16_row<kHalfD>(dk_row, v);
}

// ------------------------------------------------------------ launch

template <int D, typename Flags>
void launch_backward(const AttentionParams& a, unsigned char* ws, const Workspace& layout,
                     cudaStream_t stream) {
  constexpr bool kSink = Flags::kSink, kAffine = Flags::kAffine;
  const FlashParams& p = a;
  const bf16 *qkv = a.qkv, *out = a.out, *dout = a.dout, *alpha = a.alpha;
  bf16 *dqkv = a.dqkv, *dalpha = a.dalpha;
  float* drow = reinterpret_cast<float*>(ws + layout.drow);
  float* sigma = kAffine ? reinterpret_cast<float*>(ws + layout.sigma) : nullptr;
  float* prefix = kAffine ? reinterpret_cast<float*>(ws + layout.prefix) : nullptr;

  if constexpr (kAffine) {
    prefix_kernel<D><<<static_cast<unsigned>(p.B * p.Hkv), D, 0, stream>>>(p, qkv, prefix);
    CUDA_CHECK_LAUNCH();
  }
  const int64_t rows = p.B * p.H * p.T;
  rowstat_kernel<D, kAffine><<<static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps),
                               kRowWarps * kWarp, 0, stream>>>(p, out, dout, alpha, a.alpha_ma,
                                                               prefix, drow, sigma);
  CUDA_CHECK_LAUNCH();
  if constexpr (kSink) {
    if (a.dsinks != nullptr) {
      dsink_kernel<<<static_cast<unsigned>(p.H), kSinkThreads, 0, stream>>>(p, a.sinks, a.lse, drow, a.dsinks);
      CUDA_CHECK_LAUNCH();
    }
  }

  {
    constexpr kdtrain::flash::FlashTiles tiles{64, 64, 4};  // the two-pass kernel's own tiles
    using L = DqLayout<D, tiles.Br, tiles.Bc>;
    static_assert(L::kWarps == tiles.warps, "flash_tiles and the dq kernel disagree on warps");
    auto kernel = dq_kernel<D, tiles.Br, tiles.Bc, Flags>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(L::kBytes)));
    const dim3 grid(static_cast<unsigned>((p.T + tiles.Br - 1) / tiles.Br), static_cast<unsigned>(p.H),
                    static_cast<unsigned>(p.B));
    kernel<<<grid, L::kThreads, L::kBytes, stream>>>(p, qkv, dout, a.lse, alpha, drow, sigma, dqkv, dalpha);
    CUDA_CHECK_LAUNCH();
  }
  {
    constexpr kdtrain::flash::FlashTiles tiles{64, 64, 4};
    using L = DkvLayout<D, tiles.Br, tiles.Bc>;
    static_assert(L::kWarps == tiles.warps, "flash_tiles and the dk/dv kernel disagree on warps");
    auto kernel = dkdv_kernel<D, tiles.Br, tiles.Bc, Flags>;
    constexpr size_t bytes = L::bytes(kAffine);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)));
    const dim3 grid(static_cast<unsigned>((p.T + tiles.Bc - 1) / tiles.Bc), static_cast<unsigned>(p.Hkv),
                    static_cast<unsigned>(p.B));
    kernel<<<grid, L::kThreads, bytes, stream>>>(p, qkv, dout, a.lse, alpha, a.alpha_ma, drow, dqkv);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

size_t flash_attention_backward_workspace_bytes(const AttentionParams& p) {
  return Workspace(p).bytes;
}

void flash_attention_backward(const AttentionParams& p, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  check_flash_params(p, "flash attention backward");
  if (p.B == 0 || p.T == 0 || p.H == 0) return;
  const Workspace layout(p);
  if (workspace == nullptr || workspace_bytes < layout.bytes)
    fail("flash attention backward: workspace of ", workspace_bytes, " bytes, ", layout.bytes, " needed");
  kdtrain::flash::flash_dispatch(p.sink, p.affine, [&](auto flags) {
    using Flags = decltype(flags);
    auto* ws = static_cast<unsigned char*>(workspace);
    if (p.D == 64)
      launch_backward<64, Flags>(p, ws, layout, stream);
    else
      launch_backward<128, Flags>(p, ws, layout, stream);
  });
}

}  // namespace kdtrain::cuda
