// Internals shared by simt.cpp (fibers, scheduler, block barrier, cp.async) and
// simt_warp.cpp (warp collectives). Not for kernel code.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tc/sim/simt.h"

namespace kdtrain::sim::detail {

enum class FiberState { ready, at_block_barrier, at_warp_collective, at_semaphore, at_setmaxnreg, done };

struct PendingCopy {
  unsigned char* dst;
  const unsigned char* src;
  bool valid;  // false: zero-fill
};

struct Fiber {
  void* sp = nullptr;       // saved stack pointer (x86-64 switch)
  void* ucontext = nullptr; // ucontext_t (portable fallback)
  unsigned char* stack = nullptr;
  size_t stack_bytes = 0;
  FiberState state = FiberState::ready;
  Index3 tid;
  unsigned linear = 0, warp = 0, lane = 0;
  std::vector<PendingCopy> open_group;           // issued, not yet committed
  std::deque<std::vector<PendingCopy>> groups;   // committed, oldest first
  std::vector<uint32_t> unfenced_chunks;         // smem chunks it landed by cp.async, not yet proxy-fenced
  int named_barrier = 0;                         // the named barrier it waits at (0: none)
  const int* wait_flag = nullptr;  // at_semaphore: waits until *wait_flag == wait_value
  int wait_value = 0;
};

enum class Collective { none, sync, shfl_xor, shfl_idx, mma, ldmatrix };

// One lane's operands and results of the warp's current collective.
struct LaneIO {
  uint32_t in[10] = {};             // mma: a[0..3], b[0..1], c[0..3] (fp32 bits); shfl: value, lane arg
  const unsigned char* addr = nullptr;  // ldmatrix row address
  uint32_t out[4] = {};
};

struct Warp {
  Collective op = Collective::none;
  int num = 0;         // ldmatrix matrices
  bool trans = false;  // ldmatrix .trans
  int arrived = 0;
  int lanes = 0;       // threads in this warp (the last warp of a block may be partial)
  LaneIO io[32];
};

struct Warpgroup;  // simt_wgmma.cpp
struct BulkState;  // simt_bulk.cpp
struct RegisterState;  // simt_registers.cpp

struct BlockRun {
  const LaunchConfig* config = nullptr;
  const std::function<void(unsigned char*)>* body = nullptr;
  LaunchStats* stats = nullptr;
  Index3 block;
  unsigned char* smem = nullptr;
  size_t smem_bytes = 0;
  std::vector<Fiber>* fibers = nullptr;
  std::vector<Warp> warps;
  Fiber* current = nullptr;
  void* scheduler_sp = nullptr;
  void* scheduler_ucontext = nullptr;
  std::string error;  // set by a failing fiber; the scheduler rethrows it
  std::vector<std::shared_ptr<Warpgroup>> warpgroups;  // wgmma state, created on first use
  // Per 16-byte chunk of shared memory: 1 + the thread whose cp.async landed it there
  // and has not yet executed fence.proxy.async; 0 when the async proxy may read it.
  std::vector<uint32_t> unfenced_owner;
  // Shared memory as of the last fence.proxy.async (simt_async_proxy.cpp): a byte the
  // async proxy reads must equal it.
  std::vector<unsigned char> async_view;
  // Named barriers 1..15 (index 0 unused: sync_block).
  struct NamedBarrier {
    int expected = 0, arrived = 0;
  };
  std::vector<NamedBarrier> named = std::vector<NamedBarrier>(16);
  bool released_elsewhere = false;  // a named barrier or setmaxnreg released threads outside the running warpgroup
  std::shared_ptr<BulkState> bulk;  // bulk copies in flight, created on first use
  std::shared_ptr<RegisterState> registers;  // setmaxnreg counts and pool, created on first use
};

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

// Fibers (simt.cpp): the run whose fibers this OS thread switches to, a fresh fiber's
// frame, a switch into a fiber and back, the schedule's random numbers, a stall's report.
void set_current_run(BlockRun* r);
bool in_launch();
void start_fiber(BlockRun& r, Fiber& f);
void resume(BlockRun& r, Fiber& f);
uint64_t splitmix(uint64_t& s);
std::string describe_stall(const BlockRun& r);

// The block being run on this OS thread; throws when called outside sim::launch().
BlockRun& current_run();
// Marks the current fiber `state` and returns to the scheduler; resumes when released.
void wait_as(FiberState state);
// Throws std::runtime_error naming the current block and thread.
[[noreturn]] void fail(const std::string& what);
// Throws unless [p, p + bytes) lies in the current block's shared memory.
void check_shared(const void* p, size_t bytes, const char* what);
// The async proxy (simt_async_proxy.cpp): a 16-byte cp.async landing by `f` at `dst`;
// the start of a block (nothing written, everything visible); and the check of an
// async-proxy read of [addr, addr + bytes) (a wgmma operand, a bulk copy's source):
// throws, naming `reader`, unless every byte was fenced by fence.proxy.async since it
// was last written (by cp.async or a plain store).
void note_cp_async_landing(BlockRun& r, Fiber& f, const unsigned char* dst);
void reset_async_proxy(BlockRun& r);
void check_async_proxy_read(BlockRun& r, uint32_t addr, uint32_t bytes, const char* reader);
// Start of a block: no wgmma state. End of a block: throws if a warpgroup left wgmma
// groups unretired (their accumulators would never be written).
void reset_warpgroups(BlockRun& r);
void finish_warpgroups(BlockRun& r);
// End of a block: throws if a named barrier holds arrivals of an unfinished phase (a
// turn handed over that nobody took).
void finish_named_barriers(BlockRun& r);
// Start of a block: no bulk copies. End: throws if a thread left bulk groups unretired.
void reset_bulk(BlockRun& r);
void finish_bulk(BlockRun& r);
// Start of a launch: no bulk writes in flight in any block.
void begin_bulk_launch();
// setmaxnreg (simt_registers.cpp). Start of a block: every warp at the entry count, the
// pool empty. A thread `f` about to exit: throws if it is its warp's last and the warp
// leaves setmaxnreg its warpgroup's other warps executed. A stall: what the warps at a
// setmaxnreg wait for ("" when none does).
void reset_registers(BlockRun& r);
void check_exit_registers(BlockRun& r, const Fiber& f);
std::string describe_register_waits(const BlockRun& r);

}  // namespace kdtrain::sim::detail
