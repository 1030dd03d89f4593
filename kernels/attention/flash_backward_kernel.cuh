// The main kernel of the fused attention backward: one block per work item (b, kv head,
// key tile of Bc = 128 rows), 8 warps, warp w owning key rows 16w..16w+15, and the kernel
// that converts the fp32 dq accumulator to bf16. Written against primitives.cuh, so nvcc
// builds it for the GPU (flash_backward.cu) and the host runs the same source in the SIMT
// emulator (tests of the backward). Its steps: flash_backward_steps.cuh; order and
// deadlock argument: flash_backward_schedule.h; algorithm, resource arithmetic and the dq
// design: docs/flash_attention_backward.md.
//
// Per step (query tile qt of Br = 64 rows, query head h), with Q, dO and the row
// statistics (lse2, D, alpha) of the step double-buffered by cp.async, two query
// sub-tiles of 32 (so S^T and dP^T of only 32 queries are live next to dK and dV: zero
// spills at D = 128, at the price of reading the warp's K / V fragments twice per step,
// except in the sm_90a build at D 64, which holds them in registers: kKvInRegisters)
// each run S^T / dP^T, dS^T, dV / dK; then dQ = dS K, staged in shared memory and added to
// the ordered fp32 accumulator by thread 0 during the next step (DqWriter), in the sm_90a
// build by a writer warp beside the MMA warps (flash_backward_dq_warp.cuh). The block
// keeps dK_w, dV_w (2 x 16 x D fp32) in registers and writes them once. Two builds of
// the same steps: mma.sync (sm_90, flash_backward.cu) and, with kWgmma, S^T / dP^T and
// dV / dK as warpgroup wgmma products (sm_90a, flash_backward_sm90a.cu).
#pragma once
#include <cstdint>

#include "kernels/attention/flash_backward_args.h"
#include "kernels/attention/flash_backward_dq_warp.cuh"
#include "kernels/attention/flash_backward_steps.cuh"
#include "kernels/attention/flash_backward_wgmma.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"

namespace kdtrain::flash_bwd {

// dq = scale * sum (bf16, rows < T only) of warp `warp`'s slice of query tile (b, h, i0),
// and affine's dalpha = rsum - sigma / N_i (affine_bias_count), by bwd_finalize. A quad's
// lanes hold a row two columns each per fragment; transposed over the quad (4 fragments at
// a time), each lane stores one fragment's 8 columns with one 16-byte store, instead of
// four 4-byte stores of half sectors (the H200 saw this kernel stall on lg_throttle at
// 61-64% of DRAM bandwidth, 2026-11-28).
template <int D, bool kAffine>
TC_DEVICE void store_dq(const BwdArgs& a, const float (&qacc)[D / 16][4], float rsum, int64_t b, int64_t h,
                        int64_t i0, int warp, int lane) {
  static_assert(D % 64 == 0, "whole groups of 4 fragments, one per lane of a quad");
  const flash::AttentionParams& p = a.p;
  const int dq_m = warp % 4, dq_n = warp / 4, gq = lane / 4, tq = lane % 4;
  TC_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i0 + dq_m * 16 + gq + half * 8;
    TC_UNROLL
    for (int g = 0; g < D / 64; ++g) {
      alignas(16) uint32_t x[4];  // fragments 4g..4g+3 of row i; transposed, fragment 4g + tq
      TC_UNROLL
      for (int k = 0; k < 4; ++k)
        x[k] = tc::pack_bf16x2(p.scale * qacc[4 * g + k][2 * half], p.scale * qacc[4 * g + k][2 * half + 1]);
      tc::quad_transpose(x);  // by every lane: a shuffle needs the whole warp, rows past T too
      if (i < p.T)
        tc::store_global_vec<4>(reinterpret_cast<uint32_t*>(p.dqkv + b * p.qkv_batch + i * p.qkv_token + h * D +
                                                            dq_n * (D / 2) + (4 * g + tq) * 8),
                                x);
    }
  }
  if constexpr (kAffine) {
    const int64_t i = i0 + dq_m * 16 + lane;
    const int64_t row_stat = (b * p.H + h) * a.T_pad + i;
    if (dq_n == 0 && lane < 16 && i < p.T)
      p.dalpha[b * p.alpha_batch + i * p.alpha_token + h] =
          tc::float_to_bf16(rsum - a.sigma[row_stat] / flash::affine_bias_count(p, i));
  }
}

// The backward's last kernel: block = query tile (b, h, qt) in the accumulator's order,
// each warp converting the slice the main kernel's warp of the same index produced.
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

// Whether the step's two query sub-tiles are pipelined on wgmma (sub_tiles_wgmma): the
// second pa / da buffer fits at D 64 only (at D 128 the MMA warps spilled 88 bytes under
// setmaxnreg 240, 56 for affine; without the second buffer, with dV / dK in flight
// through dQ or not, still 8 and 48: D 128 keeps a wait after each product).
template <int D>
constexpr bool kOverlapSubTiles = D == 64;

// The step's two query sub-tiles on wgmma, pipelined: sub-tile 1's S^T / dP^T is issued
// before sub-tile 0's dV / dK and retired while those run, so sub-tile 1's gradients
// overlap them, in a second pa / da buffer (a dV / dK group's A registers stay unchanged
// until it retires); sub-tile 1's dV / dK stay in flight through the dS^T barrier until
// dQ's wait retires them (the caller's dq_wgmma, then dv_dk_retired), so the caller holds
// the buffers (`ops`) until then. No dq writer runs between the sub-tiles here: the wgmma
// builds hand dQ to the writer warp or, in the atomics timing build, to atomics
// (DqWriter never holds a tile there).
template <int kNq>
struct SubTileOperands {
  uint32_t pa[2][kNq / 2][4], da[2][kNq / 2][4];  // (alpha P)^T and dS^T A fragments, per sub-tile
};

template <int D, bool kAffine, int Br, int Bc, int kNq, bool kKvHeld>
TC_DEVICE void sub_tiles_wgmma(float (&dv)[D / 8][4], float (&dk)[D / 8][4], SubTileOperands<kNq>& ops,
                               const KvFragments<D, Bc, kKvHeld>& kv, const uint16_t* Ks, const uint16_t* Vs,
                               const uint16_t* Qs, const uint16_t* dOs, const BwdLanes<D>& ln, const PairInfo& pr,
                               uint16_t* dSs, float* rs_part) {
  constexpr int kSubQ = 8 * kNq;
  static_assert(Br == 2 * kSubQ, "two sub-tiles");
  float s[4 * kNq], p[4 * kNq], sacc[kNq][4], pacc[kNq][4], rs[16];
  // Sub-tile sub's gradients from its retired S^T / dP^T, into buffer sub.
  auto gradients = [&](int sub) {
    st_dp_collect<kNq>(sacc, pacc, s, p);
    sub_tile_gradients<kAffine, Br, kNq>(ops.pa[sub], ops.da[sub], rs, sacc, pacc, pr, ln.key_r0, ln.tq, sub * kSubQ,
                                         dSs);
    if constexpr (kAffine) column_sums<2 * kNq>(rs, rs_part + ln.warp * Br + sub * kSubQ);
  };
  st_dp_issue<D, Bc, Br, kNq>(s, p, kv, Ks, Vs, Qs, dOs, ln.warp, 0);
  tc::wgmma_wait<0>();
  gradients(0);
  st_dp_issue<D, Bc, Br, kNq>(s, p, kv, Ks, Vs, Qs, dOs, ln.warp, kSubQ);
  dv_dk_issue<D, Br, kNq>(dv, dk, ops.pa[0], ops.da[0], Qs, dOs, 0);
  tc::wgmma_wait<1>();  // sub-tile 1's S^T / dP^T retired; sub-tile 0's dV / dK may still run
  gradients(1);
  dv_dk_issue<D, Br, kNq>(dv, dk, ops.pa[1], ops.da[1], Qs, dOs, kSubQ);
}

// The step's two query sub-tiles one after the other, each product retired before the
// next (mma.sync; wgmma where kOverlapSubTiles does not hold), thread 0's dq writer
// between them when there is no writer warp (its bulk reduction issued after sub-tile 0,
// retired after sub-tile 1).
template <int D, bool kAffine, int Br, int Bc, int kNq, bool kWgmma, bool kWriterWarp, bool kKvHeld>
TC_DEVICE void sub_tiles_in_turn(float (&dv)[D / 8][4], float (&dk)[D / 8][4], const KvFragments<D, Bc, kKvHeld>& kv,
                                 const uint16_t* Ks, const uint16_t* Vs, const uint16_t* Qs, const uint16_t* dOs,
                                 const BwdLanes<D>& ln, const PairInfo& pr, uint16_t* dSs, float* rs_part,
                                 DqWriter<D, kAffine>& writer, const BwdArgs& a, unsigned char* smem, int kt) {
  constexpr int kSubQ = 8 * kNq;
  const uint16_t* Kw = Ks + ln.warp * 16 * D;  // the warp's 16 key rows (mma.sync)
  const uint16_t* Vw = Vs + ln.warp * 16 * D;
  TC_ROLLED  // bounds register pressure: the body indexes its arrays with unrolled indices only
  for (int sub = 0; sub < Br / kSubQ; ++sub) {
    const int q0 = sub * kSubQ;  // first query column of the sub-tile
    float sacc[kNq][4], pacc[kNq][4];
    if constexpr (kWgmma) st_dp_wgmma<D, Bc, Br, kNq>(sacc, pacc, kv, Ks, Vs, Qs, dOs, ln.warp, q0);
    else st_dp_products<D, kNq>(sacc, pacc, ln, Kw, Vw, Qs, dOs, q0);
    uint32_t pa[kNq / 2][4], da[kNq / 2][4];
    float rs[16];
    sub_tile_gradients<kAffine, Br, kNq>(pa, da, rs, sacc, pacc, pr, ln.key_r0, ln.tq, q0, dSs);
    if constexpr (kAffine) column_sums<2 * kNq>(rs, rs_part + ln.warp * Br + q0);
    if constexpr (kWgmma) dv_dk_wgmma<D, Br, kNq>(dv, dk, pa, da, Qs, dOs, q0);
    else dv_dk_products<D, kNq>(dv, dk, pa, da, ln, Qs, dOs, q0);
    if constexpr (!kWriterWarp) {
      if (sub == 0) writer.issue(a, smem, kt);
      else writer.retire(a, kt);
    }
  }
}

// kWgmma (sm_90a only): S^T / dP^T, dV / dK and dQ on wgmma (flash_backward_wgmma.cuh), Q,
// dO, K, V in the tc::WgmmaTile layout; otherwise mma.sync throughout. kWgmma and not
// kAtomic: a ninth warp hands the dQ tiles over (flash_backward_dq_warp.cuh,
// bwd_main_threads); otherwise thread 0 does, between its products (DqWriter).
template <int D, bool kAffine, bool kAtomic = flash::kBwdAtomicDq, bool kWgmma = false>
TC_DEVICE void bwd_main(const BwdArgs& a, unsigned char* smem) {
  using L = MainLayout<D, kAffine>;
  constexpr int Br = L::Br, kSub = 2, kSubQ = Br / kSub, kNq = kSubQ / 8;  // query sub-tiles
  constexpr bool kWriterWarp = kWgmma && !kAtomic;
  const flash::BwdSchedule& sc = a.sched;
  const BwdBlock w = take_item<D, kAffine>(a, smem);
  if constexpr (kWriterWarp) {
    if (tc::warp_id() >= L::kWarps) return dq_writer_warp<D, kAffine>(a, smem, w);
    tc::set_max_registers<kMmaRegisters, true>();
  }
  constexpr bool kKvHeld = kWgmma && kKvInRegisters<D>;  // A of S^T / dP^T in registers (sm_90a, D 64)
  load_kv<D, kAffine, kWgmma>(a, smem, w);
  if constexpr (kKvHeld) tc::cp_async_commit();  // K / V a group of their own: read below, before step 0's
  load_step<D, kAffine, kWgmma>(a, smem, w.b, w.g, 0, 0);
  tc::cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
  TC_UNROLL
  for (int n = 0; n < D / 8; ++n)
    TC_UNROLL
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;
  const BwdLanes<D> ln(tc::warp_id(), tc::lane_id());
  const auto* Ks = reinterpret_cast<const uint16_t*>(smem + L::kK);
  const auto* Vs = reinterpret_cast<const uint16_t*>(smem + L::kV);
  auto* dSs = reinterpret_cast<uint16_t*>(smem + L::kDs);
  auto* rs_part = reinterpret_cast<float*>(smem + L::kRs);
  DqWriter<D, kAffine> writer;
  KvFragments<D, L::Bc, kKvHeld> kv;
  if constexpr (kKvHeld) {  // once per item, outside the step loop: its code then runs once, as counted
    tc::cp_async_wait<1>();   // this thread's K / V copies (step 0's stay in flight)
    mma_barrier<kWriterWarp>();
    kv.load(Ks, Vs, ln.warp, ln.lane);
  }

  for (int s = 0; s < w.steps; ++s) {
    const int stage = s & 1;
    const flash::BwdStep st = sc.step(s);
    const int64_t h = w.g * sc.group + st.head_in_group;
    // Stage `stage` has landed; every warp is done with the previous step (dS^T) and has
    // staged and fenced its dQ slice (the writer warp's buffers are fenced in stage_dq).
    tc::cp_async_wait<0>();
    if constexpr (kWgmma) tc::fence_proxy_async();  // the landed copies, for wgmma reads
    mma_barrier<kWriterWarp>();
    if (s + 1 < w.steps) load_step<D, kAffine, kWgmma>(a, smem, w.b, w.g, s + 1, stage ^ 1);
    tc::cp_async_commit();
    if constexpr (!kWriterWarp) writer.poll(a, w.kt);

    const auto* Qs = reinterpret_cast<const uint16_t*>(smem + L::kQ + stage * L::kTileQ);
    const auto* dOs = reinterpret_cast<const uint16_t*>(smem + L::kDo + stage * L::kTileQ);
    const PairInfo pr{reinterpret_cast<const float*>(smem + L::kStat) + stage * L::kStats * Br,
                      static_cast<int64_t>(st.qt) * Br, w.j0, sc.masked(st.qt, w.kt), a.p.scale * kLog2e};
    SubTileOperands<kNq> ops;  // sub_tiles_wgmma's: in flight until dQ's wait
    if constexpr (kWgmma && kOverlapSubTiles<D>)
      sub_tiles_wgmma<D, kAffine, Br, L::Bc, kNq>(dv, dk, ops, kv, Ks, Vs, Qs, dOs, ln, pr, dSs, rs_part);
    else
      sub_tiles_in_turn<D, kAffine, Br, L::Bc, kNq, kWgmma, kWriterWarp>(dv, dk, kv, Ks, Vs, Qs, dOs, ln, pr, dSs,
                                                                        rs_part, writer, a, smem, w.kt);
    if constexpr (kWgmma) tc::fence_proxy_async();  // dS^T, for dQ's wgmma
    mma_barrier<kWriterWarp>();  // dS^T (and the rsum partials) complete; thread 0's staging buffer free

    float qacc[D / 16][4];
    if constexpr (kWgmma) {
      dq_wgmma<D, L::Bc>(qacc, dSs, Ks, ln.warp);  // its wait retires sub_tiles_wgmma's dV / dK too
      dv_dk_retired<D>(dv, dk);
    } else {
      dq_products<D, L::Bc>(qacc, ln, dSs, Ks);
    }
    float rsum = 0.f;  // affine: this pair's sum_j P dPraw for query row 16 dq_m + lane
    if constexpr (kAffine) {
      if (ln.dq_n == 0 && ln.lane < 16)
        for (int k = 0; k < L::kWarps; ++k) rsum += rs_part[k * Br + ln.dq_m * 16 + ln.lane];
    }
    const int64_t tile = (w.b * a.p.H + h) * sc.n_qt + st.qt;
    if constexpr (kAtomic) {
      atomic_dq<D, kAffine>(a, tile, qacc, rsum, ln);
    } else if constexpr (kWriterWarp) {
      stage_for_writer<D, kAffine>(smem, qacc, rsum, ln, s);
    } else {
      stage_dq<D, kAffine, !kWgmma>(smem, qacc, rsum, ln);
      writer.stage(tile);
    }
  }

  tc::cp_async_wait<0>();
  mma_barrier<kWriterWarp>();  // the last dQ tile staged; K / V free for the epilogue
  if constexpr (!kWriterWarp) {
    writer.poll(a, w.kt);
    writer.issue(a, smem, w.kt);
    writer.retire(a, w.kt);
  }
  write_dk_dv<D, kAffine>(a, smem, w, ln, dk, dv);
}

}  // namespace kdtrain::flash_bwd
