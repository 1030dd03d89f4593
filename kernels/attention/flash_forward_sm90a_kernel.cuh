// Fused causal attention forward for Hopper (sm_90a): the kernel body, written against
// primitives.cuh and wgmma.cuh so the same source runs on the GPU
// (flash_forward_sm90a.cu) and in the host SIMT emulator
// (tests/attention/test_flash_forward_sm90a_sim.cpp). Same contract, arguments (the call's
// AttentionParams and the affine prefix sums) and maths as the mma.sync forward
// (flash_forward_kernel.cuh); what differs is the tensor core instruction. Algorithm and predicted time: docs/flash_attention.md.
//
// One block per (b, h, query tile of Br = 64 kWarpgroups rows), heaviest tiles first.
// Warpgroup wg owns query rows [64 wg, 64 wg + 64) of the tile; per key tile of Bc rows:
//   S (64 x Bc) = Q K^T: D/16 wgmma k-steps, Q and K both K-major from shared memory;
//   online softmax in the exp2 domain on the accumulator registers (thread 32w + 4g + q
//   of the warpgroup holds rows 16w + g and 16w + g + 8, columns 8j + 2q, +1);
//   P re-packed as bf16 A fragments in registers (accumulator columns 16k..16k+15 are
//   the A fragment of k-step k), O (64 x D) += P V: Bc/16 wgmma k-steps, V MN-major.
// Q, K and V tiles live in the 128-byte-swizzled layout of tc::WgmmaTile, K/V in a
// 2-stage cp.async ring (tile kt+1 in flight while tile kt computes); every landing
// thread fences its copies for the async proxy before it issues the next tile's and
// before the barrier. No warp specialisation: every thread loads, then each warpgroup issues its own wgmma. The two
// warpgroups take turns issuing S (FlashAttention-3's ping-pong, through two named
// barriers), so one's softmax runs while the other's S occupies the tensor cores.
// Block order, K/V copy order, online softmax, statistics and epilogue (sink, affine):
// the same code as flash_forward_kernel.cuh, flash_forward_steps.cuh.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention/flash_forward_steps.cuh"
#include "kernels/attention/params.h"
#include "kernels/tc/named_barrier.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/wgmma.cuh"

namespace kdtrain::flash {

// Shared memory of the wgmma forwards: the Q tile (then the output staging), then kStages
// K/V stages (stage s: K at +2s*KV, V at +(2s+1)*KV), 128-byte-swizzled WgmmaTiles.
template <int D, int Br, int Bc_, int kStages_>
struct ForwardSm90aSmem {
  static constexpr int Bc = Bc_, kBr = Br, kStages = kStages_;
  using QTile = tc::WgmmaTile<Br, D>;
  using KVTile = tc::WgmmaTile<Bc, D>;
  static constexpr int kQOffset = 0;
  static constexpr int kKVOffset = QTile::kBytes;
  static constexpr int kSmemBytes = QTile::kBytes + kStages * 2 * KVTile::kBytes;
  static TC_DEVICE uint16_t* k_stage(unsigned char* smem, int s) {
    return reinterpret_cast<uint16_t*>(smem + kKVOffset + 2 * s * KVTile::kBytes);
  }
  static TC_DEVICE uint16_t* v_stage(unsigned char* smem, int s) {
    return reinterpret_cast<uint16_t*>(smem + kKVOffset + (2 * s + 1) * KVTile::kBytes);
  }
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static_assert(Bc == 64 || Bc == 128, "key tiles are one wgmma N (64 or 128)");
  static_assert(QTile::kBytes % 1024 == 0 && KVTile::kBytes % 1024 == 0, "tiles keep 1024-byte alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block (sm_90: 227 KB)");
};

// Layout and counts of one instantiation of the lockstep kernel: two K/V stages.
template <int D, int Bc_, int kWarpgroups_>
struct ForwardSm90aLayout : ForwardSm90aSmem<D, 64 * kWarpgroups_, Bc_, 2> {
  static constexpr int kWarpgroups = kWarpgroups_;  // query rows: one wgmma M of 64 per warpgroup
  static constexpr int kThreads = kWarpgroups * tc::kWarpgroupThreads;
  // Key tiles as tall as query tiles start at or before the tile's first row, so every
  // key tile a block visits has visible keys for every warpgroup: they all take every
  // turn of the ping-pong (no per-warpgroup skipping to keep in step).
  static_assert(Bc_ == 64 * kWarpgroups && kWarpgroups == 2, "two warpgroups, Bc = Br: the ping-pong's shape");
};

// The instantiation the launcher (flash_forward_sm90a.cu) and the emulator tests run:
// two warpgroups (128 query rows) and key tiles of 128, the FlashAttention-3 shape at
// D 128 (docs/flash_attention.md: registers and shared memory), built at D 64 too.
template <int D>
using ForwardSm90a = ForwardSm90aLayout<D, 128, 2>;

namespace sm90a_detail {

// rows x D bf16 tile, rows [valid, rows) zero-filled, into the WgmmaTile layout at dst.
// Consecutive threads copy consecutive 16-byte chunks of a row (coalesced reads).
struct WgmmaTileLoad {
  template <int D, int kRows, int kThreads>
  static TC_DEVICE void tile(uint16_t* dst, const uint16_t* src, int row_stride, int valid, int tid) {
    constexpr int kChunks = D / 8;
    static_assert((kRows * kChunks) % kThreads == 0, "every thread copies the same number of chunks");
    TC_UNROLL
    for (int k = 0; k < kRows * kChunks / kThreads; ++k) {
      const int c = tid + k * kThreads, row = c / kChunks, col = (c % kChunks) * 8;
      const bool ok = row < valid;
      tc::cp_async_16(dst + tc::WgmmaTile<kRows, D>::offset(row, col), ok ? src + row * row_stride + col : src, ok);
    }
  }
};

// A warpgroup's running state at the start: O = 0, and the row max and sum seeded by the
// sink where there is one (a key of logit s_h and value 0; its sum once per quad).
template <int D, bool kSink>
TC_DEVICE void init_rows(const AttentionParams& p, const ForwardBlock& blk, int qcol, float (&o)[D / 2],
                         float (&m)[2], float (&l)[2]) {
  const float m_init = kSink ? p.sinks[blk.h] * kFwdLog2e : -INFINITY;
  TC_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    m[hh] = m_init;
    l[hh] = (kSink && qcol == 0) ? 1.f : 0.f;
  }
  TC_UNROLL
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
}

// P as the bf16 A fragments of P V: k-step k is the accumulators of n-blocks 2k, 2k + 1.
template <int kKP>
TC_DEVICE void pack_p(const float (&s)[8 * kKP], uint32_t (&pf)[kKP][4]) {
  TC_UNROLL
  for (int kb = 0; kb < kKP; ++kb) {
    pf[kb][0] = tc::pack_bf16x2(s[8 * kb + 0], s[8 * kb + 1]);
    pf[kb][1] = tc::pack_bf16x2(s[8 * kb + 2], s[8 * kb + 3]);
    pf[kb][2] = tc::pack_bf16x2(s[8 * kb + 4], s[8 * kb + 5]);
    pf[kb][3] = tc::pack_bf16x2(s[8 * kb + 6], s[8 * kb + 7]);
  }
}

// Epilogue of a warp whose warpgroup's products have all retired: normalise, affine term,
// stage the bf16 rows in the warp's rows of the Q tile (read by its warpgroup's wgmma
// only), then 16-byte stores.
template <int D, bool kAffine, typename QT>
TC_DEVICE void store_rows(const AttentionParams& p, const float* prefix, const ForwardBlock& blk, float (&o)[D / 2],
                          const float (&m)[2], const float (&l)[2], int wg_row0, int warp, int lane,
                          uint16_t* sQ) {
  const int qrow = lane / 4, qcol = lane % 4;
  AffineRow<D, kAffine> aff[2];
  TC_UNROLL
  for (int hh = 0; hh < 2; ++hh)
    aff[hh] = load_affine_row<D, kAffine>(p, prefix, blk, wg_row0 + 16 * warp + qrow + 8 * hh, qcol);
  TC_UNROLL
  for (int hh = 0; hh < 2; ++hh)
    forward_epilogue_row<D, kAffine, QT>(p, aff[hh], o, hh, blk, wg_row0 + 16 * warp + qrow + 8 * hh, qcol, m[hh],
                                         l[hh], sQ);
  tc::sync_warp();
  store_warp_rows<D, QT>(p, blk, wg_row0 + 16 * warp, lane, sQ);
}

}  // namespace sm90a_detail

template <int D, int Bc, int kWarpgroups, bool kSink, bool kAffine>
TC_DEVICE void flash_forward_sm90a_block(const AttentionParams& p, const float* prefix, unsigned char* smem) {
  using L = ForwardSm90aLayout<D, Bc, kWarpgroups>;
  using QT = typename L::QTile;
  using KVT = typename L::KVTile;
  using Load = sm90a_detail::WgmmaTileLoad;
  constexpr int Br = L::kBr, kNT = Bc / 8, kDT = D / 8, kKQ = D / 16, kKP = Bc / 16;
  const int T = static_cast<int>(p.T);
  const ForwardBlock blk = forward_block(p, Br);
  const int i0 = blk.i0;
  const int tid = static_cast<int>(tc::thread_idx().x);
  const int wg = tid / tc::kWarpgroupThreads, warp = (tid % tc::kWarpgroupThreads) / 32, lane = tid % 32;
  const int qrow = lane / 4, qcol = lane % 4;
  const int wg_row0 = 64 * wg;  // first tile row of this warpgroup

  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem + L::kQOffset);
  auto sK = [&](int s) { return L::k_stage(smem, s); };
  auto sV = [&](int s) { return L::v_stage(smem, s); };
  const ForwardRows rows = forward_rows<D, Br, Bc>(p, blk);
  load_first_tiles<Load, D, Br, Bc, L::kThreads>(p, rows, T, i0, sQ, sK(0), sV(0), tid);

  float o[D / 2];
  float m[2], l[2];
  sm90a_detail::init_rows<D, kSink>(p, blk, qcol, o, m, l);
  const float scale_log2 = p.scale * kFwdLog2e;
  const uint32_t q_base = tc::shared_address(sQ);
  const int row_top = i0 + wg_row0 + 16 * warp;  // first query row of this warp
  // Turns: warpgroup w issues its S after syncing on barrier kTurn + w, which the other
  // warpgroup arrives at once it has issued its own S; warpgroup 1's first arrival lets
  // warpgroup 0 start, and it skips its last one so no arrival is left over.
  constexpr int kTurn = 1;
  if (wg == 1) tc::named_barrier_arrive(kTurn, L::kThreads);

  for (int kt = 0; kt < rows.n_kt; ++kt) {
    const int j0 = kt * Bc;
    // This thread's copies of tile kt (and Q) landed and fenced for the async proxy before
    // tile kt + 1's copies are issued, so the fence (MEMBAR.ALL.CTA) has no copy in flight
    // to wait for; tile kt + 1 then loads while tile kt computes.
    tc::cp_async_wait<0>();
    tc::fence_proxy_async();
    issue_next_kv<Load, D, Bc, L::kThreads>(p, rows, T, kt, sK, sV, tid);
    tc::sync_block();  // everyone's copies of tile kt landed and fenced
    {
      const uint32_t k_base = tc::shared_address(sK(kt & 1)), v_base = tc::shared_address(sV(kt & 1));
      float s[Bc / 2];
      tc::named_barrier_sync(kTurn + wg, L::kThreads);  // this warpgroup's turn
      tc::wgmma_fence();  // o was rescaled in registers since the last wgmma
      TC_UNROLL
      for (int kb = 0; kb < kKQ; ++kb)
        tc::wgmma_ss<Bc, false, false>(s, QT::desc_k_major(q_base, wg_row0, kb), KVT::desc_k_major(k_base, 0, kb), kb > 0);
      tc::wgmma_commit();
      if (wg == 0 || kt + 1 < rows.n_kt) tc::named_barrier_arrive(kTurn + 1 - wg, L::kThreads);  // the other's turn
      tc::wgmma_wait<0>();
      tc::wgmma_fence_operand(s);

      // Online softmax on rows qrow, qrow + 8 of the warp (accumulator j: 2hh + e of n-block j/4).
      // Some key of the tile is after some row of the warp only in the block's last tile
      // (Bc = Br, the layout's static_assert): a block-uniform branch, so ptxas keeps no
      // divergent copy of the softmax.
      const bool diag = kt + 1 == rows.n_kt;
      online_softmax_rows<kNT, kDT>(s, o, diag, j0, row_top, qrow, qcol, scale_log2, m, l);

      // O += P V.
      uint32_t pf[kKP][4];
      sm90a_detail::pack_p<kKP>(s, pf);
      tc::wgmma_fence_operand(o);
      tc::wgmma_fence();
      TC_UNROLL
      for (int kb = 0; kb < kKP; ++kb) tc::wgmma_rs<D, true>(o, pf[kb], KVT::desc_mn_major(v_base, kb), true);
      tc::wgmma_commit();
      tc::wgmma_wait<0>();
      tc::wgmma_fence_operand(o);
    }
    tc::sync_block();  // stage kt & 1 is refilled by the next iteration's loads
  }

  // Every wgmma of this warpgroup retired (the block barrier above).
  sm90a_detail::store_rows<D, kAffine, QT>(p, prefix, blk, o, m, l, wg_row0, warp, lane, sQ);
}

}  // namespace kdtrain::flash
