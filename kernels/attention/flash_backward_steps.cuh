// The steps of the fused attention backward's main kernel (bwd_main,
// flash_backward_kernel.cuh), one function each, in the order a tile pair runs them:
//   load       K / V of the work item, Q / dO / statistics of a step (cp.async)
//   S^T, dP^T  products of a query sub-tile: K_w Q^T, V_w dO^T        (st_dp_products)
//   dS^T       P^T = 2^(S^T scale log2e - lse2), dS^T = P^T (alpha dP^T - D), bf16
//              A fragments, dS^T to shared memory                    (sub_tile_gradients)
//   dV, dK     dV_w += (alpha P)^T_w dO, dK_w += dS^T_w Q             (dv_dk_products)
//   dQ         the warp's dQ slice = dS K                             (dq_products)
//   release    the dQ tile to shared memory (stage_dq), from where ONE thread adds it to
//              the fp32 accumulator with a bulk reduction in key-tile order (DqWriter),
//              or the timing build's vector atomics (atomic_dq)
//   epilogue   dk = scale dK, dv = dV (+ R)                           (write_dk_dv)
// The sm_90a build (bwd_main with kWgmma) runs the products on wgmma instead
// (flash_backward_wgmma.cuh) and every other step here. Same two targets as
// primitives.cuh. Algorithm, resources and the dq design: docs/flash_attention_backward.md.
#pragma once
#include <cstdint>

#include "kernels/attention/flash_backward_args.h"
#include "kernels/tc/bulk.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"
#include "kernels/tc/wgmma.cuh"

namespace kdtrain::flash_bwd {

using flash::BwdArgs;
using flash::kBwdTiles;

constexpr float kLog2e = 1.4426950408889634f;

// Shared-memory carve-up of the main kernel (bytes). bf16 tiles are swizzled rows of D
// (Q, dO, K, V) or of Br = 64 (dS^T) elements; the dQ tile (fp32, in the accumulator's
// fragment order) and affine's row sums are the bulk reduction's sources.
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
  static constexpr size_t kDq = kRs + (kAffine ? sizeof(float) * kWarps * Br : 0);  // Br x D fp32
  static constexpr size_t kRsRow = kDq + sizeof(float) * Br * D;  // Br fp32 row sums [affine]
  static constexpr size_t kTicket = kRsRow + (kAffine ? sizeof(float) * Br : 0);
  static constexpr size_t kBytes = kTicket + 16;
  static constexpr uint32_t kDqBytes = sizeof(float) * Br * D, kRsBytes = sizeof(float) * Br;
  // The writer warp's second staging buffer (dQ tile, then the row sums), past the rest.
  static constexpr size_t kDq1 = kBytes, kBytesTwoDq = kDq1 + kDqBytes + (kAffine ? kRsBytes : 0);
  static constexpr size_t dq_buffer(int b) { return b == 0 ? kDq : kDq1; }
};

// Copies rows [0, valid) of a bf16 matrix (row stride `stride` elements) into a swizzled
// ROWS x D shared tile; rows past `valid` are zero-filled (their source address is row 0,
// which always exists). kWg: the tile is a tc::WgmmaTile (64-column blocks, what wgmma
// descriptors address; the same bytes as Swizzle<D> at D = 64) instead of Swizzle<D> rows.
template <int D, int ROWS, bool kWg>
TC_DEVICE int tile_offset(int r, int c) {
  if constexpr (kWg) return tc::WgmmaTile<ROWS, D>::offset(r, c);
  else return tc::Swizzle<D>::offset(r, c);
}

template <int D, int ROWS, int kThreads, bool kWg = false>
TC_DEVICE void load_tile(uint16_t* dst, const uint16_t* src, int64_t stride, int valid) {
  constexpr int kChunks = D / 8;
  static_assert(ROWS * kChunks % kThreads == 0, "every thread copies the same number of chunks");
  const int tid = static_cast<int>(tc::thread_idx().x);
  TC_UNROLL
  for (int k = 0; k < ROWS * kChunks / kThreads; ++k) {  // a compile-time trip count: unrolled
    const int idx = tid + k * kThreads;
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool ok = r < valid;
    tc::cp_async_16(dst + tile_offset<D, ROWS, kWg>(r, c), src + (ok ? r : 0) * stride + c, ok);
  }
}

// The work item of this block: (b, kv head g, key tile kt) from the ticket counter.
struct BwdBlock {
  int64_t b = 0, g = 0, j0 = 0;
  int kt = 0, key_rows = 0, steps = 0;
};

template <int D, bool kAffine>
TC_DEVICE BwdBlock take_item(const BwdArgs& a, unsigned char* smem) {
  using L = MainLayout<D, kAffine>;
  auto* ticket = reinterpret_cast<int*>(smem + L::kTicket);
  if (tc::thread_idx().x == 0) *ticket = tc::atomic_add(a.ints + flash::BwdWorkspace::kTicket, 1);
  tc::sync_block();
  const flash::BwdItem item = a.sched.item(*ticket, a.p.Hkv);
  BwdBlock w;
  w.b = item.b;
  w.g = item.g;
  w.kt = item.kt;
  w.j0 = static_cast<int64_t>(item.kt) * L::Bc;
  w.key_rows = static_cast<int>(a.p.T - w.j0 < L::Bc ? a.p.T - w.j0 : L::Bc);
  w.steps = a.sched.steps(item.kt);
  return w;
}

// K and V of the work item (rows past T zero).
template <int D, bool kAffine, bool kWg = false>
TC_DEVICE void load_kv(const BwdArgs& a, unsigned char* smem, const BwdBlock& w) {
  using L = MainLayout<D, kAffine>;
  const flash::AttentionParams& p = a.p;
  const uint16_t* base = p.qkv + w.b * p.qkv_batch + w.j0 * p.qkv_token + w.g * D;
  load_tile<D, L::Bc, L::kThreads, kWg>(reinterpret_cast<uint16_t*>(smem + L::kK), base + p.k_offset, p.qkv_token,
                                        w.key_rows);
  load_tile<D, L::Bc, L::kThreads, kWg>(reinterpret_cast<uint16_t*>(smem + L::kV), base + p.v_offset, p.qkv_token,
                                        w.key_rows);
}

// Q, dO and the statistics of step s into stage `stage`.
template <int D, bool kAffine, bool kWg = false>
TC_DEVICE void load_step(const BwdArgs& a, unsigned char* smem, int64_t b, int64_t g, int s, int stage) {
  using L = MainLayout<D, kAffine>;
  const flash::BwdStep st = a.sched.step(s);
  const int64_t h = g * a.sched.group + st.head_in_group;
  const int64_t i0 = static_cast<int64_t>(st.qt) * L::Br;
  const int valid = static_cast<int>(a.p.T - i0 < L::Br ? a.p.T - i0 : L::Br);
  auto* Qs = reinterpret_cast<uint16_t*>(smem + L::kQ + stage * L::kTileQ);
  auto* dOs = reinterpret_cast<uint16_t*>(smem + L::kDo + stage * L::kTileQ);
  load_tile<D, L::Br, L::kThreads, kWg>(Qs, a.p.qkv + b * a.p.qkv_batch + i0 * a.p.qkv_token + h * D, a.p.qkv_token,
                                        valid);
  load_tile<D, L::Br, L::kThreads, kWg>(dOs, a.p.dout + b * a.p.o_batch + i0 * a.p.o_token + h * D, a.p.o_token,
                                        valid);
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

// This thread's place in the block and its ldmatrix address patterns: A of K_w / V_w;
// B of Q / dO (K-dim = D); B transposed of dO / Q (K-dim = queries) and of K (K-dim =
// keys; the warp's D half folds into the chunk part for D = 64, into the base for
// D = 128); A transposed of dS.
template <int D>
struct BwdLanes {
  static constexpr int kHalfChunks = D / 16;  // 16-byte chunks in D/2 columns
  int warp, lane, gq, tq;  // fragment row group and thread-in-group
  int key_r0;              // this lane's key rows in the tile: key_r0, key_r0 + 8
  int dq_m, dq_n;          // dQ slice: rows 16 dq_m.., cols dq_n * D/2..
  LdsmLane<D> lane_a, lane_b, lane_t, lane_k;
  LdsmLane<64> lane_s;
  TC_DEVICE BwdLanes(int w, int l)
      : warp(w), lane(l), gq(l / 4), tq(l % 4), key_r0(w * 16 + l / 4), dq_m(w % 4), dq_n(w / 4),
        lane_a(l % 16, l / 16),
        lane_b(l % 8 + (l / 16) * 8, (l / 8) % 2),
        lane_t(l % 8 + ((l / 8) % 2) * 8, l / 16),
        lane_k(l % 8 + ((l / 8) % 2) * 8, l / 16 + (((w / 4) * kHalfChunks) & 7)),
        lane_s(l % 8 + (l / 16) * 8, (l / 8) % 2 + 2 * (w % 4)) {}
};

// S^T = K_w Q^T and dP^T = V_w dO^T of the query sub-tile at column q0 (kNq 8-column tiles).
template <int D, int kNq>
TC_DEVICE void st_dp_products(float (&sacc)[kNq][4], float (&pacc)[kNq][4], const BwdLanes<D>& ln,
                              const uint16_t* Kw, const uint16_t* Vw, const uint16_t* Qs, const uint16_t* dOs,
                              int q0) {
  TC_UNROLL
  for (int n = 0; n < kNq; ++n)
    TC_UNROLL
    for (int e = 0; e < 4; ++e) sacc[n][e] = pacc[n][e] = 0.f;
  TC_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t ka[4], va[4];
    tc::ldmatrix<4>(ka, Kw + ln.lane_a.at(0, 2 * kk));
    tc::ldmatrix<4>(va, Vw + ln.lane_a.at(0, 2 * kk));
    TC_UNROLL
    for (int n = 0; n < kNq; n += 2) {
      uint32_t qb[4], ob[4];
      tc::ldmatrix<4>(qb, Qs + ln.lane_b.at(q0 + n * 8, 2 * kk));
      tc::ldmatrix<4>(ob, dOs + ln.lane_b.at(q0 + n * 8, 2 * kk));
      const uint32_t qf0[2] = {qb[0], qb[1]}, qf1[2] = {qb[2], qb[3]};
      const uint32_t of0[2] = {ob[0], ob[1]}, of1[2] = {ob[2], ob[3]};
      tc::mma_bf16_16816(sacc[n], ka, qf0);
      tc::mma_bf16_16816(sacc[n + 1], ka, qf1);
      tc::mma_bf16_16816(pacc[n], va, of0);
      tc::mma_bf16_16816(pacc[n + 1], va, of1);
    }
  }
}

// What the gradient step needs of the tile pair beyond the products.
struct PairInfo {
  const float* stat;  // the step's statistics: lse2, D (, alpha), Br each
  int64_t i0, j0;     // first query row and key row of the pair
  bool masked;        // causal mask needed (a diagonal or padded pair)
  float scale_log2;
};

// P^T and dS^T of the sub-tile at q0, packed as the bf16 A operands pa = (alpha P)^T and
// da = dS^T (A fragment kk covers C tiles 2kk and 2kk + 1); dS^T also to shared memory
// for dQ; affine: rs[2n + e] = P dPraw of this lane's two key rows, column 8n + 2tq + e.
template <bool kAffine, int Br, int kNq>
TC_DEVICE void sub_tile_gradients(uint32_t (&pa)[kNq / 2][4], uint32_t (&da)[kNq / 2][4], float (&rs)[16],
                                  const float (&sacc)[kNq][4], const float (&pacc)[kNq][4], const PairInfo& pr,
                                  int key_r0, int tq, int q0, uint16_t* dSs) {
  using Swz64 = tc::Swizzle<64>;
  TC_UNROLL
  for (int n = 0; n < kNq; ++n) {
    float pv[4], ds[4];
    TC_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int col = q0 + n * 8 + 2 * tq + (e & 1), row = key_r0 + (e >> 1) * 8;
      const float lse2 = pr.stat[col], d_i = pr.stat[Br + col];
      const float alpha = kAffine ? pr.stat[2 * Br + col] : 1.f;
      float pe = tc::exp2_approx(sacc[n][e] * pr.scale_log2 - lse2);
      if (pr.masked && pr.j0 + row > pr.i0 + col) pe = 0.f;
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
    *reinterpret_cast<uint32_t*>(dSs + Swz64::offset(key_r0 + 8, q0 + 8 * n + 2 * tq)) = da[n / 2][(n % 2) * 2 + 1];
  }
}

// dV_w += (alpha P)^T_w dO and dK_w += dS^T_w Q over the sub-tile's kNq * 8 queries.
template <int D, int kNq>
TC_DEVICE void dv_dk_products(float (&dv)[D / 8][4], float (&dk)[D / 8][4], const uint32_t (&pa)[kNq / 2][4],
                              const uint32_t (&da)[kNq / 2][4], const BwdLanes<D>& ln, const uint16_t* Qs,
                              const uint16_t* dOs, int q0) {
  TC_UNROLL
  for (int kk = 0; kk < kNq / 2; ++kk) {
    TC_UNROLL
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t ob[4], qb[4];
      tc::ldmatrix<4, true>(ob, dOs + ln.lane_t.at(q0 + kk * 16, n));
      tc::ldmatrix<4, true>(qb, Qs + ln.lane_t.at(q0 + kk * 16, n));
      const uint32_t of0[2] = {ob[0], ob[1]}, of1[2] = {ob[2], ob[3]};
      const uint32_t qf0[2] = {qb[0], qb[1]}, qf1[2] = {qb[2], qb[3]};
      tc::mma_bf16_16816(dv[n], pa[kk], of0);
      tc::mma_bf16_16816(dv[n + 1], pa[kk], of1);
      tc::mma_bf16_16816(dk[n], da[kk], qf0);
      tc::mma_bf16_16816(dk[n + 1], da[kk], qf1);
    }
  }
}

// The warp's dQ slice (16 query rows x D/2) = dS K over the Bc keys, from zero: nothing
// read from global memory feeds these products.
template <int D, int Bc>
TC_DEVICE void dq_products(float (&qacc)[D / 16][4], const BwdLanes<D>& ln, const uint16_t* dSs, const uint16_t* Ks) {
  const uint16_t* Kq = Ks + ((ln.dq_n * BwdLanes<D>::kHalfChunks) & ~7) * 8;
  TC_UNROLL
  for (int n = 0; n < D / 16; ++n)
    TC_UNROLL
    for (int e = 0; e < 4; ++e) qacc[n][e] = 0.f;
  TC_UNROLL
  for (int kk = 0; kk < Bc / 16; ++kk) {
    uint32_t sa[4];
    tc::ldmatrix<4, true>(sa, dSs + ln.lane_s.at(kk * 16, 0));
    TC_UNROLL
    for (int n = 0; n < D / 16; n += 2) {
      uint32_t kb[4];
      tc::ldmatrix<4, true>(kb, Kq + ln.lane_k.at(kk * 16, n));
      const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
      tc::mma_bf16_16816(qacc[n], sa, k0);
      tc::mma_bf16_16816(qacc[n + 1], sa, k1);
    }
  }
}

// The dQ tile (and affine's row sums) to shared memory in the accumulator's fragment order
// (warp w's slice at w * 16 * D/2 floats, lane l's value n at (n * 32 + l) * 4), then this
// thread's proxy fence: a bulk operation reads it after the next block barrier. kFence
// false leaves the fence to the caller, which must issue one before that barrier (the
// wgmma build's fence for its landed copies does both jobs).
template <int D, bool kAffine, bool kFence = true>
TC_DEVICE void stage_dq(unsigned char* smem, const float (&qacc)[D / 16][4], float rsum, const BwdLanes<D>& ln,
                        int buffer = 0) {
  using L = MainLayout<D, kAffine>;
  unsigned char* at = smem + L::dq_buffer(buffer);  // the dQ tile, then the row sums
  float* slice = reinterpret_cast<float*>(at) + ln.warp * (16 * D / 2);
  TC_UNROLL
  for (int n = 0; n < D / 16; ++n) tc::store_shared4(slice + (n * 32 + ln.lane) * 4, qacc[n]);
  if constexpr (kAffine) {
    if (ln.dq_n == 0 && ln.lane < 16)
      tc::store_shared(reinterpret_cast<float*>(at + L::kDqBytes) + ln.dq_m * 16 + ln.lane, rsum);
  }
  if constexpr (kFence) tc::fence_proxy_async();
}

// The timing build (kBwdAtomicDq): the slice added with red.global.add.v4.f32, in no order.
template <int D, bool kAffine>
TC_DEVICE void atomic_dq(const BwdArgs& a, int64_t tile, const float (&qacc)[D / 16][4], float rsum,
                         const BwdLanes<D>& ln) {
  float* slice = a.dq_acc + tile * (kBwdTiles.Br * D) + ln.warp * (16 * D / 2);
  TC_UNROLL
  for (int n = 0; n < D / 16; ++n) tc::red_add_v4_f32(slice + (n * 32 + ln.lane) * 4, qacc[n]);
  if constexpr (kAffine) {
    if (ln.dq_n == 0 && ln.lane < 16) tc::atomic_add_f32(a.rs_acc + tile * kBwdTiles.Br + ln.dq_m * 16 + ln.lane, rsum);
  }
}

// The ordered dq accumulation, run by thread 0 alone: contributors of a query tile add
// their dQ tile in key-tile order kt = 0, 1, ..., each waiting until the tile's semaphore
// reads kt and releasing kt + 1 (flash_backward_schedule.h). A step's staged tile is
// handed over one step late, in three parts placed where their latency hides behind the
// next step's products: poll() (the semaphore's load, at the top), issue() (after the
// first query sub-tile: acquire, then one bulk operation, a store for kt = 0), retire()
// (after the second: wait for the bulk group, release). The MMA warps never wait on global
// memory for dq; the staging buffer is free again at the barrier after retire().
template <int D, bool kAffine>
struct DqWriter {
  using L = MainLayout<D, kAffine>;
  int tile = -1;  // the staged tile waiting to be added, or -1 (every thread but 0: always -1)
  int seen = -1;  // poll()'s value of its semaphore

  TC_DEVICE void stage(int64_t t) {
    if (tc::thread_idx().x == 0) tile = static_cast<int>(t);
  }
  TC_DEVICE void poll(const BwdArgs& a, int kt) {
    if (tile >= 0 && kt > 0) seen = tc::load_relaxed(a.sems() + tile);
  }
  TC_DEVICE void issue(const BwdArgs& a, unsigned char* smem, int kt) {
    if (tile < 0) return;
    const auto* dq = reinterpret_cast<const float*>(smem + L::kDq);
    const auto* rs = reinterpret_cast<const float*>(smem + L::kRsRow);
    float* dq_acc = a.dq_acc + static_cast<int64_t>(tile) * (L::Br * D);
    float* rs_acc = a.rs_acc + static_cast<int64_t>(tile) * L::Br;  // (b, h, T_pad) rows: T_pad = n_qt Br
    if (kt == 0) {
      tc::bulk_store(dq_acc, dq, L::kDqBytes);
      if constexpr (kAffine) tc::bulk_store(rs_acc, rs, L::kRsBytes);
    } else {
      tc::wait_equal_seen(a.sems() + tile, kt, seen);
      tc::bulk_reduce_add_f32(dq_acc, dq, L::kDqBytes);
      if constexpr (kAffine) tc::bulk_reduce_add_f32(rs_acc, rs, L::kRsBytes);
    }
    tc::bulk_commit();
  }
  TC_DEVICE void retire(const BwdArgs& a, int kt) {
    if (tile < 0) return;
    tc::bulk_wait<0>();
    tc::store_release(a.sems() + tile, kt + 1);
    tile = -1;
  }
};

// Epilogue: dk = scale dK, dv = dV (+ R), staged through the K / V tiles (free once every
// warp has left the loop) for 16-byte stores.
template <int D, bool kAffine>
TC_DEVICE void write_dk_dv(const BwdArgs& a, unsigned char* smem, const BwdBlock& w, const BwdLanes<D>& ln,
                           const float (&dk)[D / 8][4], const float (&dv)[D / 8][4]) {
  using L = MainLayout<D, kAffine>;
  using SwzD = tc::Swizzle<D>;
  const flash::AttentionParams& p = a.p;
  auto* Ks = reinterpret_cast<uint16_t*>(smem + L::kK);
  auto* Vs = reinterpret_cast<uint16_t*>(smem + L::kV);
  TC_UNROLL
  for (int n = 0; n < D / 8; ++n) {
    TC_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int row = ln.key_r0 + half * 8, col = n * 8 + 2 * ln.tq;
      float v0 = dv[n][2 * half], v1 = dv[n][2 * half + 1];
      if constexpr (kAffine) {
        const int64_t j = w.j0 + row;
        if (j < p.T) {
          const float* r = a.vsum + ((w.b * p.T + j) * p.Hkv + w.g) * D + col;
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
  for (int idx = ln.lane; idx < 16 * kChunks; idx += 32) {
    const int row = ln.warp * 16 + idx / kChunks, c = (idx % kChunks) * 8;
    const int64_t j = w.j0 + row;
    if (j >= p.T) continue;
    uint16_t* base = p.dqkv + w.b * p.qkv_batch + j * p.qkv_token + w.g * D + c;
    tc::copy16(base + p.k_offset, Ks + SwzD::offset(row, c));
    tc::copy16(base + p.v_offset, Vs + SwzD::offset(row, c));
  }
}

}  // namespace kdtrain::flash_bwd
