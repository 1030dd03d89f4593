// Synchronisation between the blocks of one launch, through global memory, for kernels
// written against primitives.cuh (same two targets): a ticket counter, integer
// semaphores with acquire/release, and fp32 accesses that bypass L1 for data other
// blocks of the same launch write. Used by the attention backward's ordered dq
// accumulation (flash_backward_schedule.h) and its preprocessing's last-block reduction.
//
// Emulator (kernels/tc/sim/simt.h): by default blocks run one after another, so a semaphore
// that does not hold when a block first looks can never be released: wait_equal() throws,
// which is a deadlock on the GPU. With LaunchConfig::resident_blocks > 1 blocks run
// together and a release hands control to the waiting block. Integer atomics are plain
// read-modify-writes there.
#pragma once
#include <cstdint>

#include "kernels/tc/primitives.cuh"

#if !defined(__CUDACC__)
#include <cstring>
#endif

namespace kdtrain::tc {

// atomicAdd on a global int (relaxed); returns the previous value.
TC_DEVICE int atomic_add(int* counter, int value) {
#if defined(__CUDACC__)
  return atomicAdd(counter, value);
#else
  return sim::atomic_add(counter, value);
#endif
}

// atomicAdd on a global float (relaxed, unordered: only the timing build of the attention
// backward uses it, kBwdAtomicDq).
TC_DEVICE void atomic_add_f32(float* dst, float value) {
#if defined(__CUDACC__)
  atomicAdd(dst, value);
#else
  *dst += value;
#endif
}

// __threadfence(): this thread's earlier writes are visible GPU-wide before its later ones.
TC_DEVICE void fence_gpu() {
#if defined(__CUDACC__)
  __threadfence();
#endif
}

// ld.acquire.gpu: later reads of this thread see what the releasing thread wrote before
// its release.
TC_DEVICE int load_acquire(const int* flag) {
#if defined(__CUDACC__)
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
#else
  return *flag;
#endif
}

// st.release.gpu: this thread's earlier writes, and those it has synchronised with
// through a barrier, are visible to whoever acquires the new value.
TC_DEVICE void store_release(int* flag, int value) {
#if defined(__CUDACC__)
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
#else
  sim::release(flag, value);
#endif
}

// Spins until *flag == expected, then acquires: relaxed gpu-scope polls (served by L2, no
// L1 invalidation per poll, unlike ld.acquire), and one fence.acq_rel.gpu after the value
// is seen, which with that read forms an acquire pattern (PTX memory model).
TC_DEVICE void wait_equal(const int* flag, int expected) {
#if defined(__CUDACC__)
  for (;;) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v == expected) break;
    __nanosleep(32);
  }
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
  sim::wait_equal(flag, expected);
#endif
}

// ld.relaxed.gpu: an early look at a semaphore, issued long before its value is needed
// so that its latency hides behind other work; pass the value to wait_equal_seen.
TC_DEVICE int load_relaxed(const int* flag) {
#if defined(__CUDACC__)
  int v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
#else
  return *flag;
#endif
}

// wait_equal(flag, expected), except that no poll is made when `seen` (an earlier
// load_relaxed of flag) already equals expected: then only the acquire fence.
TC_DEVICE void wait_equal_seen(const int* flag, int expected, int seen) {
#if defined(__CUDACC__)
  if (seen == expected)
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  else
    wait_equal(flag, expected);
#else
  if (seen != expected) sim::wait_equal(flag, expected);
#endif
}

// 16-byte fp32 load / store at L2 (ld.global.cg / st.global.cg): data another block of
// the same launch wrote or will read, never a stale L1 line. 16-byte aligned.
TC_DEVICE void load_cg4(float (&v)[4], const float* src) {
#if defined(__CUDACC__)
  const float4 x = __ldcg(reinterpret_cast<const float4*>(src));
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
#else
  sim::check_aligned16(src, "load_cg4 source");
  std::memcpy(v, src, 16);
#endif
}
TC_DEVICE void store_cg4(float* dst, const float (&v)[4]) {
#if defined(__CUDACC__)
  __stcg(reinterpret_cast<float4*>(dst), make_float4(v[0], v[1], v[2], v[3]));
#else
  sim::check_aligned16(dst, "store_cg4 destination");
  std::memcpy(dst, v, 16);
#endif
}
TC_DEVICE float load_cg(const float* src) {
#if defined(__CUDACC__)
  return __ldcg(src);
#else
  return *src;
#endif
}
TC_DEVICE void store_cg(float* dst, float v) {
#if defined(__CUDACC__)
  __stcg(dst, v);
#else
  *dst = v;
#endif
}

}  // namespace kdtrain::tc
