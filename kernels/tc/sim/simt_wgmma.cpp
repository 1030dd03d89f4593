// SIMT emulator: the warpgroup collectives of wgmma (PTX ISA 9.7.15) and
// fence.proxy.async. Model: simt.h; descriptors and layouts: kernels/tc/wgmma_desc.h.
//
// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 (9.7.15.5.2), warpgroup thread
// t = 32w + 4g + q (warp w of the group, lane 4g + q):
//   D (64 x N, f32): d[i], i < N/2: row 16w + g + 8((i%4)/2), col 8(i/4) + 2q + (i%2).
//   A from registers (64 x 16 bf16): a[j] holds two elements, low half first, element
//     e = 2j + h at row 16w + g + 8(j%2), col 2q + h + 8(j/2) (the mma.m16n8k16 A
//     fragment of the warp's 16 rows).
//   A (64 x 16) and B (16 x N) from shared memory through descriptors; imm-trans-a/b = 0
//     means K-major, 1 MN-major.
// D = A B + (scale-d ? D : 0), the 16 exact bf16 products summed in fp32 in k order onto
// the accumulator, as the emulator's mma.sync. imm-scale-a/b are +1 (the wrappers in
// kernels/tc/wgmma.cuh use no other); only .bf16 inputs with .f32 accumulators exist here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <sstream>

#include "kernels/tc/sim/simt_internal.h"
#include "kernels/tc/wgmma_desc.h"

namespace kdtrain::sim {
namespace detail {

namespace {
constexpr int kGroupThreads = 128;
constexpr uint32_t kRegisterPoison = 0x7fb37fb3u;  // an fp32 NaN: an accumulator read while in flight
}  // namespace

enum class WgOp { none, fence, mma, commit, wait };

// One lane's deposit at the current collective.
struct WgLane {
  float* d = nullptr;
  uint32_t a[4] = {};
};

// An accumulator (one register array per thread) with mma_async in flight: its values
// live here, the registers hold NaN until the last of its operations retires.
struct WgAccum {
  float* regs[kGroupThreads] = {};
  int n = 0;
  int pending = 0;
  std::vector<float> value;  // [thread][n/2]
};

struct WgMma {
  size_t accum = 0;
  int n = 0;
  uint64_t a_desc = 0, b_desc = 0;
  bool a_from_regs = false, trans_a = false, trans_b = false, accumulate = false;
  std::vector<uint32_t> a;  // [thread][4] when a_from_regs
};

struct Warpgroup {
  WgOp op = WgOp::none;
  int arrived = 0;
  // The collective's uniform operands, fixed by the first lane to arrive.
  int n = 0, pending_groups = 0;
  uint64_t a_desc = 0, b_desc = 0;
  bool a_from_regs = false, trans_a = false, trans_b = false, accumulate = false;
  WgLane io[kGroupThreads];
  bool fenced = false;  // a wgmma.fence since the last wait_group (or the start)
  std::vector<WgMma> open;
  std::deque<std::vector<WgMma>> groups;
  std::vector<WgAccum> accums;
};

namespace {

const char* name_of(WgOp op) {
  switch (op) {
    case WgOp::none: return "none";
    case WgOp::fence: return "wgmma.fence";
    case WgOp::mma: return "wgmma.mma_async";
    case WgOp::commit: return "wgmma.commit_group";
    case WgOp::wait: return "wgmma.wait_group";
  }
  return "?";
}

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

Warpgroup& group_of(BlockRun& r) {
  const unsigned g = r.current->warp / 4;
  const size_t nthreads = r.fibers->size();
  if (size_t(g + 1) * kGroupThreads > nthreads)
    fail("wgmma needs whole warpgroups of 128 threads; the block has " + std::to_string(nthreads));
  if (r.warpgroups.size() <= g) r.warpgroups.resize(g + 1);
  if (!r.warpgroups[g]) r.warpgroups[g] = std::make_shared<Warpgroup>();
  return *r.warpgroups[g];
}

// The current thread joins `op`; the first lane fixes the uniform operands, the others
// must match them (a divergent or non-uniform collective is an error).
Warpgroup& join(WgOp op, const Warpgroup& operands) {
  BlockRun& r = current_run();
  Warpgroup& g = group_of(r);
  if (g.arrived == 0) {
    g.op = op;
    g.n = operands.n;
    g.pending_groups = operands.pending_groups;
    g.a_desc = operands.a_desc;
    g.b_desc = operands.b_desc;
    g.a_from_regs = operands.a_from_regs;
    g.trans_a = operands.trans_a;
    g.trans_b = operands.trans_b;
    g.accumulate = operands.accumulate;
  } else if (g.op != op) {
    std::ostringstream s;
    s << "threads of warpgroup " << r.current->warp / 4 << " reached different collectives (" << name_of(g.op)
      << " and " << name_of(op) << "): divergent warpgroup code";
    fail(s.str());
  } else if (g.n != operands.n || g.pending_groups != operands.pending_groups || g.a_desc != operands.a_desc ||
             g.b_desc != operands.b_desc || g.a_from_regs != operands.a_from_regs || g.trans_a != operands.trans_a ||
             g.trans_b != operands.trans_b || g.accumulate != operands.accumulate) {
    fail(std::string(name_of(op)) + ": operands (descriptors, shape, flags, scale-d) differ between the threads of a warpgroup");
  }
  return g;
}

void check_desc(uint64_t desc, const char* which) {
  const tc::WgmmaDescFields f = tc::wgmma_decode(desc);
  if (f.base_offset != 0) fail(std::string(which) + " descriptor: base offset " + std::to_string(f.base_offset) + " is not modelled (use 0)");
  const uint32_t row_bits = (1u << tc::wgmma_swizzle_bits(f.swizzle)) - 1u;
  if (((f.start >> 7) & row_bits) != 0) {
    std::ostringstream s;
    s << which << " descriptor: start address " << f.start << " is not at the first row of a "
      << 8 * 16 * tc::wgmma_swizzle_chunks(f.swizzle) << "-byte swizzle pattern";
    fail(s.str());
  }
}

// bf16 element (mn, k) of a shared-memory operand, checked to lie in shared memory and
// to be ordered for the async proxy.
float read_operand(BlockRun& r, uint64_t desc, bool mn_major, int mn, int k) {
  const uint32_t addr = tc::wgmma_element_address(tc::wgmma_decode(desc), mn_major ? tc::WgmmaMajor::mn : tc::WgmmaMajor::k, mn, k);
  check_shared(r.smem + addr, 2, "wgmma operand");
  const uint32_t owner = r.unfenced_owner[addr / 16];
  if (owner != 0) {
    std::ostringstream s;
    s << "wgmma reads shared memory (byte " << addr << ") that thread " << owner - 1
      << " landed by cp.async without a following fence.proxy.async";
    fail(s.str());
  }
  uint16_t h;
  std::memcpy(&h, r.smem + addr, 2);
  return as_float(static_cast<uint32_t>(h) << 16);
}

void execute(BlockRun& r, Warpgroup& g, const WgMma& op) {
  WgAccum& acc = g.accums[op.accum];
  const int n = op.n, half = n / 2;
  std::vector<float> A(64 * 16), B(16 * static_cast<size_t>(n));
  if (op.a_from_regs) {
    for (int t = 0; t < kGroupThreads; ++t) {
      const int w = t / 32, gid = (t % 32) / 4, q = t % 4;
      for (int j = 0; j < 4; ++j)
        for (int h = 0; h < 2; ++h) {
          const uint32_t reg = op.a[4 * t + j];
          A[(16 * w + gid + 8 * (j % 2)) * 16 + 2 * q + h + 8 * (j / 2)] = as_float(h ? reg & 0xffff0000u : reg << 16);
        }
    }
  } else {
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k) A[m * 16 + k] = read_operand(r, op.a_desc, op.trans_a, m, k);
  }
  for (int k = 0; k < 16; ++k)
    for (int c = 0; c < n; ++c) B[k * n + c] = read_operand(r, op.b_desc, op.trans_b, c, k);
  for (int t = 0; t < kGroupThreads; ++t) {
    const int w = t / 32, gid = (t % 32) / 4, q = t % 4;
    for (int i = 0; i < half; ++i) {
      const int row = 16 * w + gid + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * q + (i % 2);
      float& v = acc.value[static_cast<size_t>(t) * half + i];
      float sum = op.accumulate ? v : 0.f;
      for (int k = 0; k < 16; ++k) sum += A[row * 16 + k] * B[k * n + col];
      v = sum;
    }
  }
  if (--acc.pending == 0)
    for (int t = 0; t < kGroupThreads; ++t)
      std::memcpy(acc.regs[t], &acc.value[static_cast<size_t>(t) * half], sizeof(float) * half);
}

// Completes the collective when the current thread is the last of its warpgroup to
// arrive; otherwise waits for the others.
bool last_to_arrive(BlockRun& r, Warpgroup& g) {
  if (++g.arrived < kGroupThreads) {
    wait_as(FiberState::at_warp_collective);
    return false;
  }
  return true;
}

void release(BlockRun& r, Warpgroup& g) {
  g.arrived = 0;
  g.op = WgOp::none;
  ++r.stats->warp_collectives;
  const unsigned first = (r.current->warp / 4) * kGroupThreads;
  for (int t = 0; t < kGroupThreads; ++t) {
    Fiber& f = (*r.fibers)[first + t];
    if (f.state == FiberState::at_warp_collective) f.state = FiberState::ready;
  }
}

void issue(BlockRun& r, Warpgroup& g) {
  if (!g.fenced) fail("wgmma.mma_async without a wgmma.fence since the warpgroup's last wgmma.wait_group (or its start)");
  if (!g.a_from_regs) check_desc(g.a_desc, "A");
  check_desc(g.b_desc, "B");
  WgMma op;
  op.n = g.n;
  op.a_desc = g.a_desc;
  op.b_desc = g.b_desc;
  op.a_from_regs = g.a_from_regs;
  op.trans_a = g.trans_a;
  op.trans_b = g.trans_b;
  op.accumulate = g.accumulate;
  if (g.a_from_regs) {
    op.a.resize(4 * kGroupThreads);
    for (int t = 0; t < kGroupThreads; ++t) std::memcpy(&op.a[4 * t], g.io[t].a, sizeof g.io[t].a);
  }
  // The accumulator: one already in flight (same registers in every thread) or a new one.
  size_t k = 0;
  for (; k < g.accums.size(); ++k) {
    const WgAccum& a = g.accums[k];
    if (a.pending == 0) continue;  // retired: its registers hold the results again
    int same = 0;
    for (int t = 0; t < kGroupThreads; ++t) same += a.regs[t] == g.io[t].d;
    if (same == kGroupThreads) break;
    if (same != 0) fail("wgmma.mma_async: accumulator registers partly overlap another wgmma in flight");
  }
  const int half = g.n / 2;
  if (k == g.accums.size()) {
    WgAccum a;
    a.n = g.n;
    a.value.resize(static_cast<size_t>(kGroupThreads) * half);
    for (int t = 0; t < kGroupThreads; ++t) {
      a.regs[t] = g.io[t].d;
      std::memcpy(&a.value[static_cast<size_t>(t) * half], a.regs[t], sizeof(float) * half);
      for (int i = 0; i < half; ++i) std::memcpy(&a.regs[t][i], &kRegisterPoison, 4);
    }
    g.accums.push_back(std::move(a));
  } else if (g.accums[k].n != g.n) {
    fail("wgmma.mma_async: an accumulator in flight is reused with another shape");
  }
  op.accum = k;
  ++g.accums[k].pending;
  g.open.push_back(std::move(op));
  ++r.stats->wgmma;
}

void retire_groups(BlockRun& r, Warpgroup& g, int keep) {
  while (g.groups.size() > static_cast<size_t>(keep)) {
    for (const WgMma& op : g.groups.front()) execute(r, g, op);
    g.groups.pop_front();
  }
  // Drop accumulators with nothing left in flight (indices of the rest stay valid:
  // nothing is in flight on them once the last group has retired).
  if (g.groups.empty() && g.open.empty()) g.accums.clear();
  g.fenced = false;
}

}  // namespace

void note_cp_async_landing(BlockRun& r, Fiber& f, const unsigned char* dst) {
  const auto chunk = static_cast<uint32_t>((dst - r.smem) / 16);
  r.unfenced_owner[chunk] = f.linear + 1;
  f.unfenced_chunks.push_back(chunk);
}

void reset_warpgroups(BlockRun& r) { r.warpgroups.clear(); }

void finish_warpgroups(BlockRun& r) {
  for (size_t k = 0; k < r.warpgroups.size(); ++k) {
    const auto& g = r.warpgroups[k];
    if (g && (!g->open.empty() || !g->groups.empty()))
      throw std::runtime_error("sim: block (" + std::to_string(r.block.x) + "," + std::to_string(r.block.y) + "," +
                               std::to_string(r.block.z) + ") warpgroup " + std::to_string(k) +
                               " exited with wgmma.mma_async never retired by a wgmma.wait_group");
  }
}

}  // namespace detail

using namespace detail;

uint32_t shared_address(const void* p) {
  BlockRun& r = current_run();
  check_shared(p, 1, "shared_address");
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - r.smem);
}

void wgmma_fence() {
  BlockRun& r = current_run();
  Warpgroup& g = join(WgOp::fence, Warpgroup{});
  if (!last_to_arrive(r, g)) return;
  g.fenced = true;
  release(r, g);
}

void wgmma_commit() {
  BlockRun& r = current_run();
  Warpgroup& g = join(WgOp::commit, Warpgroup{});
  if (!last_to_arrive(r, g)) return;
  g.groups.push_back(std::move(g.open));
  g.open.clear();
  release(r, g);
}

void wgmma_wait(int pending_groups) {
  BlockRun& r = current_run();
  Warpgroup operands;
  operands.pending_groups = pending_groups;
  Warpgroup& g = join(WgOp::wait, operands);
  if (!last_to_arrive(r, g)) return;
  retire_groups(r, g, pending_groups);
  release(r, g);
}

void wgmma_bf16(float* d, int n, uint64_t a_desc, const uint32_t* a_regs, uint64_t b_desc, bool trans_a, bool trans_b,
                bool accumulate) {
  BlockRun& r = current_run();
  if (n < 8 || n > 256 || n % 8 != 0) fail("wgmma.mma_async: N must be a multiple of 8 in [8, 256]");
  Warpgroup operands;
  operands.n = n;
  operands.a_from_regs = a_regs != nullptr;
  operands.a_desc = a_regs != nullptr ? 0 : a_desc;
  operands.b_desc = b_desc;
  operands.trans_a = a_regs == nullptr && trans_a;
  operands.trans_b = trans_b;
  operands.accumulate = accumulate;
  Warpgroup& g = join(WgOp::mma, operands);
  WgLane& io = g.io[r.current->linear % kGroupThreads];
  io.d = d;
  if (a_regs != nullptr) std::memcpy(io.a, a_regs, sizeof io.a);
  if (!last_to_arrive(r, g)) return;
  issue(r, g);
  release(r, g);
}

void fence_proxy_async() {
  BlockRun& r = current_run();
  Fiber& f = *r.current;
  for (uint32_t c : f.unfenced_chunks)
    if (r.unfenced_owner[c] == f.linear + 1) r.unfenced_owner[c] = 0;
  f.unfenced_chunks.clear();
}

}  // namespace kdtrain::sim
