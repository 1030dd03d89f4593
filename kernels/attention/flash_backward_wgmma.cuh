// The wgmma (sm_90a) steps of the attention backward's main kernel (bwd_main with kWgmma,
// flash_backward_kernel.cuh): the products a warpgroup issues on operands it reads from
// shared memory through descriptors, in place of the per-warp ldmatrix + mma.sync of
// flash_backward_steps.cuh. Warpgroup wg (warps 4wg..4wg+3) owns key rows 64wg..64wg+63,
// the same rows as its four warps own there (16 each), and the wgmma accumulator of a
// warp's 16 rows is the mma.sync C fragment (kernels/tc/wgmma_fragments.h: register
// 4n + e of thread 4g + q is row g + 8(e / 2), column 8n + 2q + e % 2), so the steps
// between (dS^T, the dQ staging, the epilogue) are shared unchanged. Q, dO, K and V are
// tc::WgmmaTile's (load_tile with kWg), fenced for the async proxy before the barrier
// that precedes their first product; at D 64 the warpgroup's K and V rows are also loaded
// once per work item into registers, the A operand of every S^T / dP^T (KvFragments).
// Algorithm and resources: docs/flash_attention_backward.md.
#pragma once
#include <cstdint>

#include "kernels/tc/primitives.cuh"
#include "kernels/tc/wgmma.cuh"

namespace kdtrain::flash_bwd {

// Whether S^T / dP^T take A (the warpgroup's 64 key rows of K / V, constant for the work
// item) from registers, loaded once per work item, instead of re-reading it from shared
// memory by descriptor for each query sub-tile: at D 64 only, where its 2 x D/16 x 4 = 32
// registers fit; at D 128 the 64 it would take spill (docs/flash_attention_backward.md).
template <int D>
constexpr bool kKvInRegisters = D == 64;

// The A fragments of K_wg and V_wg for S^T / dP^T when kRegs: k-step kb of warp w's 16 key
// rows 16w.. is the mma.m16n8k16 A fragment (kernels/tc/wgmma_fragments.h), read by one
// ldmatrix.x4 from the WgmmaTile (lanes 0..15: rows 16w + l, columns 16kb..; lanes
// 16..31: the same rows, columns 16kb + 8..). Loaded after K / V have landed and the
// block barrier after them, never written again: they stay the operand of every RS
// product of the work item. Empty when not kRegs (A read by descriptor).
template <int D, int Bc, bool kRegs>
struct KvFragments {
  TC_DEVICE void load(const uint16_t*, const uint16_t*, int, int) {}
};

template <int D, int Bc>
struct KvFragments<D, Bc, true> {
  uint32_t k[D / 16][4], v[D / 16][4];
  TC_DEVICE void load(const uint16_t* Ks, const uint16_t* Vs, int warp, int lane) {
    using KT = tc::WgmmaTile<Bc, D>;
    TC_UNROLL
    for (int kb = 0; kb < D / 16; ++kb) {
      const int at = KT::offset(16 * warp + lane % 16, 16 * kb + 8 * (lane / 16));
      tc::ldmatrix<4>(k[kb], Ks + at);
      tc::ldmatrix<4>(v[kb], Vs + at);
    }
  }
};

// S^T = K_wg Q^T and dP^T = V_wg dO^T of the query sub-tile at column q0 (kNq 8-column
// tiles, wgmma N = 8 kNq): A = the warpgroup's 64 key rows of K / V (from kv's registers
// when it holds them, else from shared memory), B = the sub-tile's query rows of Q / dO,
// all K-major (K = D). Issued as one commit group into s / p (the caller retires it
// before st_dp_collect reads them).
template <int D, int Bc, int Br, int kNq, bool kRegs>
TC_DEVICE void st_dp_issue(float (&s)[4 * kNq], float (&p)[4 * kNq], const KvFragments<D, Bc, kRegs>& kv,
                           const uint16_t* Ks, const uint16_t* Vs, const uint16_t* Qs, const uint16_t* dOs, int warp,
                           int q0) {
  using KT = tc::WgmmaTile<Bc, D>;
  using QT = tc::WgmmaTile<Br, D>;
  constexpr int N = 8 * kNq;
  const int row0 = 64 * (warp / 4);
  const uint32_t k = tc::shared_address(Ks), v = tc::shared_address(Vs);
  const uint32_t q = tc::shared_address(Qs), o = tc::shared_address(dOs);
  tc::wgmma_fence();
  TC_UNROLL
  for (int kb = 0; kb < D / 16; ++kb) {
    if constexpr (kRegs) tc::wgmma_rs<N, false>(s, kv.k[kb], QT::desc_k_major(q, q0, kb), kb > 0);
    else tc::wgmma_ss<N, false, false>(s, KT::desc_k_major(k, row0, kb), QT::desc_k_major(q, q0, kb), kb > 0);
  }
  TC_UNROLL
  for (int kb = 0; kb < D / 16; ++kb) {
    if constexpr (kRegs) tc::wgmma_rs<N, false>(p, kv.v[kb], QT::desc_k_major(o, q0, kb), kb > 0);
    else tc::wgmma_ss<N, false, false>(p, KT::desc_k_major(v, row0, kb), QT::desc_k_major(o, q0, kb), kb > 0);
  }
  tc::wgmma_commit();
}

// The retired S^T / dP^T accumulators in the mma.sync C layout: sacc[n][e] / pacc[n][e].
template <int kNq>
TC_DEVICE void st_dp_collect(float (&sacc)[kNq][4], float (&pacc)[kNq][4], float (&s)[4 * kNq], float (&p)[4 * kNq]) {
  tc::wgmma_fence_operand(s);
  tc::wgmma_fence_operand(p);
  TC_UNROLL
  for (int n = 0; n < kNq; ++n)
    TC_UNROLL
    for (int e = 0; e < 4; ++e) {
      sacc[n][e] = s[4 * n + e];
      pacc[n][e] = p[4 * n + e];
    }
}

// st_dp_issue, retired at once, then st_dp_collect.
template <int D, int Bc, int Br, int kNq, bool kRegs>
TC_DEVICE void st_dp_wgmma(float (&sacc)[kNq][4], float (&pacc)[kNq][4], const KvFragments<D, Bc, kRegs>& kv,
                           const uint16_t* Ks, const uint16_t* Vs, const uint16_t* Qs, const uint16_t* dOs, int warp,
                           int q0) {
  float s[4 * kNq], p[4 * kNq];
  st_dp_issue<D, Bc, Br, kNq>(s, p, kv, Ks, Vs, Qs, dOs, warp, q0);
  tc::wgmma_wait<0>();
  st_dp_collect<kNq>(sacc, pacc, s, p);
}

// dV_wg += (alpha P)^T dO and dK_wg += dS^T Q over the sub-tile's 8 kNq queries: A from
// registers (pa, da: the bf16 A fragments sub_tile_gradients packed, k-step kk = queries
// q0 + 16kk..), B = dO / Q MN-major (K = queries, N = D), read once per warpgroup. The
// accumulators are the warps' dV / dK registers in the C layout (D/8 tiles of 4 = the
// wgmma's D/2 registers). Issued as one commit group: pa / da stay unchanged, and dV / dK
// unread, until a wait retires it (the next sub-tile's products may chain onto dV / dK).
template <int D, int Br, int kNq>
TC_DEVICE void dv_dk_issue(float (&dv)[D / 8][4], float (&dk)[D / 8][4], const uint32_t (&pa)[kNq / 2][4],
                           const uint32_t (&da)[kNq / 2][4], const uint16_t* Qs, const uint16_t* dOs, int q0) {
  using QT = tc::WgmmaTile<Br, D>;
  auto& dvf = reinterpret_cast<float(&)[D / 2]>(dv);
  auto& dkf = reinterpret_cast<float(&)[D / 2]>(dk);
  const uint32_t q = tc::shared_address(Qs), o = tc::shared_address(dOs);
  tc::wgmma_fence_operand(dvf);
  tc::wgmma_fence_operand(dkf);
  tc::wgmma_fence();
  TC_UNROLL
  for (int kk = 0; kk < kNq / 2; ++kk) {
    tc::wgmma_rs<D, true>(dvf, pa[kk], QT::desc_mn_major(o, q0 / 16 + kk), true);
    tc::wgmma_rs<D, true>(dkf, da[kk], QT::desc_mn_major(q, q0 / 16 + kk), true);
  }
  tc::wgmma_commit();
}

// dV / dK readable again once the dv_dk_issue groups on them have retired.
template <int D>
TC_DEVICE void dv_dk_retired(float (&dv)[D / 8][4], float (&dk)[D / 8][4]) {
  tc::wgmma_fence_operand(reinterpret_cast<float(&)[D / 2]>(dv));
  tc::wgmma_fence_operand(reinterpret_cast<float(&)[D / 2]>(dk));
}

// dv_dk_issue, retired at once.
template <int D, int Br, int kNq>
TC_DEVICE void dv_dk_wgmma(float (&dv)[D / 8][4], float (&dk)[D / 8][4], const uint32_t (&pa)[kNq / 2][4],
                           const uint32_t (&da)[kNq / 2][4], const uint16_t* Qs, const uint16_t* dOs, int q0) {
  dv_dk_issue<D, Br, kNq>(dv, dk, pa, da, Qs, dOs, q0);
  tc::wgmma_wait<0>();
  dv_dk_retired<D>(dv, dk);
}

// The warp's dQ slice = dS K over the Bc keys, from zero, for the ordered dq hand-over
// (stage_dq): warpgroup wg computes all Br = 64 query rows x columns wg D/2.. (wgmma N =
// D/2), A = dS from the dS^T tile (Bc key rows x 64 queries, a WgmmaTile: MN-major, K =
// keys), B = K MN-major (the warpgroup's half of its columns: a 64-column block at D 128,
// 64 bytes into each 128-byte row at D 64). Warp w' of the warpgroup gets query rows
// 16w'.. in the C layout, the mma.sync slice of warp 4wg + w' (dq_m = w', dq_n = wg).
// dS^T was written by plain stores: every writer fenced it for the async proxy before the
// barrier that precedes this. Its wait_group 0 retires every group of the warp, the
// sub-tiles' dV / dK still in flight included.
template <int D, int Bc>
TC_DEVICE void dq_wgmma(float (&qacc)[D / 16][4], const uint16_t* dSs, const uint16_t* Ks, int warp) {
  using KT = tc::WgmmaTile<Bc, D>;
  using ST = tc::WgmmaTile<Bc, 64>;
  constexpr int N = D / 2;
  const int wg = warp / 4;
  const uint32_t ds = tc::shared_address(dSs);
  const uint32_t k = tc::shared_address(Ks) + (D == 128 ? wg * KT::kBlockBytes : wg * N * 2u);
  float q[N / 2];
  tc::wgmma_fence();
  TC_UNROLL
  for (int kb = 0; kb < Bc / 16; ++kb)
    tc::wgmma_ss<N, true, true>(q, ST::desc_mn_major(ds, kb), KT::desc_mn_major(k, kb), kb > 0);
  tc::wgmma_commit();
  tc::wgmma_wait<0>();
  tc::wgmma_fence_operand(q);
  TC_UNROLL
  for (int n = 0; n < D / 16; ++n)
    TC_UNROLL
    for (int e = 0; e < 4; ++e) qacc[n][e] = q[4 * n + e];
}

}  // namespace kdtrain::flash_bwd
