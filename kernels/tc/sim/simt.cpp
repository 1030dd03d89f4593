// SIMT emulator: fibers, the block barrier and cp.async; launches and the block scheduler
// live in simt_blocks.cpp, warp collectives in simt_warp.cpp, wgmma in simt_wgmma.cpp. Model: simt.h.
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
    check_exit_registers(r, *f);  // a warp leaving setmaxnreg its siblings executed
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

}  // namespace

void set_current_run(BlockRun* r) { g_run = r; }
bool in_launch() { return g_run != nullptr; }

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

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string describe_stall(const BlockRun& r) {
  std::ostringstream s;
  int at_bar = 0, at_warp = 0, at_setmaxnreg = 0, done = 0;
  for (const Fiber& f : *r.fibers) {
    at_bar += f.state == FiberState::at_block_barrier;
    at_warp += f.state == FiberState::at_warp_collective;
    at_setmaxnreg += f.state == FiberState::at_setmaxnreg;
    done += f.state == FiberState::done;
  }
  s << "sim: block (" << r.block.x << "," << r.block.y << "," << r.block.z << ") stalled: " << at_bar
    << " threads at sync_block, " << at_warp << " at a warp collective, " << done << " exited";
  if (at_setmaxnreg > 0) s << ", " << at_setmaxnreg << " at setmaxnreg: " << describe_register_waits(r);
  for (size_t w = 0; w < r.warps.size(); ++w)
    if (r.warps[w].arrived > 0 && r.warps[w].arrived < r.warps[w].lanes)
      s << "; warp " << w << ": " << r.warps[w].arrived << " of " << r.warps[w].lanes
        << " lanes at a collective";
  return s.str();
}

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

Index3 thread_idx() { return current_run().current->tid; }
Index3 block_idx() { return current_run().block; }
Index3 block_dim() { return current_run().config->block; }
Index3 grid_dim() { return current_run().config->grid; }

void sync_block() { wait_as(FiberState::at_block_barrier); }

void check_aligned(const void* p, unsigned bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::ostringstream s;
    s << what << ": address " << p << " is not " << bytes << "-byte aligned";
    fail(s.str());
  }
}

void check_aligned16(const void* p, const char* what) { check_aligned(p, 16, what); }

void copy_aligned(void* dst, const void* src, unsigned bytes, const char* what) {
  check_aligned(src, bytes, (std::string(what) + " source").c_str());
  check_aligned(dst, bytes, (std::string(what) + " destination").c_str());
  std::memcpy(dst, src, bytes);
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
