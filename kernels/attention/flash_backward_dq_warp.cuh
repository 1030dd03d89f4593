// The sm_90a deterministic backward's dq writer warp (bwd_main with kWgmma and not
// kAtomic, flash_backward_kernel.cuh): a ninth warp that does nothing but hand the staged
// dQ tiles to the ordered fp32 accumulator, so that no MMA warp ever waits on global
// memory or issues a gpu-scope fence for dq (FlashAttention-3's deterministic design).
// The writer is warp 8, in a third warpgroup (warps 8..11; 9..11 leave at once) that
// gives its registers to the two MMA warpgroups (setmaxnreg: 9 warps at one block per SM
// would cap every thread at 168 registers, and the D 128 kernel would spill).
// Hand-over through two staging buffers and named barriers (bar.sync / bar.arrive):
//   MMA warps, step s, buffer b = s % 2: (s >= 2) bar.sync kDqFree + b; stage dQ into b;
//     fence.proxy.async; bar.arrive kDqFull + b   (no wait)
//   writer warp, step s: bar.sync kDqFull + b; lane 0: wait for the semaphore to read kt,
//     one bulk reduction (a bulk store for kt = 0), wait until it has read b;
//     (s + 2 < steps) bar.arrive kDqFree + b; lane 0 (s >= 1): wait until step s - 1's
//     writes are complete (bulk_wait<1>: step s's group stays in flight), release step
//     s - 1's tile (kt + 1); after the last step: wait for all, release the last tile
// A buffer is written again only after the writer's bulk group has read it; each
// barrier phase gets exactly one arrival set of each side (the other side cannot lap
// it: it first waits on the opposite barrier of the same buffer). Order, deadlock
// argument: flash_backward_schedule.h; design: docs/flash_attention_backward.md.
//
// Two tiles in flight: the completion round trip of step s - 1's group overlaps step
// s's poll and issue instead of running in series with them.
//   - Still ordered: each release follows the completion wait of its own tile's group
//     (bulk_wait<1> retires every group but step s's, so step s - 1's writes are complete
//     and visible to lane 0, and st.release publishes them, as with bulk_wait<0> before).
//     The group left in flight is another tile (the steps of an item are distinct (qt, h)
//     pairs), whose semaphore is not yet released: one reduction per address in flight.
//   - No deadlock: the release of step s - 1 now also waits for step s's semaphore, i.e.
//     for key tile kt - 1's release of step s's tile, which in turn waits only on kt - 2,
//     ...; every wait goes to a smaller key tile of the same (b, g), and key tile 0 never
//     waits, so the ticket-order induction of flash_backward_schedule.h still applies
//     (a smaller key tile has a smaller ticket and is resident or finished).
#pragma once
#include <cstdint>

#include "kernels/attention/flash_backward_steps.cuh"
#include "kernels/tc/bulk.cuh"
#include "kernels/tc/named_barrier.cuh"
#include "kernels/tc/registers.cuh"
#include "kernels/tc/sync.cuh"

namespace kdtrain::flash_bwd {

// Named barrier ids: 1 orders the MMA warps among themselves (their __syncthreads), 2..3
// "buffer b staged", 4..5 "buffer b free".
constexpr int kMmaBarrier = 1, kDqFull = 2, kDqFree = 4;
constexpr int kMmaThreads = flash::kBwdThreads, kHandThreads = flash::kBwdThreads + 32;
// Registers per thread after setmaxnreg: 8 MMA warps x 240 + 4 writer-group warps x 24,
// times 32 lanes, fit the SM's 65,536 (each of its 4 quarters: 2 x 240 + 24, x 32 <= 16,384).
constexpr int kMmaRegisters = 240, kWriterRegisters = 24;
static_assert(32 * (8 * kMmaRegisters + 4 * kWriterRegisters) <= tc::kSmRegisters, "register file");

// The MMA warps' block barrier: all threads, or only the MMA warps when a writer warp runs.
template <bool kWriterWarp>
TC_DEVICE void mma_barrier() {
  if constexpr (kWriterWarp) tc::named_barrier_sync(kMmaBarrier, kMmaThreads);
  else tc::sync_block();
}

// MMA warps, step s: the warp's dQ slice (and rsum) into buffer s % 2 once the writer has
// read that buffer's previous tile, fenced for the bulk read, then signalled.
template <int D, bool kAffine>
TC_DEVICE void stage_for_writer(unsigned char* smem, const float (&qacc)[D / 16][4], float rsum,
                                const BwdLanes<D>& ln, int s) {
  const int b = s & 1;
  if (s >= 2) tc::named_barrier_sync(kDqFree + b, kHandThreads);
  stage_dq<D, kAffine, true>(smem, qacc, rsum, ln, b);
  tc::named_barrier_arrive(kDqFull + b, kHandThreads);
}

// Lane 0 of the writer warp: tile `tile`'s contribution of key tile kt from buffer b.
template <int D, bool kAffine>
TC_DEVICE void add_staged_tile(const BwdArgs& a, const unsigned char* smem, int64_t tile, int kt, int b) {
  using L = MainLayout<D, kAffine>;
  const auto* dq = reinterpret_cast<const float*>(smem + L::dq_buffer(b));
  const auto* rs = reinterpret_cast<const float*>(smem + L::dq_buffer(b) + L::kDqBytes);
  float* dq_acc = a.dq_acc + tile * (L::Br * D);
  float* rs_acc = a.rs_acc + tile * L::Br;  // (b, h, T_pad) rows: T_pad = n_qt Br
  if (kt == 0) {
    tc::bulk_store(dq_acc, dq, L::kDqBytes);
    if constexpr (kAffine) tc::bulk_store(rs_acc, rs, L::kRsBytes);
  } else {
    tc::wait_equal(a.sems() + tile, kt);
    tc::bulk_reduce_add_f32(dq_acc, dq, L::kDqBytes);
    if constexpr (kAffine) tc::bulk_reduce_add_f32(rs_acc, rs, L::kRsBytes);
  }
  tc::bulk_commit();
  tc::bulk_wait_read<0>();
}

// The writer warp's whole work item: every step's tile, in step order, each released one
// step late (two bulk groups in flight).
template <int D, bool kAffine>
TC_DEVICE void dq_writer_warp(const BwdArgs& a, const unsigned char* smem, const BwdBlock& w) {
  tc::set_max_registers<kWriterRegisters, false>();
  if (tc::warp_id() != flash::kBwdTiles.warps) return;  // warps 9..11: only their registers were wanted
  const flash::BwdSchedule& sc = a.sched;
  const bool leader = tc::lane_id() == 0;
  int64_t in_flight = 0;  // the previous step's tile, issued and not yet released
  for (int s = 0; s < w.steps; ++s) {
    const int b = s & 1;
    const flash::BwdStep st = sc.step(s);
    const int64_t tile = ((w.b * a.p.H + w.g * sc.group + st.head_in_group) * sc.n_qt) + st.qt;
    tc::named_barrier_sync(kDqFull + b, kHandThreads);
    if (leader) add_staged_tile<D, kAffine>(a, smem, tile, w.kt, b);
    tc::sync_warp();  // lane 0's bulk group has read buffer b
    if (s + 2 < w.steps) tc::named_barrier_arrive(kDqFree + b, kHandThreads);
    if (leader && s > 0) {
      tc::bulk_wait<1>();  // step s - 1's writes complete; step s's group stays in flight
      tc::store_release(a.sems() + in_flight, w.kt + 1);
    }
    in_flight = tile;
  }
  if (leader && w.steps > 0) {
    tc::bulk_wait<0>();
    tc::store_release(a.sems() + in_flight, w.kt + 1);
  }
}

}  // namespace kdtrain::flash_bwd
