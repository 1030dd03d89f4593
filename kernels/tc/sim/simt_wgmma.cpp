// SIMT emulator: wgmma (PTX ISA 9.7.15). Model: simt.h; descriptors and layouts:
// kernels/tc/wgmma_desc.h; fence.proxy.async: simt_async_proxy.cpp.
//
// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 (9.7.15.5.2): the D and register-A
// fragments are kernels/tc/wgmma_fragments.h's (a[j] holds elements 2j and 2j + 1, low
// half first); A (64 x 16) and B (16 x N) from shared memory through descriptors,
// imm-trans-a/b = 0 meaning K-major, 1 MN-major.
// D = A B + (scale-d ? D : 0), the 16 exact bf16 products summed in fp32 in k order onto
// the accumulator, as the emulator's mma.sync. imm-scale-a/b are +1 (the wrappers in
// kernels/tc/wgmma.cuh use no other); only .bf16 inputs with .f32 accumulators exist here.
//
// .sync makes each instruction a rendezvous of one warp, not of the warpgroup; .aligned
// makes every warp of the warpgroup execute the same sequence of them. So each warp
// fences, issues, commits and waits on its own: warp w's part of an mma_async (D rows
// 16w..16w+15) is issued when warp w issues it and retired by warp w's wait_group, while
// its siblings' parts may still be in flight. The warpgroup keeps a log of the sequence
// the first warp to reach each instruction executed, and every other warp must match it.
// Operands are read at issue (shared memory by the first warp, checked by the others;
// A registers per warp) and must be unchanged at the wait_group that retires the part:
// a change in between is an error (hardware reads them at some time in between).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>

#include "kernels/tc/sim/simt_internal.h"
#include "kernels/tc/wgmma_desc.h"
#include "kernels/tc/wgmma_fragments.h"

namespace kdtrain::sim {
namespace detail {

namespace {
constexpr int kGroupThreads = 128, kGroupWarps = 4;
constexpr uint32_t kRegisterPoison = 0x7fb37fb3u;  // an fp32 NaN: an accumulator read while in flight
}  // namespace

enum class WgOp { none, fence, mma, commit, wait };

// An instruction's warp-uniform operands (and, in the warpgroup's log, its operands as
// the first warp executed it).
struct WgOperands {
  WgOp op = WgOp::none;
  int n = 0, pending_groups = 0;
  uint64_t a_desc = 0, b_desc = 0;
  bool a_from_regs = false, trans_a = false, trans_b = false, accumulate = false;
  bool same(const WgOperands& o) const {
    return n == o.n && pending_groups == o.pending_groups && a_desc == o.a_desc && b_desc == o.b_desc &&
           a_from_regs == o.a_from_regs && trans_a == o.trans_a && trans_b == o.trans_b && accumulate == o.accumulate;
  }
};

// A shared-memory operand as read at issue: each element's byte address and bits.
struct Snapshot {
  std::vector<uint32_t> addr;
  std::vector<uint16_t> bits;
};

// One mma_async of the warpgroup: its shared-memory operands as the first warp read them.
struct MmaOperands {
  Snapshot a, b;  // a: 64 x 16 ([m][k]) when A is in shared memory; b: [k][n]
};

struct LogEntry {
  WgOperands ops;
  std::shared_ptr<const MmaOperands> mma;  // WgOp::mma only
  int warps = 0;                           // warps that have executed it
};

// One warp's part of one mma_async.
struct WarpPart {
  std::shared_ptr<const MmaOperands> shared;
  WgOperands ops;
  size_t accum = 0;
  const uint32_t* a_regs[32] = {};  // each lane's A registers (A from registers)
  uint32_t a_bits[32][4] = {};      // ... and their values at issue
};

// One warp's accumulator (one register array per lane) with parts in flight: its values
// live here, the registers hold NaN until the last part on it retires.
struct WarpAccum {
  float* regs[32] = {};
  int n = 0, pending = 0;
  std::vector<float> value;  // [lane][n/2]
};

struct WarpWgmma {
  WgOperands at;  // the collective the warp's lanes are gathering at
  int arrived = 0;
  float* d[32] = {};
  const uint32_t* a[32] = {};
  bool fenced = false;  // a wgmma.fence since the warp's last wait_group (or its start)
  uint64_t next = 0;    // its position in the warpgroup's log
  std::vector<WarpPart> open;
  std::deque<std::vector<WarpPart>> groups;
  std::vector<WarpAccum> accums;
};

struct Warpgroup {
  std::deque<LogEntry> log;  // instructions not yet executed by every warp
  uint64_t base = 0;         // log position of log.front()
  WarpWgmma warps[kGroupWarps];
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

float bf16_at(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

Warpgroup& group_of(BlockRun& r) {
  const unsigned g = r.current->warp / kGroupWarps;
  const size_t nthreads = r.fibers->size();
  if (size_t(g + 1) * kGroupThreads > nthreads)
    fail("wgmma needs whole warpgroups of 128 threads; the block has " + std::to_string(nthreads));
  if (r.warpgroups.size() <= g) r.warpgroups.resize(g + 1);
  if (!r.warpgroups[g]) r.warpgroups[g] = std::make_shared<Warpgroup>();
  return *r.warpgroups[g];
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

// Elements (mn, k), mn < mns, k < 16 ([mn][k]) of a shared-memory operand, each checked
// to lie in shared memory and to be visible to the async proxy.
Snapshot read_operand(BlockRun& r, uint64_t desc, bool mn_major, int mns) {
  const tc::WgmmaDescFields f = tc::wgmma_decode(desc);
  Snapshot s;
  s.addr.resize(static_cast<size_t>(mns) * 16);
  s.bits.resize(s.addr.size());
  for (int mn = 0; mn < mns; ++mn)
    for (int k = 0; k < 16; ++k) {
      const size_t e = static_cast<size_t>(mn) * 16 + k;
      s.addr[e] = tc::wgmma_element_address(f, mn_major ? tc::WgmmaMajor::mn : tc::WgmmaMajor::k, mn, k);
      check_async_proxy_read(r, s.addr[e], 2, "wgmma operand");
      std::memcpy(&s.bits[e], r.smem + s.addr[e], 2);
    }
  return s;
}

// Throws if shared memory no longer holds what `s` read. `when` says between what.
void check_unchanged(const BlockRun& r, const Snapshot& s, const char* which, const char* when) {
  for (size_t e = 0; e < s.addr.size(); ++e) {
    uint16_t now;
    std::memcpy(&now, r.smem + s.addr[e], 2);
    if (now != s.bits[e]) {
      std::ostringstream m;
      m << "wgmma.mma_async: its " << which << " operand in shared memory (byte " << s.addr[e] << ") changed " << when;
      fail(m.str());
    }
  }
}

// Where the warp's instruction stands in the warpgroup's sequence: the first warp to reach
// it logs it, every other warp must match. Returns its entry.
LogEntry& take_turn(Warpgroup& g, WarpWgmma& w, unsigned warp) {
  const uint64_t at = w.next++;
  if (at - g.base == g.log.size()) g.log.push_back(LogEntry{w.at, nullptr, 0});
  LogEntry& e = g.log[at - g.base];
  if (e.ops.op != w.at.op) {
    std::ostringstream s;
    s << "warps of warpgroup " << warp / kGroupWarps << " reached different collectives (" << name_of(e.ops.op)
      << " and " << name_of(w.at.op) << " as its wgmma instruction " << at << "): divergent warpgroup code";
    fail(s.str());
  }
  if (!e.ops.same(w.at))
    fail(std::string(name_of(w.at.op)) +
         ": operands (descriptors, shape, flags, scale-d) differ between the threads of a warpgroup");
  ++e.warps;
  return e;
}

void drop_executed(Warpgroup& g) {
  while (!g.log.empty() && g.log.front().warps == kGroupWarps) {
    g.log.pop_front();
    ++g.base;
  }
}

// The warp's part of the mma_async `e`: the shared operands (read now by the first warp,
// checked unchanged by the others), its lanes' A registers and accumulator.
void issue(BlockRun& r, WarpWgmma& w, LogEntry& e) {
  const WgOperands& o = w.at;
  if (!w.fenced) fail("wgmma.mma_async without a wgmma.fence since the warp's last wgmma.wait_group (or its start)");
  if (!e.mma) {
    if (!o.a_from_regs) check_desc(o.a_desc, "A");
    check_desc(o.b_desc, "B");
    auto m = std::make_shared<MmaOperands>();
    if (!o.a_from_regs) m->a = read_operand(r, o.a_desc, o.trans_a, 64);
    m->b = read_operand(r, o.b_desc, o.trans_b, o.n);
    e.mma = m;
    ++r.stats->wgmma;
  } else {
    check_unchanged(r, e.mma->b, "B", "between the issues of two warps of its warpgroup");
    if (!o.a_from_regs) check_unchanged(r, e.mma->a, "A", "between the issues of two warps of its warpgroup");
  }
  WarpPart part;
  part.shared = e.mma;
  part.ops = o;
  if (o.a_from_regs)
    for (int l = 0; l < 32; ++l) {
      part.a_regs[l] = w.a[l];
      std::memcpy(part.a_bits[l], w.a[l], sizeof part.a_bits[l]);
    }
  // The accumulator: one already in flight (same registers in every lane) or a new one.
  size_t k = 0;
  for (; k < w.accums.size(); ++k) {
    const WarpAccum& a = w.accums[k];
    if (a.pending == 0) continue;  // retired: its registers hold the results again
    int same = 0;
    for (int l = 0; l < 32; ++l) same += a.regs[l] == w.d[l];
    if (same == 32) break;
    if (same != 0) fail("wgmma.mma_async: accumulator registers partly overlap another wgmma in flight");
  }
  const int half = o.n / 2;
  if (k == w.accums.size()) {
    WarpAccum a;
    a.n = o.n;
    a.value.resize(static_cast<size_t>(32) * half);
    for (int l = 0; l < 32; ++l) {
      a.regs[l] = w.d[l];
      std::memcpy(&a.value[static_cast<size_t>(l) * half], a.regs[l], sizeof(float) * half);
      for (int i = 0; i < half; ++i) std::memcpy(&a.regs[l][i], &kRegisterPoison, 4);
    }
    w.accums.push_back(std::move(a));
  } else if (w.accums[k].n != o.n) {
    fail("wgmma.mma_async: an accumulator in flight is reused with another shape");
  }
  part.accum = k;
  ++w.accums[k].pending;
  w.open.push_back(std::move(part));
}

// Warp `wi`'s part retires: its operands are checked unchanged since issue, its 16 rows
// of D computed, and the accumulator's registers written when its last part retires.
void execute(BlockRun& r, WarpWgmma& w, int wi, const WarpPart& p) {
  const char* when = "between the mma_async and the wgmma.wait_group that retires it";
  check_unchanged(r, p.shared->b, "B", when);
  if (!p.ops.a_from_regs) check_unchanged(r, p.shared->a, "A", when);
  float A[16][16];  // the warp's rows 16 wi .. 16 wi + 15
  for (int l = 0; l < 32; ++l) {
    if (p.ops.a_from_regs && std::memcmp(p.a_regs[l], p.a_bits[l], sizeof p.a_bits[l]) != 0)
      fail("wgmma.mma_async: its A registers changed " + std::string(when) + " (lane " + std::to_string(l) + ")");
    for (int e = 0; e < 8; ++e) {
      const tc::WgmmaCoord c = tc::wgmma_a_coord(32 * wi + l, e);
      const uint32_t reg = p.a_bits[l][e / 2];
      A[c.row - 16 * wi][c.col] = p.ops.a_from_regs ? bf16_at(static_cast<uint16_t>(e % 2 ? reg >> 16 : reg & 0xffffu))
                                                     : bf16_at(p.shared->a.bits[static_cast<size_t>(c.row) * 16 + c.col]);
    }
  }
  const int n = p.ops.n, half = n / 2;
  WarpAccum& acc = w.accums[p.accum];
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < half; ++i) {
      const tc::WgmmaCoord c = tc::wgmma_d_coord(32 * wi + l, i);
      const int row = c.row - 16 * wi, col = c.col;
      float& v = acc.value[static_cast<size_t>(l) * half + i];
      float sum = p.ops.accumulate ? v : 0.f;
      for (int k = 0; k < 16; ++k) sum += A[row][k] * bf16_at(p.shared->b.bits[static_cast<size_t>(col) * 16 + k]);
      v = sum;
    }
  }
  if (--acc.pending > 0) return;
  const std::vector<uint32_t> poison(static_cast<size_t>(half), kRegisterPoison);
  for (int l = 0; l < 32; ++l) {
    if (std::memcmp(acc.regs[l], poison.data(), sizeof(float) * half) != 0)
      fail("wgmma.mma_async: accumulator registers written while an mma_async on them was in flight (lane " +
           std::to_string(l) + ")");
    std::memcpy(acc.regs[l], &acc.value[static_cast<size_t>(l) * half], sizeof(float) * half);
  }
}

void retire_groups(BlockRun& r, WarpWgmma& w, int wi, int keep) {
  while (w.groups.size() > static_cast<size_t>(keep)) {
    for (const WarpPart& p : w.groups.front()) execute(r, w, wi, p);
    w.groups.pop_front();
  }
  // Drop accumulators with nothing left in flight (indices of the rest stay valid:
  // nothing is in flight on them once the last group has retired).
  if (w.groups.empty() && w.open.empty()) w.accums.clear();
  w.fenced = false;
}

// The current lane joins its warp's collective `o` (d and a: its registers, mma only).
// Returns null until the last lane of the warp arrives; then the warp's state.
WarpWgmma* join(const WgOperands& o, float* d = nullptr, const uint32_t* a = nullptr) {
  BlockRun& r = current_run();
  Warpgroup& g = group_of(r);
  WarpWgmma& w = g.warps[r.current->warp % kGroupWarps];
  if (w.arrived == 0) {
    w.at = o;
  } else if (w.at.op != o.op) {
    std::ostringstream s;
    s << "threads of warp " << r.current->warp << " reached different collectives (" << name_of(w.at.op) << " and "
      << name_of(o.op) << "): divergent warpgroup code";
    fail(s.str());
  } else if (!w.at.same(o)) {
    fail(std::string(name_of(o.op)) + ": operands (descriptors, shape, flags, scale-d) differ between the threads of a warpgroup");
  }
  w.d[r.current->lane] = d;
  w.a[r.current->lane] = a;
  if (++w.arrived < 32) {
    wait_as(FiberState::at_warp_collective);
    return nullptr;
  }
  return &w;
}

// The warp's collective is complete: its lanes run on.
void release(BlockRun& r, WarpWgmma& w) {
  w.arrived = 0;
  w.at.op = WgOp::none;
  ++r.stats->warp_collectives;
  const unsigned first = r.current->warp * 32;
  for (unsigned t = first; t < first + 32; ++t) {
    Fiber& f = (*r.fibers)[t];
    if (f.state == FiberState::at_warp_collective && f.named_barrier == 0) f.state = FiberState::ready;
  }
}

// Runs `act` on the warp's state once all its lanes joined `o`, in the warpgroup's order.
template <typename Act>
void collective(const WgOperands& o, Act act, float* d = nullptr, const uint32_t* a = nullptr) {
  WarpWgmma* w = join(o, d, a);
  if (w == nullptr) return;
  BlockRun& r = current_run();
  Warpgroup& g = group_of(r);
  const unsigned warp = r.current->warp;
  LogEntry& e = take_turn(g, *w, warp);
  act(r, *w, static_cast<int>(warp % kGroupWarps), e);
  drop_executed(g);
  release(r, *w);
}

}  // namespace

void reset_warpgroups(BlockRun& r) { r.warpgroups.clear(); }

void finish_warpgroups(BlockRun& r) {
  for (size_t k = 0; k < r.warpgroups.size(); ++k) {
    const auto& g = r.warpgroups[k];
    if (!g) continue;
    const std::string where = "sim: block (" + std::to_string(r.block.x) + "," + std::to_string(r.block.y) + "," +
                              std::to_string(r.block.z) + ") warpgroup " + std::to_string(k);
    for (const WarpWgmma& w : g->warps) {
      if (!w.open.empty() || !w.groups.empty())
        throw std::runtime_error(where + " exited with wgmma.mma_async never retired by a wgmma.wait_group");
      if (w.next != g->warps[0].next)
        throw std::runtime_error(where + " exited with its warps at different wgmma instructions (" +
                                 std::to_string(w.next) + " and " + std::to_string(g->warps[0].next) +
                                 " executed): divergent warpgroup code");
    }
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
  WgOperands o;
  o.op = WgOp::fence;
  collective(o, [](BlockRun&, WarpWgmma& w, int, LogEntry&) { w.fenced = true; });
}

void wgmma_commit() {
  WgOperands o;
  o.op = WgOp::commit;
  collective(o, [](BlockRun&, WarpWgmma& w, int, LogEntry&) {
    w.groups.push_back(std::move(w.open));
    w.open.clear();
  });
}

void wgmma_wait(int pending_groups) {
  WgOperands o;
  o.op = WgOp::wait;
  o.pending_groups = pending_groups;
  collective(o, [pending_groups](BlockRun& r, WarpWgmma& w, int wi, LogEntry&) { retire_groups(r, w, wi, pending_groups); });
}

void wgmma_bf16(float* d, int n, uint64_t a_desc, const uint32_t* a_regs, uint64_t b_desc, bool trans_a, bool trans_b,
                bool accumulate) {
  if (n < 8 || n > 256 || n % 8 != 0) fail("wgmma.mma_async: N must be a multiple of 8 in [8, 256]");
  WgOperands o;
  o.op = WgOp::mma;
  o.n = n;
  o.a_from_regs = a_regs != nullptr;
  o.a_desc = a_regs != nullptr ? 0 : a_desc;
  o.b_desc = b_desc;
  o.trans_a = a_regs == nullptr && trans_a;
  o.trans_b = trans_b;
  o.accumulate = accumulate;
  collective(o, [](BlockRun& r, WarpWgmma& w, int, LogEntry& e) { issue(r, w, e); }, d, a_regs);
}

}  // namespace kdtrain::sim
