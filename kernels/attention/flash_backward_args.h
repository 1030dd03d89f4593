// What the kernels of the fused attention backward take: the call's AttentionParams
// (params.h: plain C++, bf16 as raw words, so host code and the SIMT emulator need no
// CUDA header) and how this pass carves its workspace. Shared by the CUDA launcher
// (flash_backward.cu) and the emulated tests.
#pragma once
#include <cstdint>

#include "kernels/attention/flash_backward_schedule.h"
#include "kernels/attention/flash_backward_workspace.h"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/params.h"

namespace kdtrain::flash {

// Backward tiles, warps and dq slices: one place (flash_tiles) decides, the kernels
// static_assert against these.
constexpr FlashTiles kBwdTiles = flash_tiles(64, FlashPass::backward);
constexpr int kBwdThreads = 32 * kBwdTiles.warps;
// The main kernel's block: the MMA warps, plus the dq writer's warpgroup in the sm_90a
// deterministic build (flash_backward_dq_warp.cuh).
constexpr int bwd_main_threads(bool wgmma, bool atomic) { return kBwdThreads + (wgmma && !atomic ? 128 : 0); }
constexpr int kBwdDqSlices = 1;  // one semaphore per dq tile: one thread adds the whole tile
// (b, kv head) pairs ticketed together (flash_backward_schedule.h). Key tile kt + 1 of a group
// takes its ticket kBwdChunkGroups tickets after key tile kt, about kBwdChunkGroups / 2
// steps later on a full H100 (132 blocks finishing ~2 per step), so the dq tile it reads
// was written that long ago: 4 steps x 132 blocks x (Br x D x 4 bytes) = 8.5 MB (D = 64),
// 17 MB (D = 128) of dq traffic in between, well inside the 50 MB L2. More groups per
// chunk keep more slots busy: the schedule model (tests/attention/test_flash_backward_schedule.cpp)
// at B = 8, T = 2048 leaves 4% (D = 64) / 7.5% (D = 128) of 132 slots idle with 8, 17% /
// 26% with 1. To be tuned on a GPU.
constexpr int64_t kBwdChunkGroups = 8;

// Timing only, never the default (CMake option KDTRAIN_ATTN_ATOMIC_DQ): dq (and affine's
// row sums) accumulated from the warps' registers with vector float atomics
// (red.global.add.v4.f32) into a zeroed accumulator, in whatever order the blocks arrive,
// instead of the ordered bulk reductions under semaphores (flash_backward_steps.cuh). The
// results' bits then depend on timing; one GPU run of both builds measures what the order
// costs (attn_determinism_cost, scripts/gpu/gpu_window.sh).
#if defined(KDTRAIN_ATTN_ATOMIC_DQ) && KDTRAIN_ATTN_ATOMIC_DQ
constexpr bool kBwdAtomicDq = true;
#else
constexpr bool kBwdAtomicDq = false;
#endif

static_assert(flash_tiles(128, FlashPass::backward).Br == kBwdTiles.Br &&
                  flash_tiles(128, FlashPass::backward).Bc == kBwdTiles.Bc,
              "one backward tile shape for every head dim (few instantiations)");

// The kernels' one argument: the call's params, whole and unchanged, and this pass's
// schedule and carve-up of the workspace.
struct BwdArgs {
  AttentionParams p;
  BwdSchedule sched;
  int64_t T_pad = 0;    // rows of the (B, H, T_pad) statistics
  int64_t n_chunks = 0; // preprocessing row chunks per (b, kv head)
  // Workspace regions (flash_backward_workspace.h).
  int* ints = nullptr;  // counters, then the semaphores
  float* lse2 = nullptr;
  float* drow = nullptr;
  float* alpha_f = nullptr;
  float* sigma = nullptr;
  float* rs_acc = nullptr;
  float* sink_part = nullptr;
  float* vsum = nullptr;
  float* scan_sums = nullptr;
  float* u = nullptr;  // (B, T, Hkv, D) inside the dq_acc region, before the main kernel
  float* dq_acc = nullptr;

  constexpr int* sems() const { return ints + BwdWorkspace::kCounters; }
};

// The workspace of this call (tiles, dq slices and row chunk fixed above).
inline BwdWorkspace bwd_workspace(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, bool sink,
                                  bool affine) {
  return BwdWorkspace(B, T, H, Hkv, D, sink, affine, kBwdTiles, kBwdDqSlices, kRowChunk);
}

inline BwdArgs make_bwd_args(const AttentionParams& p, unsigned char* workspace) {
  const bool sink = p.sink, affine = p.affine;
  const BwdWorkspace ws = bwd_workspace(p.B, p.T, p.H, p.Hkv, p.D, sink, affine);
  BwdArgs a;
  a.p = p;
  a.sched = make_bwd_schedule(p, kBwdTiles, kBwdChunkGroups);
  a.T_pad = ws.T_pad;
  a.n_chunks = ws.n_chunks;
  auto f = [&](size_t off) { return reinterpret_cast<float*>(workspace + off); };
  a.ints = reinterpret_cast<int*>(workspace + ws.ints);
  a.lse2 = f(ws.lse2);
  a.drow = f(ws.drow);
  if (affine) {
    a.alpha_f = f(ws.alpha);
    a.sigma = f(ws.sigma);
    a.rs_acc = f(ws.rs_acc);
    a.vsum = f(ws.vsum);
    a.scan_sums = f(ws.scan);
    a.u = f(ws.dq_acc);
  }
  if (sink) a.sink_part = f(ws.sink);
  a.dq_acc = f(ws.dq_acc);
  return a;
}

}  // namespace kdtrain::flash
