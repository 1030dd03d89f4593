// Host SIMT emulator: runs CUDA kernel bodies written against kernels/tc/primitives.cuh
// on the CPU, so the real kernel source is executed and tested without a GPU.
// Test-only: linked into kdtrain_tests, never into the kdtrain binary.
//
// Model (what it checks and what it does not):
// - Blocks run one after another (or LaunchConfig::resident_blocks together). A block's threads are cooperative fibers on ONE OS
//   thread (deterministic): a fiber runs until it reaches a barrier, then the next
//   ready fiber runs. Which one is the schedule: forward / reverse always pick the
//   lowest / highest ready thread, so each warp runs as far ahead of the others as its
//   barriers allow, in opposite orders; shuffled runs every ready fiber once per round
//   in a seeded random order. A missing sync_block() shows up as a difference between
//   schedules.
// - sync_block() is a block barrier: released when every live thread has arrived; a
//   thread that exits while others wait there is an error (__syncthreads in divergent code).
// - Warp collectives (sync_warp, shuffles, mma, ldmatrix) are warp barriers: each lane
//   deposits its operands; when all lanes of the warp have arrived at the SAME
//   collective, every lane's result is computed from the PTX ISA's fragment layouts
//   (primitives.cuh lists them). Lanes at different collectives is an error.
// - cp.async is deferred: the copy happens at the cp_async_wait() that retires its
//   group, so a missing wait reads stale data; copies never waited for are dropped and
//   counted (LaunchStats::cp_async_dropped). LaunchConfig::cp_async_at_issue lands them
//   at issue instead, exposing a refill that races with other threads' reads.
// - Shared memory starts every block filled with kSharedPoison (a NaN both as fp32 and
//   as bf16). Addresses given to ldmatrix/cp.async must lie inside it, 16-byte aligned.
// - Arithmetic: mma products of bf16 are exact in fp32 and summed in fp32 in k order
//   onto c (hardware may sum in another order: compare with tolerances, not bits);
//   exp2/log2 (ex2/lg2.approx.ftz) are std::exp2/log2 with .ftz's flushes: within the
//   ISA's bounds (2 ulp; 2^-22 absolute in (0.5, 2), else relative), not the hardware's
//   bits (tests/tc/approx_bounds.h); bf16 rounding is round to nearest even,
//   bit-identical to __float2bfloat16_rn. Emulated runs are bit-reproducible.
// - wgmma (simt_wgmma.cpp; kernels/tc/wgmma.cuh): fence / mma_async / commit_group /
//   wait_group are collectives of one warp (.sync), executed in the same sequence by the
//   4 warps of a warpgroup (consecutive warps from a warp index divisible by 4; .aligned:
//   a warp that departs from the sequence its siblings ran is an error). Each warp issues
//   and retires its own part of a product (its 16 rows of D), so a warp runs past its
//   wait_group while its siblings' parts are in flight. An mma_async's operands are read
//   at issue (shared memory, A registers) and must be unchanged when the wait_group that
//   retires the part runs; its accumulators are written there, and until then hold NaN
//   (reading them early shows; writing them is an error). An mma_async needs a
//   wgmma.fence since the warp's last wait_group (or its start). Descriptors must be
//   uniform over the warpgroup, with base offset 0 (kernels/tc/wgmma_desc.h).
// - The async proxy (simt_async_proxy.cpp): shared memory read through it (wgmma
//   operands, bulk copies' sources) must have been followed by fence.proxy.async since it
//   was last written: cp.async landings by the landing thread, per 16-byte chunk; plain
//   stores by any thread (the emulator compares the bytes with shared memory as of the
//   last fence of any thread, so it catches a missing fence, but not a fence executed by
//   another thread than the writer).
// - Named barriers (simt_barrier.cpp; kernels/tc/named_barrier.cuh): bar.sync / bar.arrive
//   on ids 1..15 with a thread count; sync waits until that many threads have arrived
//   (arrive counts without waiting; an arrive that completes the barrier is a switch
//   point, so the released threads may run first), then the barrier starts over. Different counts in
//   one phase of a barrier are an error; a barrier that never completes is a stall, and
//   one left with arrivals of an unfinished phase when the block exits is an error.
// - Bulk copies and reductions from shared to global memory (cp.async.bulk, bulk groups):
//   simt_bulk.h states their model.
// - setmaxnreg (simt_registers.cpp; kernels/tc/registers.cuh): every warp holds a count
//   of registers per thread, at first tc::entry_registers_per_thread(block threads)
//   (kernels/tc/register_budget.h; blocks under 384 threads, where ptxas's count depends
//   on the kernel, are refused), and the block a pool, empty at first. The lanes of a
//   warp gather at a setmaxnreg (.sync: a rendezvous of the warp, not of the warpgroup);
//   the 4 warps of a warpgroup must execute the same sequence of them, with the same
//   counts and directions (.aligned; a warp exiting short of its siblings' sequence is an
//   error too). .dec (count <= the warp's) puts the difference into the pool; .inc
//   (count >= the warp's) takes it out, the warp waiting while the pool holds too little
//   (other warps run on); a raise left waiting when nothing else can run is a deadlock.
//   An exiting warp returns nothing to the pool: the ISA does not say it does. Not
//   modelled: the explicit synchronisation of a warpgroup between two of its setmaxnreg,
//   and how the SM splits the register file among its 4 quarters.
// - Not modelled: memory ordering between lanes of a warp without a collective in
//   between (every collective is a rendezvous), bank conflicts and timing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace kdtrain::sim {

struct Index3 {
  unsigned x = 0, y = 0, z = 0;
};

enum class Schedule { forward, reverse, shuffled };

// 0x7fb3 is a bf16 NaN, 0x7fb37fb3 an fp32 NaN: unwritten shared memory poisons any
// product or sum that reads it.
constexpr uint32_t kSharedPoison = 0x7fb37fb3u;

struct LaunchConfig {
  Index3 grid{1, 1, 1};
  Index3 block{1, 1, 1};
  size_t shared_bytes = 0;                // dynamic shared memory of every block
  Schedule schedule = Schedule::forward;  // fiber order between barriers
  uint64_t seed = 1;                      // for Schedule::shuffled
  size_t stack_bytes = 128 * 1024;        // per fiber
  // cp.async data lands at the cp_async_wait that retires its group (default: a missing
  // wait reads stale data) or, with true, at issue (a refill of a buffer other threads
  // still read, without a barrier in between, corrupts their reads). Hardware may do
  // either; correct code gives the same bits both ways.
  bool cp_async_at_issue = false;
  // 1: blocks run one after another, and a semaphore wait that does not hold at once is
  // reported as a deadlock. N > 1: N blocks are resident together (started in grid order
  // as slots free up, like SMs), interleaved at block barriers, and every semaphore release
  // (tc::store_release) hands control to the block waiting on it, else to another block
  // (the one furthest behind; ties: the latest started, so blocks reach their waits before
  // their predecessors release): what a block writes after its release is then read stale
  // by the next contributor, and so is a read not ordered after the thread that waited.
  unsigned resident_blocks = 1;
};

struct LaunchStats {
  uint64_t blocks = 0;
  uint64_t block_barriers = 0;  // sync_block releases
  uint64_t warp_collectives = 0;
  uint64_t mma = 0;             // warp-wide mma.sync instructions
  uint64_t ldmatrix = 0;
  uint64_t cp_async = 0;        // 16-byte copies issued (all threads)
  uint64_t cp_async_zero_fill = 0;
  uint64_t cp_async_dropped = 0;  // never retired by a wait: their data never landed
  uint64_t wgmma = 0;           // warpgroup-wide wgmma.mma_async instructions
  uint64_t setmaxnreg_waits = 0;  // warps whose setmaxnreg.inc waited for the pool to fill
};

// Runs body(shared memory of the block) once per thread of every block of the grid.
// Throws std::runtime_error naming the block and thread on a deadlock, a divergent
// collective, a bad address, or an exception thrown by the body.
LaunchStats launch(const LaunchConfig& config, const std::function<void(unsigned char* smem)>& body);

// ---- called through primitives.cuh from inside launch() (one fiber = one thread)
Index3 thread_idx();
Index3 block_idx();
Index3 block_dim();
Index3 grid_dim();
void sync_block();
void sync_warp();
uint32_t shfl_xor(uint32_t value, int lane_mask);
uint32_t shfl_idx(uint32_t value, int src_lane);
void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]);
void ldmatrix(uint32_t* r, int num, bool trans, const void* smem_row);
void cp_async_16(void* smem_dst, const void* gmem_src, bool valid);
void cp_async_commit();
void cp_async_wait(int pending_groups);
void check_aligned16(const void* p, const char* what);
void check_aligned(const void* p, unsigned bytes, const char* what);  // p a multiple of bytes
// A vector copy of `bytes` between addresses aligned to that size, refused (naming
// "<what> source" or "<what> destination") otherwise.
void copy_aligned(void* dst, const void* src, unsigned bytes, const char* what);
// wgmma (simt_wgmma.cpp). d: this thread's n/2 accumulators; a_regs: its 4 A registers,
// or null when A comes from shared memory through a_desc.
uint32_t shared_address(const void* p);  // byte offset in the block's shared memory
void wgmma_fence();
void wgmma_commit();
void wgmma_wait(int pending_groups);
void wgmma_bf16(float* d, int n, uint64_t a_desc, const uint32_t* a_regs, uint64_t b_desc, bool trans_a,
                bool trans_b, bool accumulate);
void fence_proxy_async();
// Named barriers (simt_barrier.cpp).
void named_barrier_sync(int id, int threads);
void named_barrier_arrive(int id, int threads);
// setmaxnreg.inc (raise) or .dec .sync.aligned.u32 count (simt_registers.cpp).
void set_max_registers(int count, bool raise);
// Semaphores between blocks (tc::wait_equal, tc::store_release, tc::atomic_add).
void wait_equal(const int* flag, int expected);
void release(int* flag, int value);
int atomic_add(int* counter, int value);

// ---- pure helpers, usable anywhere on the host
uint16_t bf16_round(float x);  // round to nearest even; NaN -> 0x7fff
float bf16_value(uint16_t bits);

}  // namespace kdtrain::sim
