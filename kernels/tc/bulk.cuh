// Shared-to-global bulk copies and reductions (sm_90), and vector float reductions, for
// kernel bodies written against primitives.cuh (same two targets: inline PTX under nvcc,
// the host SIMT emulator's kernels/tc/sim/simt_bulk.cpp otherwise).
//
// A bulk operation is issued by ONE thread and moves a contiguous range of shared memory
// (16-byte aligned, a multiple of 16 bytes) to global memory in the async proxy:
//   bulk_store / bulk_reduce_add_f32 ... ; bulk_commit();   // a bulk group of this thread
//   bulk_wait_read<N>();   // all but the N newest groups have read their shared memory
//   bulk_wait<N>();        // ... and their global writes are complete, visible to this thread
// The shared memory a bulk operation reads must have been written before the barrier that
// precedes the issue, and every thread that wrote it must have executed
// fence_proxy_async() between its writes and that barrier (plain st.shared is the generic
// proxy); store_shared4 / store_shared are such writes, and the emulator tracks them.
// The source must not be written again before bulk_wait_read retired the group.
#pragma once
#include <cstdint>

#include "kernels/tc/primitives.cuh"

#if !defined(__CUDACC__)
#include "kernels/tc/sim/simt_bulk.h"
#endif

namespace kdtrain::tc {

// st.shared.v4.f32 of 16 bytes (16-byte aligned) that a bulk operation will read.
TC_DEVICE void store_shared4(float* smem, const float (&v)[4]) {
#if defined(__CUDACC__)
  *reinterpret_cast<float4*>(smem) = make_float4(v[0], v[1], v[2], v[3]);
#else
  sim::check_aligned16(smem, "store_shared4 destination");
  sim::note_shared_store(smem, 16);
  std::memcpy(smem, v, 16);
#endif
}

// st.shared.f32 that a bulk operation will read.
TC_DEVICE void store_shared(float* smem, float v) {
#if defined(__CUDACC__)
  *smem = v;
#else
  sim::note_shared_store(smem, 4);
  std::memcpy(smem, &v, 4);
#endif
}

// cp.async.bulk.global.shared::cta.bulk_group: global[0, bytes) = shared[0, bytes).
TC_DEVICE void bulk_store(void* gmem, const void* smem, uint32_t bytes) {
#if defined(__CUDACC__)
  const unsigned src = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem), "r"(src), "r"(bytes)
               : "memory");
#else
  sim::bulk_shared_to_global(gmem, smem, bytes, sim::BulkOp::store);
#endif
}

// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: global[k] += shared[k] for
// each float, one fp32 addition per element (round to nearest).
TC_DEVICE void bulk_reduce_add_f32(float* gmem, const float* smem, uint32_t bytes) {
#if defined(__CUDACC__)
  const unsigned src = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem), "r"(src),
               "r"(bytes)
               : "memory");
#else
  sim::bulk_shared_to_global(gmem, smem, bytes, sim::BulkOp::add_f32);
#endif
}

// cp.async.bulk.commit_group: this thread's bulk operations since the last commit form a group.
TC_DEVICE void bulk_commit() {
#if defined(__CUDACC__)
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
  sim::bulk_commit();
#endif
}

// cp.async.bulk.wait_group N: all but the N newest bulk groups of this thread are complete.
template <int N>
TC_DEVICE void bulk_wait() {
  static_assert(N >= 0, "wait_group count");
#if defined(__CUDACC__)
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#else
  sim::bulk_wait(N, false);
#endif
}

// cp.async.bulk.wait_group.read N: all but the N newest bulk groups have read their source.
template <int N>
TC_DEVICE void bulk_wait_read() {
  static_assert(N >= 0, "wait_group count");
#if defined(__CUDACC__)
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#else
  sim::bulk_wait(N, true);
#endif
}

// red.global.add.v4.f32 (sm_90): four relaxed gpu-scope float additions at a 16-byte
// aligned address, one L2 request; the order among threads is unspecified.
TC_DEVICE void red_add_v4_f32(float* gmem, const float (&v)[4]) {
#if defined(__CUDACC__)
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(gmem), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
               : "memory");
#else
  sim::check_aligned16(gmem, "red.global.add.v4.f32 address");
  for (int k = 0; k < 4; ++k) gmem[k] += v[k];
#endif
}

}  // namespace kdtrain::tc
