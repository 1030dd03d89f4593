// SIMT emulator: fibers, the per-block scheduler, the block barrier and cp.async.
// Warp collectives live in simt_warp.cpp. Model: simt.h.
//
// Fibers are created with ucontext's makecontext where portable; on x86-64 they are
// switched by the few instructions below instead of swapcontext, which makes a
// signal-mask system call on every switch (measured 3.3 us per round trip on the CI
// machine, against the tens of nanoseconds a kernel's thousands of collectives need).
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "kernels/tc/sim/simt_internal.h"

#if defined(__x86_64__) && !defined(KDTRAIN_SIM_UCONTEXT)
#define KDTRAIN_SIM_X86_SWITCH 1
// kdtrain_sim_switch(save, load): pushes the callee-saved registers, MXCSR and the x87
// control word, stores rsp in *save, loads rsp = load and pops the same frame from
// there. A new fiber's stack holds such a frame whose return address is the trampoline,
// which calls the entry function held in r12 (it never returns).
extern "C" void kdtrain_sim_switch(void** save_sp, void* load_sp);
extern "C" void kdtrain_sim_trampoline();
asm(R"(
  .text
  .p2align 4
  .globl kdtrain_sim_switch
  .type kdtrain_sim_switch, @function
kdtrain_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kdtrain_sim_switch, .-kdtrain_sim_switch
  .p2align 4
  .globl kdtrain_sim_trampoline
  .type kdtrain_sim_trampoline, @function
kdtrain_sim_trampoline:
  callq *%r12
  ud2
  .size kdtrain_sim_trampoline, .-kdtrain_sim_trampoline
)");
#endif

namespace kdtrain::sim {
namespace detail {
namespace {

thread_local BlockRun* g_run = nullptr;

std::string where(const BlockRun& r) {
  std::ostringstream s;
  s << "block (" << r.block.x << "," << r.block.y << "," << r.block.z << ")";
  if (r.current != nullptr)
    s << " thread (" << r.current->tid.x << "," << r.current->tid.y << "," << r.current->tid.z << ")";
  return s.str();
}

void retire(BlockRun& r, Fiber& f, const std::vector<PendingCopy>& group) {
  for (const PendingCopy& c : group) {
    if (c.valid)
      std::memcpy(c.dst, c.src, 16);
    else
      std::memset(c.dst, 0, 16);
    note_cp_async_landing(r, f, c.dst);
  }
}

void fiber_main() {
  BlockRun& r = *g_run;
  Fiber* f = r.current;
  try {
    (*r.body)(r.smem);
  } catch (const std::exception& e) {
    if (r.error.empty()) r.error = e.what();
  } catch (...) {
    if (r.error.empty()) r.error = "sim: unknown exception in " + where(r);
  }
  f->state = FiberState::done;
  uint64_t dropped = f->open_group.size();
  for (const auto& g : f->groups) dropped += g.size();
  r.stats->cp_async_dropped += dropped;
  f->open_group.clear();
  f->groups.clear();
  f->unfenced_chunks.clear();
#if KDTRAIN_SIM_X86_SWITCH
  kdtrain_sim_switch(&f->sp, r.scheduler_sp);
#else
  swapcontext(static_cast<ucontext_t*>(f->ucontext), static_cast<ucontext_t*>(r.scheduler_ucontext));
#endif
  __builtin_trap();  // a finished fiber is never resumed
}

void start_fiber(BlockRun& r, Fiber& f) {
#if KDTRAIN_SIM_X86_SWITCH
  (void)r;
  uintptr_t top = reinterpret_cast<uintptr_t>(f.stack + f.stack_bytes) & ~uintptr_t(15);
  top -= 16;
  auto* frame = reinterpret_cast<uint64_t*>(top - 64);
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  frame[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpucw) << 32);
  frame[1] = frame[2] = frame[3] = 0;  // r15, r14, r13
  frame[4] = reinterpret_cast<uint64_t>(&fiber_main);  // r12: the trampoline's target
  frame[5] = frame[6] = 0;                             // rbx, rbp
  frame[7] = reinterpret_cast<uint64_t>(&kdtrain_sim_trampoline);
  f.sp = frame;
#else
  auto* ctx = static_cast<ucontext_t*>(f.ucontext);
  getcontext(ctx);
  ctx->uc_stack.ss_sp = f.stack;
  ctx->uc_stack.ss_size = f.stack_bytes;
  ctx->uc_link = nullptr;
  makecontext(ctx, &fiber_main, 0);
  (void)r;
#endif
}

void resume(BlockRun& r, Fiber& f) {
  r.current = &f;
#if KDTRAIN_SIM_X86_SWITCH
  kdtrain_sim_switch(&r.scheduler_sp, f.sp);
#else
  swapcontext(static_cast<ucontext_t*>(r.scheduler_ucontext), static_cast<ucontext_t*>(f.ucontext));
#endif
  r.current = nullptr;
}

// Fiber stacks, reused across launches on this OS thread; each has a PROT_NONE guard
// page below it so an overflow faults instead of corrupting a neighbour.
struct StackArena {
  unsigned char* base = nullptr;
  size_t bytes = 0, stride = 0, count = 0;
  ~StackArena() {
    if (base != nullptr) munmap(base, bytes);
  }
  void ensure(size_t n, size_t stack_bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t want_stride = ((stack_bytes + page - 1) / page + 1) * page;
    if (n <= count && want_stride == stride) return;
    if (base != nullptr) munmap(base, bytes);
    stride = want_stride;
    count = n;
    bytes = stride * n;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("sim: cannot map fiber stacks");
    base = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) mprotect(base + i * stride, page, PROT_NONE);
  }
  unsigned char* stack(size_t i) const { return base + i * stride + static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  size_t usable() const { return stride - static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string describe_stall(const BlockRun& r) {
  std::ostringstream s;
  int at_bar = 0, at_warp = 0, done = 0;
  for (const Fiber& f : *r.fibers) {
    at_bar += f.state == FiberState::at_block_barrier;
    at_warp += f.state == FiberState::at_warp_collective;
    done += f.state == FiberState::done;
  }
  s << "sim: block (" << r.block.x << "," << r.block.y << "," << r.block.z << ") stalled: " << at_bar
    << " threads at sync_block, " << at_warp << " at a warp collective, " << done << " exited";
  for (size_t w = 0; w < r.warps.size(); ++w)
    if (r.warps[w].arrived > 0 && r.warps[w].arrived < r.warps[w].lanes)
      s << "; warp " << w << ": " << r.warps[w].arrived << " of " << r.warps[w].lanes
        << " lanes at a collective";
  return s.str();
}

void run_block(BlockRun& r, std::vector<Fiber>& fibers, StackArena& arena) {
  const LaunchConfig& cfg = *r.config;
  for (size_t k = 0; k + 4 <= r.smem_bytes; k += 4) std::memcpy(r.smem + k, &kSharedPoison, 4);
  for (size_t i = 0; i < fibers.size(); ++i) {
    Fiber& f = fibers[i];
    f.state = FiberState::ready;
    f.stack = arena.stack(i);
    f.stack_bytes = arena.usable();
    f.open_group.clear();
    f.groups.clear();
    f.unfenced_chunks.clear();
    f.named_barrier = 0;
    start_fiber(r, f);
  }
  std::fill(r.unfenced_owner.begin(), r.unfenced_owner.end(), 0u);
  std::fill(r.named.begin(), r.named.end(), BlockRun::NamedBarrier{});
  r.released_elsewhere = false;
  reset_warpgroups(r);
  for (Warp& w : r.warps) {
    w.op = Collective::none;
    w.arrived = 0;
  }
  uint64_t rng = cfg.seed ^ (0x51ed2701ull * (r.block.x + 1)) ^ (0x2545f491ull * (r.block.y + 1)) ^
                 (0x9e3779b1ull * (r.block.z + 1));
  std::vector<Fiber*> order;
  order.reserve(fibers.size());
  auto release_or_stall = [&]() {  // no fiber is ready: a block barrier completes, or a stall
    size_t live = 0, at_bar = 0;
    for (const Fiber& f : fibers) {
      live += f.state != FiberState::done;
      at_bar += f.state == FiberState::at_block_barrier;
    }
    if (live == 0) return false;
    if (at_bar != live) throw std::runtime_error(describe_stall(r));
    if (live != fibers.size())
      throw std::runtime_error(describe_stall(r) + " (sync_block not reached by every thread: divergent __syncthreads)");
    for (Fiber& f : fibers) f.state = FiberState::ready;
    ++r.stats->block_barriers;
    return true;
  };
  auto run = [&](Fiber& f) {
    resume(r, f);
    if (!r.error.empty()) throw std::runtime_error(r.error);
  };
  if (cfg.schedule == Schedule::shuffled) {
    // Rounds: every ready fiber runs once to its next barrier, in a fresh random order.
    for (;;) {
      order.clear();
      for (Fiber& f : fibers)
        if (f.state == FiberState::ready) order.push_back(&f);
      if (order.empty()) {
        if (!release_or_stall()) break;
        continue;
      }
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[splitmix(rng) % i]);
      for (Fiber* f : order)
        if (f->state == FiberState::ready) run(*f);
    }
    finish_warpgroups(r);
    finish_named_barriers(r);
    return;
  }
  // Greedy: always the lowest (forward) or highest (reverse) ready thread, so a warp runs
  // as far ahead of the others as its barriers allow (maximal skew between warps).
  // Only the running fiber's warpgroup changes state inside run() (a warp collective
  // releases its warp, a wgmma collective its warpgroup of 4 warps), so the search
  // starts at that warpgroup's first (forward) or last (reverse) thread: every thread
  // before it is still not ready. A named barrier may release any thread: then the
  // search starts over.
  const bool reverse = cfg.schedule == Schedule::reverse;
  const size_t n = fibers.size();
  size_t from = 0;  // search start, counted in schedule order
  for (;;) {
    Fiber* next = nullptr;
    for (size_t k = from; k < n && next == nullptr; ++k) {
      Fiber& f = fibers[reverse ? n - 1 - k : k];
      if (f.state == FiberState::ready) next = &f;
    }
    if (next == nullptr) {
      if (!release_or_stall()) {
        finish_warpgroups(r);
        finish_named_barriers(r);
        break;
      }
      from = 0;
      continue;
    }
    run(*next);
    const size_t group_first = size_t(next->warp / 4) * 128, group_last = std::min(n, group_first + 128) - 1;
    from = reverse ? n - 1 - group_last : group_first;
    if (r.released_elsewhere) {
      from = 0;
      r.released_elsewhere = false;
    }
  }
}

}  // namespace

BlockRun& current_run() {
  if (g_run == nullptr || g_run->current == nullptr)
    throw std::runtime_error("sim: a device primitive was called outside sim::launch()");
  return *g_run;
}

void wait_as(FiberState state) {
  BlockRun& r = current_run();
  Fiber* f = r.current;
  f->state = state;
#if KDTRAIN_SIM_X86_SWITCH
  kdtrain_sim_switch(&f->sp, r.scheduler_sp);
#else
  swapcontext(static_cast<ucontext_t*>(f->ucontext), static_cast<ucontext_t*>(r.scheduler_ucontext));
#endif
}

void fail(const std::string& what) {
  const BlockRun* r = g_run;
  throw std::runtime_error("sim: " + what + (r != nullptr ? " in " + where(*r) : std::string()));
}

void check_shared(const void* p, size_t bytes, const char* what) {
  const BlockRun& r = current_run();
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < r.smem || c + bytes > r.smem + r.smem_bytes) {
    std::ostringstream s;
    s << what << ": address " << p << " (+" << bytes << " bytes) outside the block's shared memory ["
      << static_cast<const void*>(r.smem) << ", +" << r.smem_bytes << ")";
    fail(s.str());
  }
}

}  // namespace detail

using namespace detail;

LaunchStats launch(const LaunchConfig& cfg, const std::function<void(unsigned char*)>& body) {
  if (g_run != nullptr) throw std::runtime_error("sim: launch() is not reentrant");
  const size_t nthreads = static_cast<size_t>(cfg.block.x) * cfg.block.y * cfg.block.z;
  if (nthreads == 0 || nthreads > 1024) throw std::runtime_error("sim: block size must be 1..1024 threads");
  LaunchStats stats;
  thread_local StackArena arena;
  arena.ensure(nthreads, cfg.stack_bytes);
  std::vector<Fiber> fibers(nthreads);
  std::vector<ucontext_t> contexts(KDTRAIN_SIM_X86_SWITCH ? 0 : nthreads + 1);
  for (size_t i = 0; i < nthreads; ++i) {
    Fiber& f = fibers[i];
    f.linear = static_cast<unsigned>(i);
    f.tid.x = static_cast<unsigned>(i % cfg.block.x);
    f.tid.y = static_cast<unsigned>((i / cfg.block.x) % cfg.block.y);
    f.tid.z = static_cast<unsigned>(i / (static_cast<size_t>(cfg.block.x) * cfg.block.y));
    f.warp = f.linear / 32;
    f.lane = f.linear % 32;
    if (!contexts.empty()) f.ucontext = &contexts[i];
  }
  // 128-byte aligned shared memory, as the device gives dynamic shared memory.
  std::vector<unsigned char> smem_storage(cfg.shared_bytes + 128);
  auto* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_storage.data()) + 127) & ~uintptr_t(127));

  BlockRun r;
  r.config = &cfg;
  r.body = &body;
  r.stats = &stats;
  r.smem = smem;
  r.smem_bytes = cfg.shared_bytes;
  r.unfenced_owner.assign(cfg.shared_bytes / 16 + 1, 0u);
  r.fibers = &fibers;
  r.warps.resize((nthreads + 31) / 32);
  for (size_t w = 0; w < r.warps.size(); ++w)
    r.warps[w].lanes = static_cast<int>(std::min<size_t>(32, nthreads - 32 * w));
  if (!contexts.empty()) r.scheduler_ucontext = &contexts[nthreads];
  g_run = &r;
  try {
    for (unsigned z = 0; z < cfg.grid.z; ++z)
      for (unsigned y = 0; y < cfg.grid.y; ++y)
        for (unsigned x = 0; x < cfg.grid.x; ++x) {
          r.block = Index3{x, y, z};
          run_block(r, fibers, arena);
          ++stats.blocks;
        }
  } catch (...) {
    g_run = nullptr;
    throw;
  }
  g_run = nullptr;
  return stats;
}

Index3 thread_idx() { return current_run().current->tid; }
Index3 block_idx() { return current_run().block; }
Index3 block_dim() { return current_run().config->block; }
Index3 grid_dim() { return current_run().config->grid; }

void sync_block() { wait_as(FiberState::at_block_barrier); }

void check_aligned16(const void* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    std::ostringstream s;
    s << what << ": address " << p << " is not 16-byte aligned";
    fail(s.str());
  }
}

void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  BlockRun& r = current_run();
  check_shared(smem_dst, 16, "cp.async destination");
  check_aligned16(smem_dst, "cp.async destination");
  check_aligned16(gmem_src, "cp.async source");
  const PendingCopy copy{static_cast<unsigned char*>(smem_dst), static_cast<const unsigned char*>(gmem_src), valid};
  if (r.config->cp_async_at_issue)
    retire(r, *r.current, {copy});  // lands now; the group bookkeeping below stays the same
  else
    r.current->open_group.push_back(copy);
  ++r.stats->cp_async;
  if (!valid) ++r.stats->cp_async_zero_fill;
}

void cp_async_commit() {
  Fiber* f = current_run().current;
  f->groups.push_back(std::move(f->open_group));
  f->open_group.clear();
}

void cp_async_wait(int pending_groups) {
  BlockRun& r = current_run();
  Fiber* f = r.current;
  while (f->groups.size() > static_cast<size_t>(pending_groups)) {
    retire(r, *f, f->groups.front());
    f->groups.pop_front();
  }
}

}  // namespace kdtrain::sim
