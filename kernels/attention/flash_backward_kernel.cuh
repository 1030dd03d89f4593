// The main kernel of the fused attention backward: one block per work item (b, kv head,
// key tile of Bc = 128 rows), 8 warps, warp w owning key rows 16w..16w+15. Written
// against primitives.cuh / sync.cuh, so nvcc builds it for the GPU
// (flash_backward.cu) and the host runs the same source in the SIMT emulator
// (tests/test_flash_backward_sim.cpp). Order and deadlock argument:
// flash_backward_schedule.h; algorithm and resource arithmetic: docs/flash_attention.md.
//
// Per step (query tile qt of Br = 64 rows, query head h), with Q, dO and the row
// statistics (lse2, D, alpha) of the step double-buffered by cp.async:
//   S^T  = K_w Q^T, dP^T = V_w dO^T          mma, A = K_w / V_w (ldmatrix), B = Q / dO
//   P^T  = 2^(S^T scale log2e - lse2)         masked (j > i -> 0) only on diagonal pairs
//   dS^T = P^T (alpha dP^T - D)               registers; affine: rsum_i += P dPraw
//   dV_w += (alpha P)^T_w dO, dK_w += dS^T_w Q   A = the C fragments re-packed as bf16
//   dS^T -> shared memory (bf16); dQ slice = dS K   warp (m, n): rows 16m.., cols n*D/2..
//   dQ slice -> the ordered fp32 accumulator, or (last key tile) scale * sum -> bf16 dq:
//   the wait and the old slice's loads precede the dQ products, the release follows the
//   next block barrier (docs/flash_attention.md, "dq accumulation off the critical path").
// The block keeps dK_w, dV_w (2 x 16 x D fp32) in registers and writes them once:
// dk = scale dK, dv = dV + R (affine's reverse prefix sum of beta dO).
#pragma once
#include <cstdint>

#include "kernels/attention/flash_backward_args.h"
#include "kernels/tc/named_barrier.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"

namespace kdtrain::flash_bwd {

using flash::BwdArgs;
using flash::kBwdTiles;

constexpr float kLog2e = 1.4426950408889634f;

// Loops kept rolled on the GPU to bound register pressure (their bodies index register
// arrays only with unrolled inner indices).
#if defined(__CUDACC__)
#define BWD_ROLLED _Pragma("unroll 1")
#else
#define BWD_ROLLED
#endif

// Shared-memory carve-up of the main kernel (bytes). bf16 tiles are swizzled rows of D
// (Q, dO, K, V) or of Br = 64 (dS^T) elements.
template <int D, bool kAffine>
struct MainLayout {
  static constexpr int Br = kBwdTiles.Br, Bc = kBwdTiles.Bc, kWarps = kBwdTiles.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStats = kAffine ? 3 : 2;  // lse2, D (, alpha) per query row
  static_assert(Br == 64, "dS^T rows are swizzled 64-element rows; the dQ warp grid is 4 x 2");
  static_assert(Bc == 16 * kWarps && kWarps == 8, "warp w owns key rows 16w..16w+15");
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr size_t kTileQ = sizeof(uint16_t) * Br * D;
  static constexpr size_t kK = 0;
  static constexpr size_t kV = kK + sizeof(uint16_t) * Bc * D;
  static constexpr size_t kQ = kV + sizeof(uint16_t) * Bc * D;   // 2 stages
  static constexpr size_t kDo = kQ + 2 * kTileQ;                  // 2 stages
  static constexpr size_t kDs = kDo + 2 * kTileQ;                 // dS^T (Bc x Br)
  static constexpr size_t kStat = kDs + sizeof(uint16_t) * Bc * Br;  // 2 stages x kStats x Br
  static constexpr size_t kRs = kStat + 2 * sizeof(float) * kStats * Br;  // kWarps x Br [affine]
  static constexpr size_t kTicket = kRs + (kAffine ? sizeof(float) * kWarps * Br : 0);
  static constexpr size_t kBytes = kTicket + 16;
};

// Copies rows [0, valid) of a bf16 matrix (row stride `stride` elements) into a swizzled
// ROWS x D shared tile; rows past `valid` are zero-filled (their source address is row 0,
// which always exists).
template <int D, int ROWS, int kThreads>
TC_DEVICE void load_tile(uint16_t* dst, const uint16_t* src, int64_t stride, int valid) {
  constexpr int kChunks = D / 8;
  static_assert(ROWS * kChunks % kThreads == 0, "every thread copies the same number of chunks");
  const int tid = static_cast<int>(tc::thread_idx().x);
  TC_UNROLL
  for (int k = 0; k < ROWS * kChunks / kThreads; ++k) {  // a compile-time trip count: unrolled
    const int idx = tid + k * kThreads;
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool ok = r < valid;
    tc::cp_async_16(dst + tc::Swizzle<D>::offset(r, c), src + (ok ? r : 0) * stride + c, ok);
  }
}

// Q, dO and the statistics of step s into stage `stage`.
template <int D, bool kAffine>
TC_DEVICE void load_step(const BwdArgs& a, unsigned char* smem, int64_t b, int64_t g, int s, int stage) {
  using L = MainLayout<D, kAffine>;
  const flash::BwdStep st = a.sched.step(s);
  const int64_t h = g * a.sched.group + st.head_in_group;
  const int64_t i0 = static_cast<int64_t>(st.qt) * L::Br;
  const int valid = static_cast<int>(a.p.T - i0 < L::Br ? a.p.T - i0 : L::Br);
  auto* Qs = reinterpret_cast<uint16_t*>(smem + L::kQ + stage * L::kTileQ);
  auto* dOs = reinterpret_cast<uint16_t*>(smem + L::kDo + stage * L::kTileQ);
  load_tile<D, L::Br, L::kThreads>(Qs, a.p.qkv + b * a.p.qkv_batch + i0 * a.p.qkv_token + h * D, a.p.qkv_token, valid);
  load_tile<D, L::Br, L::kThreads>(dOs, a.p.dout + b * a.p.o_batch + i0 * a.p.o_token + h * D, a.p.o_token, valid);
  // Statistics: kStats arrays of Br floats, padded rows included (16 chunks each).
  const int tid = static_cast<int>(tc::thread_idx().x);
  constexpr int kChunks = L::Br / 4;
  if (tid < L::kStats * kChunks) {
    const int which = tid / kChunks, c = (tid % kChunks) * 4;
    const float* src = which == 0 ? a.lse2 : which == 1 ? a.drow : a.alpha_f;
    auto* dst = reinterpret_cast<float*>(smem + L::kStat) + (stage * L::kStats + which) * L::Br + c;
    tc::cp_async_16(dst, src + (b * a.p.H + h) * a.T_pad + i0 + c);
  }
}

// Column sums of a warp's 16-row C fragments: v[2n + e] (N values per lane) is column
// 8n + 2t + e, t = lane % 4, of rows lane / 4 and lane / 4 + 8 already added. Three
// halving exchanges (lane masks 16, 8, 4) leave each lane N / 8 sums of the 8 lanes
// sharing t, which it writes to out[column]: 7N/8 shuffles instead of 3N.
template <int kLen, int kMask>
TC_DEVICE void halve_columns(float (&v)[16], int lane) {
  const bool hi = (lane & kMask) != 0;
  TC_UNROLL
  for (int k = 0; k < kLen / 2; ++k) {
    const float mine = hi ? v[k + kLen / 2] : v[k], other = hi ? v[k] : v[k + kLen / 2];
    v[k] = mine + tc::shfl_xor(other, kMask);
  }
}

template <int N>
TC_DEVICE void column_sums(float (&v)[16], float* out) {
  static_assert(N == 8 || N == 16, "one or two 8-column tiles per lane pair");
  const int lane = tc::lane_id();
  halve_columns<N, 16>(v, lane);
  halve_columns<N / 2, 8>(v, lane);
  halve_columns<N / 4, 4>(v, lane);
  const int k0 = ((lane >> 4) & 1) * (N / 2) + ((lane >> 3) & 1) * (N / 4) + ((lane >> 2) & 1) * (N / 8);
  TC_UNROLL
  for (int r = 0; r < N / 8; ++r) {
    const int k = k0 + r;
    out[8 * (k / 2) + 2 * (lane % 4) + k % 2] = v[r];
  }
}

// Per-lane part of the swizzled shared-memory addresses of one ldmatrix access pattern:
// lane l reads row R0 + row_lane(l), 16-byte chunk C0 + chunk_lane(l), with R0 a multiple
// of 8, C0 known at compile time (unrolled loops) and bit-disjoint from chunk_lane.
// Swizzle<W> keeps chunk c of row r at c ^ (r % 8), so the chunk read is
// (C0 & ~7) + ((C0 & 7) ^ z), z = chunk_lane ^ (row_lane % 8) < 8. Two registers per
// pattern, and one LOP3 + one IADD3 per address, instead of one hoisted register per
// address of the unrolled loops.
template <int W>
struct LdsmLane {
  int row_off;  // row_lane * W
  int z8;       // z * 8
  TC_DEVICE LdsmLane(int row_lane, int chunk_lane)
      : row_off(row_lane * W), z8((chunk_lane ^ (row_lane & 7)) << 3) {}
  // Element offset of (row R0 + row_lane, chunk C0 + chunk_lane).
  TC_DEVICE int at(int R0, int C0) const {
    return R0 * W + ((C0 & ~7) << 3) + row_off + (((C0 & 7) << 3) ^ z8);
  }
};

// dq = scale * sum (bf16, rows < T only) of warp `warp`'s slice of query tile (b, h, i0),
// and affine's dalpha = rsum - sigma / N_i (affine_bias_count): by the last contributor, or by bwd_finalize.
template <int D, bool kAffine>
TC_DEVICE void store_dq(const BwdArgs& a, const float (&qacc)[D / 16][4], float rsum, int64_t b, int64_t h,
                        int64_t i0, int warp, int lane) {
  const flash::AttentionParams& p = a.p;
  const int dq_m = warp % 4, dq_n = warp / 4, gq = lane / 4, tq = lane % 4;
  TC_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i0 + dq_m * 16 + gq + half * 8;
    if (i >= p.T) continue;
    uint16_t* dst = p.dqkv + b * p.qkv_batch + i * p.qkv_token + h * D + dq_n * (D / 2) + 2 * tq;
    TC_UNROLL
    for (int n = 0; n < D / 16; ++n)
      *reinterpret_cast<uint32_t*>(dst + n * 8) =
          tc::pack_bf16x2(p.scale * qacc[n][2 * half], p.scale * qacc[n][2 * half + 1]);
  }
  if constexpr (kAffine) {
    const int64_t i = i0 + dq_m * 16 + lane;
    const int64_t row_stat = (b * p.H + h) * a.T_pad + i;
    if (dq_n == 0 && lane < 16 && i < p.T)
      p.dalpha[b * p.alpha_batch + i * p.alpha_token + h] =
          tc::float_to_bf16(rsum - a.sigma[row_stat] / flash::affine_bias_count(p, i));
  }
}

// The timing build's last kernel (kBwdAtomicDq): block = query tile (b, h, qt) in the
// accumulator's order, each warp converting its slice as the last contributor would.
template <int D, bool kAffine>
TC_DEVICE void bwd_finalize(const BwdArgs& a) {
  const int64_t tile = tc::block_idx().x, n_qt = a.sched.n_qt;
  const int64_t bh = tile / n_qt, b = bh / a.p.H, h = bh % a.p.H, i0 = (tile % n_qt) * kBwdTiles.Br;
  const int warp = tc::warp_id(), lane = tc::lane_id();
  const float* slice = a.dq_acc + tile * (kBwdTiles.Br * D) + warp * (16 * D / 2);
  float qacc[D / 16][4];
  TC_UNROLL
  for (int n = 0; n < D / 16; ++n) tc::load_cg4(qacc[n], slice + (n * 32 + lane) * 4);
  float rsum = 0.f;
  if constexpr (kAffine) {
    if (warp / 4 == 0 && lane < 16) rsum = tc::load_cg(a.rs_acc + bh * a.T_pad + i0 + (warp % 4) * 16 + lane);
  }
  store_dq<D, kAffine>(a, qacc, rsum, b, h, i0, warp, lane);
}

template <int D, bool kAffine, bool kAtomic = flash::kBwdAtomicDq>
TC_DEVICE void bwd_main(const BwdArgs& a, unsigned char* smem) {
  using L = MainLayout<D, kAffine>;
  using SwzD = tc::Swizzle<D>;
  using Swz64 = tc::Swizzle<64>;
  constexpr int Br = L::Br, Bc = L::Bc, kNd = D / 8, kNdq = D / 16;
  constexpr int kSub = 2, kSubQ = Br / kSub, kNq = kSubQ / 8;  // query sub-tiles
  const flash::AttentionParams& p = a.p;
  const flash::BwdSchedule& sc = a.sched;
  const int tid = static_cast<int>(tc::thread_idx().x), warp = tc::warp_id(), lane = tc::lane_id();
  const int gq = lane / 4, tq = lane % 4;  // fragment row group and thread-in-group

  auto* Ks = reinterpret_cast<uint16_t*>(smem + L::kK);
  auto* Vs = reinterpret_cast<uint16_t*>(smem + L::kV);
  auto* dSs = reinterpret_cast<uint16_t*>(smem + L::kDs);
  auto* rs_part = reinterpret_cast<float*>(smem + L::kRs);
  auto* ticket = reinterpret_cast<int*>(smem + L::kTicket);

  if (tid == 0) *ticket = tc::atomic_add(a.ints + flash::BwdWorkspace::kTicket, 1);
  tc::sync_block();
  const flash::BwdItem item = sc.item(*ticket, p.Hkv);
  const int64_t b = item.b, g = item.g;
  const int kt = item.kt;
  const int64_t j0 = static_cast<int64_t>(kt) * Bc;
  const int key_rows = static_cast<int>(p.T - j0 < Bc ? p.T - j0 : Bc);
  const int steps = sc.steps(kt);

  load_tile<D, Bc, L::kThreads>(Ks, p.qkv + b * p.qkv_batch + j0 * p.qkv_token + p.k_offset + g * D, p.qkv_token, key_rows);
  load_tile<D, Bc, L::kThreads>(Vs, p.qkv + b * p.qkv_batch + j0 * p.qkv_token + p.v_offset + g * D, p.qkv_token, key_rows);
  load_step<D, kAffine>(a, smem, b, g, 0, 0);
  tc::cp_async_commit();

  float dk[kNd][4], dv[kNd][4];
  TC_UNROLL
  for (int n = 0; n < kNd; ++n)
    TC_UNROLL
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;

  const float scale_log2 = p.scale * kLog2e;
  const int key_r0 = warp * 16 + gq;  // this lane's key rows in the tile: key_r0, key_r0 + 8
  const int dq_m = warp % 4, dq_n = warp / 4;  // dQ slice: rows 16 dq_m.., cols dq_n * D/2..
  // ldmatrix address patterns (LdsmLane): A of K_w / V_w; B of Q / dO (K-dim = D);
  // B transposed of dO / Q (K-dim = queries) and of K (K-dim = keys; the warp's D half
  // folds into the chunk part for D = 64, into the base for D = 128); A transposed of dS.
  const LdsmLane<D> lane_a(lane % 16, lane / 16);
  const LdsmLane<D> lane_b(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
  const LdsmLane<D> lane_t(lane % 8 + ((lane / 8) % 2) * 8, lane / 16);
  constexpr int kHalfChunks = D / 16;  // 16-byte chunks in D/2 columns
  const LdsmLane<D> lane_k(lane % 8 + ((lane / 8) % 2) * 8, lane / 16 + ((dq_n * kHalfChunks) & 7));
  const LdsmLane<64> lane_s(lane % 8 + (lane / 16) * 8, (lane / 8) % 2 + 2 * dq_m);
  const uint16_t* Kw = Ks + warp * 16 * D;  // the warp's 16 key rows
  const uint16_t* Vw = Vs + warp * 16 * D;
  const uint16_t* Kq = Ks + ((dq_n * kHalfChunks) & ~7) * 8;

  // The previous step's dq release, made after the next block barrier: the barrier orders
  // every lane's partial-dq stores before lane 0's st.release (PTX causality order), and
  // the stores drain while the next step starts instead of on the critical path.
  int* pending_sem = nullptr;
  int pending_value = 0;
  for (int s = 0; s < steps; ++s) {
    const int stage = s & 1;
    const flash::BwdStep st = sc.step(s);
    const int64_t h = g * sc.group + st.head_in_group;
    const int64_t i0 = static_cast<int64_t>(st.qt) * Br;
    // Stage `stage` has landed, and every warp is done with the previous step (dS^T, K).
    tc::cp_async_wait<0>();
    tc::sync_block();
    if (pending_sem != nullptr) {
      if (lane == 0) tc::store_release(pending_sem, pending_value);
      pending_sem = nullptr;
    }
    if (s + 1 < steps) load_step<D, kAffine>(a, smem, b, g, s + 1, stage ^ 1);
    tc::cp_async_commit();

    const auto* Qs = reinterpret_cast<const uint16_t*>(smem + L::kQ + stage * L::kTileQ);
    const auto* dOs = reinterpret_cast<const uint16_t*>(smem + L::kDo + stage * L::kTileQ);
    const auto* stat = reinterpret_cast<const float*>(smem + L::kStat) + stage * L::kStats * Br;

    // Per query sub-tile of kSubQ = 32 columns (so S^T and dP^T of only 32 queries are live
    // next to dK and dV: zero spills at D = 128, at the price of reading the warp's K / V
    // fragments twice per step): S^T, dP^T; P^T and dS^T packed as the bf16 A operands of
    // dV += (alpha P)^T dO and dK += dS^T Q; dS^T to shared memory for dQ.
    const bool masked = sc.masked(st.qt, kt);
    BWD_ROLLED
    for (int sub = 0; sub < kSub; ++sub) {
      const int q0 = sub * kSubQ;  // first query column of the sub-tile
      float sacc[kNq][4], pacc[kNq][4];
      TC_UNROLL
      for (int n = 0; n < kNq; ++n)
        TC_UNROLL
        for (int e = 0; e < 4; ++e) sacc[n][e] = pacc[n][e] = 0.f;
      TC_UNROLL
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[4], va[4];
        tc::ldmatrix<4>(ka, Kw + lane_a.at(0, 2 * kk));
        tc::ldmatrix<4>(va, Vw + lane_a.at(0, 2 * kk));
        TC_UNROLL
        for (int n = 0; n < kNq; n += 2) {
          uint32_t qb[4], ob[4];
          tc::ldmatrix<4>(qb, Qs + lane_b.at(q0 + n * 8, 2 * kk));
          tc::ldmatrix<4>(ob, dOs + lane_b.at(q0 + n * 8, 2 * kk));
          const uint32_t qf0[2] = {qb[0], qb[1]}, qf1[2] = {qb[2], qb[3]};
          const uint32_t of0[2] = {ob[0], ob[1]}, of1[2] = {ob[2], ob[3]};
          tc::mma_bf16_16816(sacc[n], ka, qf0);
          tc::mma_bf16_16816(sacc[n + 1], ka, qf1);
          tc::mma_bf16_16816(pacc[n], va, of0);
          tc::mma_bf16_16816(pacc[n + 1], va, of1);
        }
      }

      // pa = (alpha P)^T, da = dS^T; A fragment kk covers C tiles 2kk and 2kk + 1.
      uint32_t pa[kNq / 2][4], da[kNq / 2][4];
      float rs[16];  // affine: [2n + e] = P dPraw of this lane's two key rows, column 8n + 2tq + e
      TC_UNROLL
      for (int n = 0; n < kNq; ++n) {
        float pv[4], ds[4];
        TC_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int col = q0 + n * 8 + 2 * tq + (e & 1), row = key_r0 + (e >> 1) * 8;
          const float lse2 = stat[col], d_i = stat[Br + col];
          const float alpha = kAffine ? stat[2 * Br + col] : 1.f;
          float pe = tc::exp2_approx(sacc[n][e] * scale_log2 - lse2);
          if (masked && j0 + row > i0 + col) pe = 0.f;
          const float dp = pacc[n][e];
          if constexpr (kAffine) {
            if (e < 2) rs[2 * n + e] = pe * dp;
            else rs[2 * n + (e & 1)] += pe * dp;
          }
          ds[e] = pe * (alpha * dp - d_i);
          pv[e] = kAffine ? alpha * pe : pe;
        }
        pa[n / 2][(n % 2) * 2] = tc::pack_bf16x2(pv[0], pv[1]);
        pa[n / 2][(n % 2) * 2 + 1] = tc::pack_bf16x2(pv[2], pv[3]);
        da[n / 2][(n % 2) * 2] = tc::pack_bf16x2(ds[0], ds[1]);
        da[n / 2][(n % 2) * 2 + 1] = tc::pack_bf16x2(ds[2], ds[3]);
        *reinterpret_cast<uint32_t*>(dSs + Swz64::offset(key_r0, q0 + 8 * n + 2 * tq)) = da[n / 2][(n % 2) * 2];
        *reinterpret_cast<uint32_t*>(dSs + Swz64::offset(key_r0 + 8, q0 + 8 * n + 2 * tq)) =
            da[n / 2][(n % 2) * 2 + 1];
      }
      if constexpr (kAffine) column_sums<2 * kNq>(rs, rs_part + warp * Br + q0);

      TC_UNROLL
      for (int kk = 0; kk < kNq / 2; ++kk) {
        TC_UNROLL
        for (int n = 0; n < kNd; n += 2) {
          uint32_t ob[4], qb[4];
          tc::ldmatrix<4, true>(ob, dOs + lane_t.at(q0 + kk * 16, n));
          tc::ldmatrix<4, true>(qb, Qs + lane_t.at(q0 + kk * 16, n));
          const uint32_t of0[2] = {ob[0], ob[1]}, of1[2] = {ob[2], ob[3]};
          const uint32_t qf0[2] = {qb[0], qb[1]}, qf1[2] = {qb[2], qb[3]};
          tc::mma_bf16_16816(dv[n], pa[kk], of0);
          tc::mma_bf16_16816(dv[n + 1], pa[kk], of1);
          tc::mma_bf16_16816(dk[n], da[kk], qf0);
          tc::mma_bf16_16816(dk[n + 1], da[kk], qf1);
        }
      }
    }
    tc::sync_block();  // dS^T (and the rsum partials) complete

    // The ordered accumulation: contributors of (b, h, qt) in key-tile order. The wait and
    // the loads of the slice so far are issued before the dQ products, which hide them.
    const int64_t tile = (b * p.H + h) * sc.n_qt + st.qt;
    int* sem = a.sems() + tile * flash::kBwdDqSlices + warp;
    float* slice = a.dq_acc + tile * (Br * D) + warp * (16 * D / 2);
    const int64_t row_stat = (b * p.H + h) * a.T_pad + i0 + dq_m * 16 + lane;
    const bool first = kt == 0, last = kt == sc.last_kt(st.qt);
    // The slice so far is the dQ products' C operand: no registers beyond the accumulator
    // (a separate copy spilled at D = 128), and no adds after the products.
    float qacc[kNdq][4];
    float old_rsum = 0.f;
    if (!first && !kAtomic) {
      if (lane == 0) tc::wait_equal(sem, kt);
      // The other lanes read after lane 0's acquire: a named barrier of the warp's 32 threads
      // (ids 1..8), which unlike __syncwarp orders memory in the PTX model (causality order).
      tc::named_barrier_sync(1 + warp, 32);
      TC_UNROLL
      for (int n = 0; n < kNdq; ++n) tc::load_cg4(qacc[n], slice + (n * 32 + lane) * 4);
      if constexpr (kAffine) {
        if (dq_n == 0 && lane < 16) old_rsum = tc::load_cg(a.rs_acc + row_stat);
      }
    } else {
      TC_UNROLL
      for (int n = 0; n < kNdq; ++n)
        TC_UNROLL
        for (int e = 0; e < 4; ++e) qacc[n][e] = 0.f;
    }

    // dQ slice (16 query rows x D/2) += dS K over the Bc keys.
    TC_UNROLL
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t sa[4];
      tc::ldmatrix<4, true>(sa, dSs + lane_s.at(kk * 16, 0));
      TC_UNROLL
      for (int n = 0; n < kNdq; n += 2) {
        uint32_t kb[4];
        tc::ldmatrix<4, true>(kb, Kq + lane_k.at(kk * 16, n));
        const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
        tc::mma_bf16_16816(qacc[n], sa, k0);
        tc::mma_bf16_16816(qacc[n + 1], sa, k1);
      }
    }
    float rsum = 0.f;  // affine: this pair's sum_j P dPraw for query row 16 dq_m + lane
    if constexpr (kAffine) {
      if (dq_n == 0 && lane < 16)
        for (int w = 0; w < L::kWarps; ++w) rsum += rs_part[w * Br + dq_m * 16 + lane];
    }

    if constexpr (kAtomic) {  // the timing build: unordered float atomics, bwd_finalize converts
      TC_UNROLL
      for (int n = 0; n < kNdq; ++n)
        TC_UNROLL
        for (int e = 0; e < 4; ++e) tc::atomic_add_f32(slice + (n * 32 + lane) * 4 + e, qacc[n][e]);
      if constexpr (kAffine) {
        if (dq_n == 0 && lane < 16) tc::atomic_add_f32(a.rs_acc + row_stat, rsum);
      }
      continue;
    }
    if constexpr (kAffine) rsum = old_rsum + rsum;
    if (!last) {
      TC_UNROLL
      for (int n = 0; n < kNdq; ++n) tc::store_cg4(slice + (n * 32 + lane) * 4, qacc[n]);
      if constexpr (kAffine) {
        if (dq_n == 0 && lane < 16) tc::store_cg(a.rs_acc + row_stat, rsum);
      }
      pending_sem = sem;  // released after the next block barrier
      pending_value = kt + 1;
    } else {
      store_dq<D, kAffine>(a, qacc, rsum, b, h, i0, warp, lane);
    }
  }

  // Epilogue: dk = scale dK, dv = dV (+ R), staged through the K / V tiles (free once
  // every warp has left the loop) for 16-byte stores.
  tc::cp_async_wait<0>();
  tc::sync_block();
  if (pending_sem != nullptr && lane == 0) tc::store_release(pending_sem, pending_value);
  TC_UNROLL
  for (int n = 0; n < kNd; ++n) {
    TC_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int row = key_r0 + half * 8, col = n * 8 + 2 * tq;
      float v0 = dv[n][2 * half], v1 = dv[n][2 * half + 1];
      if constexpr (kAffine) {
        const int64_t j = j0 + row;
        if (j < p.T) {
          const float* r = a.vsum + ((b * p.T + j) * p.Hkv + g) * D + col;
          v0 += r[0];
          v1 += r[1];
        }
      }
      *reinterpret_cast<uint32_t*>(Vs + SwzD::offset(row, col)) = tc::pack_bf16x2(v0, v1);
      *reinterpret_cast<uint32_t*>(Ks + SwzD::offset(row, col)) =
          tc::pack_bf16x2(p.scale * dk[n][2 * half], p.scale * dk[n][2 * half + 1]);
    }
  }
  tc::sync_warp();  // each warp stores only its own 16 rows
  constexpr int kChunks = D / 8;
  TC_UNROLL
  for (int idx = lane; idx < 16 * kChunks; idx += 32) {
    const int row = warp * 16 + idx / kChunks, c = (idx % kChunks) * 8;
    const int64_t j = j0 + row;
    if (j >= p.T) continue;
    uint16_t* base = p.dqkv + b * p.qkv_batch + j * p.qkv_token + g * D + c;
    tc::copy16(base + p.k_offset, Ks + SwzD::offset(row, c));
    tc::copy16(base + p.v_offset, Vs + SwzD::offset(row, c));
  }
}

}  // namespace kdtrain::flash_bwd
