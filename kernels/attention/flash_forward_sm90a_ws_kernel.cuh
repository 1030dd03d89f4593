// Fused causal attention forward for Hopper (sm_90a), warp-specialised and pipelined:
// the kernel body, written against primitives.cuh, wgmma.cuh, named barriers and
// setmaxnreg, so the same source runs on the GPU (flash_forward_sm90a.cu) and in the host
// SIMT emulator (tests/attention/test_flash_forward_sm90a_sim.cpp). Same contract,
// arguments, tiles, products and maths as the lockstep wgmma forward
// (flash_forward_sm90a_kernel.cuh), and the same bits: what differs is the schedule.
// Algorithm, resources, checks and predicted time: docs/flash_attention_forward_hopper.md.
//
// Three warpgroups, one block per (b, h, query tile of 128 rows), heaviest tiles first:
// - warpgroup 2, the producer (24 registers after setmaxnreg): Q and key tile 0, then
//   each key tile t into stage t % kStages of a K/V ring, once the consumers have
//   released the tile that stage held; it signals each tile "full" once its own copies
//   of it landed and were fenced for the async proxy.
// - warpgroups 0 and 1, the consumers (240 registers): query rows 64 wg.., per key tile
//   kt: S_kt = Q K_kt^T and then O += P_{kt-1} V_{kt-1} issued together (in their turn of
//   FlashAttention-3's ping-pong), S retired first, so the softmax of tile kt runs while
//   the previous tile's P V is on the tensor cores (FlashAttention-3's intra-warpgroup
//   overlap); then P V retired, tile kt - 1 released, O rescaled, P_kt packed. The last
//   tile's P V follows the loop.
// No block barrier after the start: the warpgroups meet only at named barriers (full,
// empty, turns), so the ping-pong's stagger survives from one tile to the next. The
// operations on O, m and l are those of the lockstep kernel in the same order (O
// rescaled by tile kt's factor after P_{kt-1} V_{kt-1} is added, before P_kt V_kt), so
// the two give the same bits.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention/flash_forward_sm90a_kernel.cuh"
#include "kernels/attention/flash_forward_steps.cuh"
#include "kernels/attention/params.h"
#include "kernels/tc/named_barrier.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/registers.cuh"
#include "kernels/tc/wgmma.cuh"

namespace kdtrain::flash {

// The lockstep kernel's tiles (two consumer warpgroups of 64 query rows, key tiles of
// 128) in three stages: tile kt's V is read by the P V issued in iteration kt + 1, while
// tile kt + 1 is read and tile kt + 2 loads.
template <int D, typename Smem = ForwardSm90aSmem<D, 128, 128, 3>>
struct ForwardSm90aWs : Smem {
  static constexpr int kConsumers = 2, kStages = Smem::kStages;
  static constexpr int kConsumerThreads = kConsumers * tc::kWarpgroupThreads;
  static constexpr int kProducerThreads = tc::kWarpgroupThreads;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  // Named barriers: the consumers' turns (1, 2), stage s full (3 + s) and empty (3 + kStages
  // + s), consumer warpgroup wg's products all retired (kRetired + wg).
  static constexpr int kTurn = 1, kFull = 3, kEmpty = kFull + kStages, kRetired = kEmpty + kStages;
  static constexpr int kConsumerRegisters = 240, kProducerRegisters = 24;
  static_assert(kRetired + kConsumers - 1 <= 15, "named barrier ids 1..15");
  static_assert(32 * (8 * kConsumerRegisters + 4 * kProducerRegisters) <= tc::kSmRegisters, "register file");
};

namespace sm90a_detail {

// WgmmaTileLoad's copies (the same chunk per thread) in a rolled loop: the producer's 24
// registers hold no unrolled addresses (unrolled, ptxas spilled 228 to 1,128 bytes there).
// A pass is whole 8-row swizzle patterns, so each pass's shared and global addresses are
// the previous pass's plus a constant: the loop adds instead of recomputing the swizzle
// and the 64-bit address (15 SASS instructions per copy, 24 before).
struct RolledWgmmaTileLoad {
  template <int D, int kRows, int kThreads>
  static TC_DEVICE void tile(uint16_t* dst, const uint16_t* src, int row_stride, int valid, int tid) {
    using Tile = tc::WgmmaTile<kRows, D>;
    constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kRows % kRowsPerPass == 0, "every thread copies whole passes");
    static_assert(kRowsPerPass % 8 == 0, "a pass moves the swizzle pattern by whole periods");
    constexpr int kDstStep = kRowsPerPass * 64;  // Tile::offset: a row of a 64-column block is 64 elements
    const int row0 = tid / kChunks, col = (tid % kChunks) * 8;
    uint16_t* to = dst + Tile::offset(row0, col);
    // 32-bit element offsets, as WgmmaTileLoad's row * row_stride: a 64-bit running pointer
    // and step made the 24 registers spill.
    const int src_step = kRowsPerPass * row_stride;
    int at = row0 * row_stride + col;
    TC_ROLLED
    for (int row = row0; row < kRows; row += kRowsPerPass, to += kDstStep, at += src_step) {
      const bool ok = row < valid;
      tc::cp_async_16(to, src + (ok ? at : 0), ok);
    }
  }
};

// Producer: Q and tile 0 as the first cp.async group, then tile t (stage t % kStages, once
// the consumers released tile t - kStages) as group t; tile t - 1 is signalled full once
// only the newest group may still be in flight. Each thread fences its own landed copies
// for the async proxy before it arrives (the emulator checks that it is the landing thread).
template <int D>
TC_DEVICE void forward_ws_producer(const AttentionParams& p, const ForwardRows& rows, int i0, unsigned char* smem,
                                   int ptid) {
  using L = ForwardSm90aWs<D>;
  using Load = RolledWgmmaTileLoad;
  const int T = static_cast<int>(p.T);
  auto sK = [&](int t) { return L::k_stage(smem, t % L::kStages); };
  auto sV = [&](int t) { return L::v_stage(smem, t % L::kStages); };
  auto* sQ = reinterpret_cast<uint16_t*>(smem + L::kQOffset);
  load_first_tiles<Load, D, L::kBr, L::Bc, L::kProducerThreads>(p, rows, T, i0, sQ, sK(0), sV(0), ptid);
  for (int t = 1; t <= rows.n_kt; ++t) {
    if (t < rows.n_kt) {
      if (t >= L::kStages) tc::named_barrier_sync(L::kEmpty + t % L::kStages, L::kThreads);
      const int j0 = t * L::Bc;
      const int64_t at = static_cast<int64_t>(j0) * p.qkv_token;
      Load::template tile<D, L::Bc, L::kProducerThreads>(sK(t), rows.k + at, rows.ld, T - j0, ptid);
      Load::template tile<D, L::Bc, L::kProducerThreads>(sV(t), rows.v + at, rows.ld, T - j0, ptid);
    }
    tc::cp_async_commit();  // empty past the last tile, so the wait below keeps its meaning
    tc::cp_async_wait<1>();
    tc::fence_proxy_async();
    tc::named_barrier_arrive(L::kFull + (t - 1) % L::kStages, L::kThreads);
  }
}

}  // namespace sm90a_detail

template <int D, bool kSink, bool kAffine>
TC_DEVICE void flash_forward_sm90a_ws_block(const AttentionParams& p, const float* prefix, unsigned char* smem) {
  using L = ForwardSm90aWs<D>;
  using QT = typename L::QTile;
  using KVT = typename L::KVTile;
  constexpr int Br = L::kBr, Bc = L::Bc, kNT = Bc / 8, kDT = D / 8, kKQ = D / 16, kKP = Bc / 16, S = L::kStages;
  const ForwardBlock blk = forward_block(p, Br);
  const ForwardRows rows = forward_rows<D, Br, Bc>(p, blk);
  const int tid = static_cast<int>(tc::thread_idx().x);
  const int wg = tid / tc::kWarpgroupThreads;
  if (wg == L::kConsumers) {
    tc::set_max_registers<L::kProducerRegisters, false>();
    sm90a_detail::forward_ws_producer<D>(p, rows, blk.i0, smem, tid - L::kConsumerThreads);
    return;
  }
  tc::set_max_registers<L::kConsumerRegisters, true>();
  const int warp = (tid % tc::kWarpgroupThreads) / 32, lane = tid % 32;
  const int qrow = lane / 4, qcol = lane % 4;
  const int wg_row0 = 64 * wg;
  auto* sQ = reinterpret_cast<uint16_t*>(smem + L::kQOffset);
  auto k_stage = [&](int t) { return tc::shared_address(L::k_stage(smem, t % S)); };
  auto v_stage = [&](int t) { return tc::shared_address(L::v_stage(smem, t % S)); };

  float o[D / 2], s[Bc / 2];
  float m[2], l[2], corr[2];
  uint32_t pf[kKP][4];  // P_{kt-1}: the A fragments of the P V in flight
  sm90a_detail::init_rows<D, kSink>(p, blk, qcol, o, m, l);
  const float scale_log2 = p.scale * kFwdLog2e;
  const uint32_t q_base = tc::shared_address(sQ);
  const int row_top = blk.i0 + wg_row0 + 16 * warp;
  const int n_kt = rows.n_kt;
  // Every wgmma below is issued unconditionally (tile 0 is peeled off the loop): a wgmma
  // under a condition makes ptxas serialise all of them (its C7520 warning).
  // S_t = Q K_t^T (issue only), in this warpgroup's turn once tile t has landed.
  auto take_turn_issue_s = [&](int t) {
    tc::named_barrier_sync(L::kFull + t % S, L::kThreads);  // tile t (and Q) landed, fenced
    tc::named_barrier_sync(L::kTurn + wg, L::kConsumerThreads);
    tc::wgmma_fence_operand(o);  // rescaled in registers since the last P V
    tc::wgmma_fence();
    TC_UNROLL
    for (int kb = 0; kb < kKQ; ++kb)
      tc::wgmma_ss<Bc, false, false>(s, QT::desc_k_major(q_base, wg_row0, kb), KVT::desc_k_major(k_stage(t), 0, kb),
                                     kb > 0);
    tc::wgmma_commit();
  };
  // O += P_t V_t (issue only).
  auto issue_pv = [&](int t) {
    TC_UNROLL
    for (int kb = 0; kb < kKP; ++kb) tc::wgmma_rs<D, true>(o, pf[kb], KVT::desc_mn_major(v_stage(t), kb), true);
    tc::wgmma_commit();
  };
  // The other warpgroup's turn; warpgroup 1 skips its last hand-over so none is left over.
  auto hand_over_turn = [&](int t) {
    if (wg == 0 || t + 1 < n_kt) tc::named_barrier_arrive(L::kTurn + 1 - wg, L::kConsumerThreads);
  };
  // Softmax of S_t, masked on the block's last tile only (Bc = Br; a block-uniform branch).
  auto softmax = [&](int t) {
    tc::wgmma_fence_operand(s);
    softmax_rows_scores<kNT>(s, t + 1 == n_kt, t * Bc, row_top, qrow, qcol, scale_log2, m, l, corr);
  };
  // O rescaled by tile t's factor, then P_t packed as the A fragments of its P V.
  auto rescale_and_pack = [&] {
    TC_UNROLL
    for (int hh = 0; hh < 2; ++hh) rescale_output_row<kDT>(o, hh, corr[hh]);
    sm90a_detail::pack_p<kKP>(s, pf);
  };
  // Turns as in the lockstep kernel: warpgroup 1's first arrival lets warpgroup 0 start.
  if (wg == 1) tc::named_barrier_arrive(L::kTurn, L::kConsumerThreads);

  take_turn_issue_s(0);
  hand_over_turn(0);
  tc::wgmma_wait<0>();
  softmax(0);
  rescale_and_pack();
  for (int kt = 1; kt < n_kt; ++kt) {
    take_turn_issue_s(kt);
    issue_pv(kt - 1);
    hand_over_turn(kt);
    tc::wgmma_wait<1>();  // S_kt retired; P_{kt-1} V_{kt-1} may still run
    softmax(kt);
    tc::wgmma_wait<0>();
    tc::wgmma_fence_operand(o);
    // Tile kt - 1 is read by nothing in flight: its stage may be refilled (the producer
    // waits for this only for the tiles it refills).
    if (kt - 1 + S < n_kt) tc::named_barrier_arrive(L::kEmpty + (kt - 1) % S, L::kThreads);
    rescale_and_pack();
  }
  tc::wgmma_fence_operand(o);
  tc::wgmma_fence();
  issue_pv(n_kt - 1);
  tc::wgmma_wait<0>();
  tc::wgmma_fence_operand(o);

  // Epilogue as the lockstep kernel's: this warpgroup's rows of the Q tile are read by its
  // own products only, so once all four warps retired theirs (a warp runs past its own
  // wait while its siblings' parts of a product may not even be issued) they stage the
  // bf16 output rows.
  tc::named_barrier_sync(L::kRetired + wg, tc::kWarpgroupThreads);
  sm90a_detail::store_rows<D, kAffine, QT>(p, prefix, blk, o, m, l, wg_row0, warp, lane, sQ);
}

}  // namespace kdtrain::flash
