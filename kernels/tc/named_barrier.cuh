// Named barriers for kernel bodies written against primitives.cuh (same two targets):
// bar.sync / bar.arrive on barrier ids 1..15 (0 is __syncthreads') with a thread count,
// a multiple of 32. They let groups of warps order themselves without stopping the whole
// block, e.g. two warpgroups taking turns at the tensor cores
// (flash_forward_sm90a_kernel.cuh). Emulator: kernels/tc/sim/simt_barrier.cpp.
#pragma once
#include "kernels/tc/primitives.cuh"

namespace kdtrain::tc {

// bar.sync id, threads: waits until `threads` threads (this one included) have arrived
// at barrier `id` by sync or arrive; shared memory is ordered among them.
TC_DEVICE void named_barrier_sync(int id, int threads) {
#if defined(__CUDACC__)
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#else
  sim::named_barrier_sync(id, threads);
#endif
}

// bar.arrive id, threads: counts this thread at barrier `id` without waiting.
TC_DEVICE void named_barrier_arrive(int id, int threads) {
#if defined(__CUDACC__)
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
#else
  sim::named_barrier_arrive(id, threads);
#endif
}

}  // namespace kdtrain::tc
