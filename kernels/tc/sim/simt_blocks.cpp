// SIMT emulator: launches. Blocks one after another, or several resident together with
// semaphores between them (LaunchConfig::resident_blocks); each block's fibers scheduled
// by LaunchConfig::schedule. Fibers themselves: simt.cpp. Model: simt.h.
#include <ucontext.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

#include "kernels/tc/sim/simt_internal.h"

#if defined(__x86_64__) && !defined(KDTRAIN_SIM_UCONTEXT)
#define KDTRAIN_SIM_X86_SWITCH 1
#else
#define KDTRAIN_SIM_X86_SWITCH 0
#endif

namespace kdtrain::sim {
namespace detail {
namespace {

// State of a launch with resident_blocks > 1 (run_concurrent).
struct Concurrency {
  const StackArena& arena;
  uint64_t events = 0;           // semaphore releases, atomics and finished blocks so far
  const int* handoff = nullptr;  // the semaphore just released, until the scheduler acts on it
};
thread_local Concurrency* g_conc = nullptr;

// One resident block: its fibers, shared memory and scheduling position.
struct BlockExec {
  BlockRun r;
  std::vector<Fiber> fibers;
  std::vector<unsigned char> smem_storage;
  std::vector<ucontext_t> contexts;  // fibers' and the scheduler's (portable fallback only)
  size_t from = 0;                   // greedy search start, counted in schedule order
  std::vector<Fiber*> order;         // shuffled: this round's fibers
  size_t pos = 0;                    // shuffled: next in `order`
  uint64_t rng = 0;
  uint64_t barriers = 0;             // block barriers released so far
  uint64_t blocked_at = ~uint64_t{0};  // Concurrency::events when last found blocked
  uint64_t started = 0;              // start order of the block in this slot
  bool active = false;
};

// Where a block's run stopped (run_block_until_switch).
enum class Stop { at_barrier, released, blocked, done };

void init_exec(BlockExec& x, const LaunchConfig& cfg, size_t nthreads) {
  x.fibers.resize(nthreads);
  x.contexts.resize(KDTRAIN_SIM_X86_SWITCH ? 0 : nthreads + 1);
  for (size_t i = 0; i < nthreads; ++i) {
    Fiber& f = x.fibers[i];
    f.linear = static_cast<unsigned>(i);
    f.tid.x = static_cast<unsigned>(i % cfg.block.x);
    f.tid.y = static_cast<unsigned>((i / cfg.block.x) % cfg.block.y);
    f.tid.z = static_cast<unsigned>(i / (static_cast<size_t>(cfg.block.x) * cfg.block.y));
    f.warp = f.linear / 32;
    f.lane = f.linear % 32;
    if (!x.contexts.empty()) f.ucontext = &x.contexts[i];
  }
  // 128-byte aligned shared memory, as the device gives dynamic shared memory.
  x.smem_storage.assign(cfg.shared_bytes + 128, 0);
  BlockRun& r = x.r;
  r.config = &cfg;
  r.smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(x.smem_storage.data()) + 127) & ~uintptr_t(127));
  r.smem_bytes = cfg.shared_bytes;
  r.unfenced_owner.assign(cfg.shared_bytes / 16 + 1, 0u);
  r.fibers = &x.fibers;
  r.warps.resize((nthreads + 31) / 32);
  for (size_t w = 0; w < r.warps.size(); ++w)
    r.warps[w].lanes = static_cast<int>(std::min<size_t>(32, nthreads - 32 * w));
  if (!x.contexts.empty()) r.scheduler_ucontext = &x.contexts[nthreads];
}

// Starts block `block` in `x`, its fibers on the arena's stacks first_stack...
void begin_block(BlockExec& x, Index3 block, const StackArena& arena, size_t first_stack) {
  BlockRun& r = x.r;
  const LaunchConfig& cfg = *r.config;
  r.block = block;
  r.error.clear();
  for (size_t k = 0; k + 4 <= r.smem_bytes; k += 4) std::memcpy(r.smem + k, &kSharedPoison, 4);
  for (size_t i = 0; i < x.fibers.size(); ++i) {
    Fiber& f = x.fibers[i];
    f.state = FiberState::ready;
    f.stack = arena.stack(first_stack + i);
    f.stack_bytes = arena.usable();
    f.open_group.clear();
    f.groups.clear();
    f.unfenced_chunks.clear();
    f.named_barrier = 0;
    start_fiber(r, f);
  }
  reset_async_proxy(r);
  std::fill(r.named.begin(), r.named.end(), BlockRun::NamedBarrier{});
  r.released_elsewhere = false;
  reset_warpgroups(r);
  reset_bulk(r);
  reset_registers(r);
  for (Warp& w : r.warps) {
    w.op = Collective::none;
    w.arrived = 0;
  }
  x.rng = cfg.seed ^ (0x51ed2701ull * (block.x + 1)) ^ (0x2545f491ull * (block.y + 1)) ^
          (0x9e3779b1ull * (block.z + 1));
  x.from = 0;
  x.order.clear();
  x.pos = 0;
  x.barriers = 0;
  x.blocked_at = ~uint64_t{0};
  x.active = true;
}

// A fiber waiting on a semaphore that now holds its value is ready again.
bool runnable(Fiber& f) {
  if (f.state == FiberState::at_semaphore && *f.wait_flag == f.wait_value) f.state = FiberState::ready;
  return f.state == FiberState::ready;
}

// The next fiber of the block's schedule, or null when none can run.
Fiber* next_fiber(BlockExec& x) {
  const LaunchConfig& cfg = *x.r.config;
  std::vector<Fiber>& fibers = x.fibers;
  if (cfg.schedule == Schedule::shuffled) {
    // Rounds: every ready fiber runs once to its next barrier, in a fresh random order.
    for (int pass = 0; pass < 2; ++pass) {
      while (x.pos < x.order.size())
        if (runnable(*x.order[x.pos++])) return x.order[x.pos - 1];
      x.order.clear();
      x.pos = 0;
      for (Fiber& f : fibers)
        if (runnable(f)) x.order.push_back(&f);
      for (size_t i = x.order.size(); i > 1; --i) std::swap(x.order[i - 1], x.order[splitmix(x.rng) % i]);
    }
    return nullptr;
  }
  // Greedy: always the lowest (forward) or highest (reverse) ready thread, so a warp runs
  // as far ahead of the others as its barriers allow (maximal skew between warps). Only
  // the running fiber's warpgroup changes state inside a run (a warp collective releases
  // its warp, a wgmma collective its warpgroup of 4 warps), so the search starts at that
  // warpgroup's first (forward) or last (reverse) thread (a semaphore wait, a named
  // barrier and a setmaxnreg.dec serving other warps' raises aside: below).
  const bool reverse = cfg.schedule == Schedule::reverse;
  const size_t n = fibers.size();
  for (size_t k = x.from; k < n; ++k) {
    Fiber& f = fibers[reverse ? n - 1 - k : k];
    if (runnable(f)) return &f;
  }
  return nullptr;
}

// Runs the block's fibers until all live ones wait at a block barrier (not released), one
// released a semaphore (concurrent launches), they are blocked, or the block is done.
Stop run_block_until_switch(BlockExec& x, Concurrency* conc) {
  BlockRun& r = x.r;
  set_current_run(&r);
  std::vector<Fiber>& fibers = x.fibers;
  const bool reverse = r.config->schedule == Schedule::reverse;
  const size_t n = fibers.size();
  for (;;) {
    Fiber* next = next_fiber(x);
    if (next == nullptr && x.from != 0) {
      x.from = 0;  // a semaphore wait earlier in the order may have been satisfied
      next = next_fiber(x);
    }
    if (next == nullptr) {
      size_t live = 0, at_bar = 0, at_sem = 0;
      for (const Fiber& f : fibers) {
        live += f.state != FiberState::done;
        at_bar += f.state == FiberState::at_block_barrier;
        at_sem += f.state == FiberState::at_semaphore;
      }
      if (live == 0) {
        finish_warpgroups(r);
        finish_named_barriers(r);
        finish_bulk(r);
        return Stop::done;
      }
      if (at_sem > 0) return Stop::blocked;
      if (at_bar != live) throw std::runtime_error(describe_stall(r));
      if (live != fibers.size())
        throw std::runtime_error(describe_stall(r) + " (sync_block not reached by every thread: divergent __syncthreads)");
      return Stop::at_barrier;
    }
    resume(r, *next);
    if (!r.error.empty()) throw std::runtime_error(r.error);
    const size_t group_first = size_t(next->warp / 4) * 128, group_last = std::min(n, group_first + 128) - 1;
    x.from = reverse ? n - 1 - group_last : group_first;
    if (r.released_elsewhere) {  // any thread may have been released: search from the start
      x.from = 0;
      r.released_elsewhere = false;
    }
    if (conc != nullptr && conc->handoff != nullptr) return Stop::released;
  }
}

// Releases the block barrier every live fiber of `x` waits at.
void release_barrier(BlockExec& x) {
  for (Fiber& f : x.fibers) f.state = FiberState::ready;
  x.from = 0;
  ++x.barriers;
  ++x.r.stats->block_barriers;
}

// Blocks one after another (the default): a semaphore that does not hold when a block
// first looks is a deadlock, reported by tc::wait_equal.
void run_sequential(BlockExec& x, const LaunchConfig& cfg, const StackArena& arena, LaunchStats& stats) {
  for (unsigned z = 0; z < cfg.grid.z; ++z)
    for (unsigned y = 0; y < cfg.grid.y; ++y)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        begin_block(x, Index3{bx, y, z}, arena, 0);
        for (Stop s; (s = run_block_until_switch(x, nullptr)) != Stop::done;) {
          if (s != Stop::at_barrier) throw std::runtime_error(describe_stall(x.r));
          release_barrier(x);
        }
        ++stats.blocks;
      }
}

// LaunchConfig::resident_blocks > 1: that many blocks resident at once, started in grid
// order as slots free up. The scheduler leaves a block when all its live threads wait at
// a block barrier, when they are all blocked, and right after any semaphore release: it
// then runs the block a thread waits in on that semaphore, if one does, else the block
// that has passed the fewest barriers (ties: the latest started, so a later block runs
// as far ahead of its predecessors as it can and reaches its waits before they release).
// So a waiting block sees exactly what the releasing block wrote before its release, a
// write placed after the release is read stale, and so is a read that is not ordered
// after the wait (e.g. other lanes reading before the waiting lane's barrier).
void run_concurrent(std::vector<BlockExec>& slots, const LaunchConfig& cfg, Concurrency& conc, LaunchStats& stats) {
  const uint64_t total = uint64_t{cfg.grid.x} * cfg.grid.y * cfg.grid.z;
  uint64_t next_block = 0;
  const size_t nthreads = slots[0].fibers.size();
  auto start_next = [&](size_t k) {
    slots[k].active = false;
    if (next_block == total) return;
    const uint64_t b = next_block++;
    begin_block(slots[k], Index3{static_cast<unsigned>(b % cfg.grid.x), static_cast<unsigned>((b / cfg.grid.x) % cfg.grid.y),
                                 static_cast<unsigned>(b / (uint64_t{cfg.grid.x} * cfg.grid.y))},
                conc.arena, k * nthreads);
    slots[k].started = b;
  };
  for (size_t k = 0; k < slots.size(); ++k) start_next(k);
  auto pick = [&]() -> BlockExec* {
    BlockExec* best = nullptr;
    for (BlockExec& x : slots) {
      if (!x.active || x.blocked_at == conc.events) continue;
      if (best == nullptr || x.barriers < best->barriers || (x.barriers == best->barriers && x.started > best->started))
        best = &x;
    }
    return best;
  };
  BlockExec* cur = pick();
  while (cur != nullptr) {
    const Stop s = run_block_until_switch(*cur, &conc);
    if (s == Stop::done) {
      ++stats.blocks;
      ++conc.events;
      start_next(static_cast<size_t>(cur - slots.data()));
      cur = pick();
      continue;
    }
    if (s == Stop::blocked) cur->blocked_at = conc.events;
    if (s == Stop::at_barrier) {  // release it, then let the block furthest behind catch up
      release_barrier(*cur);
      cur = pick();
      continue;
    }
    BlockExec* waiter = nullptr;
    if (s == Stop::released) {
      for (BlockExec& x : slots)
        for (Fiber& f : x.fibers)
          if (waiter == nullptr && x.active && &x != cur && f.state == FiberState::at_semaphore &&
              f.wait_flag == conc.handoff && *f.wait_flag == f.wait_value)
            waiter = &x;
      conc.handoff = nullptr;
      if (waiter == nullptr) {  // nobody waits yet: the next block per the policy, not this one
        for (BlockExec& x : slots)
          if (x.active && &x != cur && x.blocked_at != conc.events &&
              (waiter == nullptr || x.barriers < waiter->barriers ||
               (x.barriers == waiter->barriers && x.started > waiter->started)))
            waiter = &x;
      }
    }
    cur = waiter != nullptr ? waiter : pick();
  }
  for (const BlockExec& x : slots)
    if (x.active) {
      std::ostringstream msg;
      msg << "sim: every resident block waits on a semaphore no running block will release (deadlock); block ("
          << x.r.block.x << "," << x.r.block.y << "," << x.r.block.z << ") among them";
      throw std::runtime_error(msg.str());
    }
}

}  // namespace
}  // namespace detail

using namespace detail;

LaunchStats launch(const LaunchConfig& cfg, const std::function<void(unsigned char*)>& body) {
  if (in_launch() || g_conc != nullptr) throw std::runtime_error("sim: launch() is not reentrant");
  const size_t nthreads = static_cast<size_t>(cfg.block.x) * cfg.block.y * cfg.block.z;
  if (nthreads == 0 || nthreads > 1024) throw std::runtime_error("sim: block size must be 1..1024 threads");
  if (cfg.resident_blocks == 0) throw std::runtime_error("sim: resident_blocks must be at least 1");
  LaunchStats stats;
  begin_bulk_launch();
  thread_local StackArena arena;
  const size_t slots_n = cfg.resident_blocks;
  arena.ensure(nthreads * slots_n, cfg.stack_bytes);
  std::vector<BlockExec> slots(slots_n);
  for (BlockExec& x : slots) {
    init_exec(x, cfg, nthreads);
    x.r.body = &body;
    x.r.stats = &stats;
  }
  try {
    if (slots_n == 1) {
      run_sequential(slots[0], cfg, arena, stats);
    } else {
      Concurrency conc{arena};
      g_conc = &conc;
      run_concurrent(slots, cfg, conc, stats);
    }
  } catch (...) {
    set_current_run(nullptr);
    g_conc = nullptr;
    throw;
  }
  set_current_run(nullptr);
  g_conc = nullptr;
  return stats;
}

// ---- semaphores (tc::wait_equal / tc::store_release / tc::atomic_add on the host)

void wait_equal(const int* flag, int expected) {
  if (g_conc == nullptr) {
    const int seen = *flag;
    if (seen != expected)
      throw std::runtime_error("semaphore holds " + std::to_string(seen) + ", waiting for " + std::to_string(expected) +
                               ": the blocks before this one never release it (deadlock)");
    return;
  }
  Fiber* f = current_run().current;
  while (*flag != expected) {
    f->wait_flag = flag;
    f->wait_value = expected;
    wait_as(FiberState::at_semaphore);
  }
}

void release(int* flag, int value) {
  *flag = value;
  if (g_conc == nullptr) return;
  ++g_conc->events;
  g_conc->handoff = flag;
  wait_as(FiberState::ready);  // the scheduler hands control to a waiter
}

int atomic_add(int* counter, int value) {
  const int old = *counter;
  *counter = old + value;
  if (g_conc != nullptr) ++g_conc->events;
  return old;
}

}  // namespace kdtrain::sim
