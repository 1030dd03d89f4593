// wgmma (sm_90a) for kernel bodies written against primitives.cuh: warpgroup-wide
// mma_async m64nNk16 bf16 -> fp32 with B (and optionally A) in shared memory through
// matrix descriptors, fence / commit_group / wait_group, fence.proxy.async, and the
// 128-byte-swizzled tile layout the attention kernels keep their operands in.
//
// Same two targets as primitives.cuh: inline PTX under nvcc (the file including this
// must be compiled for sm_90a: -gencode arch=compute_90a,code=sm_90a), the host SIMT
// emulator otherwise (kernels/tc/sim/simt_wgmma.cpp, which states the fragment layouts).
// Descriptors and canonical layouts: kernels/tc/wgmma_desc.h.
//
// Usage, per warpgroup (4 consecutive warps from a warp index divisible by 4):
//   wgmma_fence();                               // registers written before are visible
//   wgmma_ss<N>(acc, a_desc, b_desc, k > 0) ...  // any number, same or other accumulators
//   wgmma_commit();
//   wgmma_wait<0>();                             // acc readable again
//   wgmma_fence_operand(acc);                    // the compiler keeps acc's uses after the wait
// Shared memory written by cp.async (or plain stores) must be followed, in every writing
// thread, by fence_proxy_async() before the barrier after which a wgmma reads it.
#pragma once
#include <cstdint>

#include "kernels/tc/primitives.cuh"
#include "kernels/tc/wgmma_desc.h"

namespace kdtrain::tc {

constexpr int kWarpgroupThreads = 128;

// 32-bit shared-memory address of p (descriptor start addresses are built from it).
TC_DEVICE uint32_t shared_address(const void* p) {
#if defined(__CUDACC__)
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#else
  return sim::shared_address(p);
#endif
}

// wgmma.fence.sync.aligned: register accesses before it are ordered before the
// following mma_async (needed before the first one and after touching accumulators or
// A registers).
TC_DEVICE void wgmma_fence() {
#if defined(__CUDACC__)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#else
  sim::wgmma_fence();
#endif
}

// wgmma.commit_group.sync.aligned: the mma_async issued since the last commit form a group.
TC_DEVICE void wgmma_commit() {
#if defined(__CUDACC__)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#else
  sim::wgmma_commit();
#endif
}

// wgmma.wait_group.sync.aligned N: all but the N most recent groups have completed
// (their shared-memory reads done, their accumulators written).
template <int N>
TC_DEVICE void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wait_group count");
#if defined(__CUDACC__)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#else
  sim::wgmma_wait(N);
#endif
}

// Keeps the compiler from moving accesses of these registers across a wgmma
// instruction (the asm statements above do not name them).
template <int M>
TC_DEVICE void wgmma_fence_operand(float (&r)[M]) {
#if defined(__CUDACC__)
  TC_UNROLL
  for (int i = 0; i < M; ++i) asm volatile("" : "+f"(r[i])::"memory");
#else
  (void)r;
#endif
}
template <int M>
TC_DEVICE void wgmma_fence_operand(uint32_t (&r)[M]) {
#if defined(__CUDACC__)
  TC_UNROLL
  for (int i = 0; i < M; ++i) asm volatile("" : "+r"(r[i])::"memory");
#else
  (void)r;
#endif
}

// fence.proxy.async.shared::cta: this thread's shared-memory writes are visible to the
// async proxy (wgmma operand reads) after the next barrier.
TC_DEVICE void fence_proxy_async() {
#if defined(__CUDACC__)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  sim::fence_proxy_async();
#endif
}

#if defined(__CUDACC__)
#define TC_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
#define TC_D16 TC_D8(0), TC_D8(8)
#define TC_D32 TC_D16, TC_D8(16), TC_D8(24)
#define TC_D64 TC_D32, TC_D8(32), TC_D8(40), TC_D8(48), TC_D8(56)
#endif

// d (64 x N, this thread's N/2 floats) = A B + (accumulate ? d : 0), A (64 x 16) and
// B (16 x N) in shared memory; kTransA / kTransB: the operand is MN-major.
template <int N, bool kTransA, bool kTransB>
TC_DEVICE void wgmma_ss(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "wgmma shapes m64n32k16, m64n64k16 and m64n128k16");
#if defined(__CUDACC__)
  if constexpr (N == 32) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : TC_D16
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(int(kTransA)), "n"(int(kTransB)));
  } else if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : TC_D32
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(int(kTransA)), "n"(int(kTransB)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : TC_D64
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(int(kTransA)), "n"(int(kTransB)));
  }
#else
  sim::wgmma_bf16(d, N, a_desc, nullptr, b_desc, kTransA, kTransB, accumulate);
#endif
}

// The same with A from registers: a[4] is this thread's fragment of the 64 x 16 A
// (the mma.m16n8k16 A fragment of its warp's 16 rows; simt_wgmma.cpp).
template <int N, bool kTransB>
TC_DEVICE void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "wgmma shapes m64n32k16, m64n64k16 and m64n128k16");
#if defined(__CUDACC__)
  if constexpr (N == 32) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, %22;\n}\n"
        : TC_D16
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(int(kTransB)));
  } else if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
        : TC_D32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(int(kTransB)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
        : TC_D64
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(int(kTransB)));
  }
#else
  sim::wgmma_bf16(d, N, 0, a, b_desc, false, kTransB, accumulate);
#endif
}

#if defined(__CUDACC__)
#undef TC_D64
#undef TC_D32
#undef TC_D16
#undef TC_D8
#endif

// A kRows x kCols bf16 tile (kCols a multiple of 64) in the 128-byte-swizzled canonical
// layout: column block c / 64 of every row (kRows rows of 128 bytes), then the next
// block; 16-byte chunk j of row r of a block stored at chunk j ^ (r % 8). Its base must
// be 1024-byte aligned. The same bytes serve as a K-major operand (rows = M or N,
// columns = K: Q and K) and as an MN-major one (rows = K, columns = N: V).
template <int kRows, int kCols>
struct WgmmaTile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "whole 64-column blocks of whole 8-row patterns");
  static constexpr int kBytes = kRows * kCols * 2;
  static constexpr uint32_t kBlockBytes = kRows * 128u;  // one 64-column block
  static constexpr uint32_t kPatternBytes = 8 * 128u;    // 8 rows of 128 bytes
  // Element offset of (row, col); col a multiple of 8 addresses a whole 16-byte chunk.
  static TC_HOST_DEVICE int offset(int row, int col) {
    return (col / 64) * kRows * 64 + row * 64 + ((((col % 64) / 8) ^ (row % 8)) * 8) + (col % 8);
  }
  // K-major operand: rows [row0, row0 + 64 or N) (row0 a multiple of 8), columns
  // [16 kb, 16 kb + 16). LBO is unused by swizzled K-major layouts; 16 is what CuTe writes.
  static TC_HOST_DEVICE uint64_t desc_k_major(uint32_t base, int row0, int kb) {
    return wgmma_desc(base + (kb / 4) * kBlockBytes + static_cast<uint32_t>(row0) * 128u + (kb % 4) * 32u, 16,
                      kPatternBytes, WgmmaSwizzle::b128);
  }
  // MN-major operand: K = rows [16 kb, 16 kb + 16), N = all kCols columns.
  static TC_HOST_DEVICE uint64_t desc_mn_major(uint32_t base, int kb) {
    return wgmma_desc(base + static_cast<uint32_t>(kb) * 16u * 128u, kBlockBytes, kPatternBytes, WgmmaSwizzle::b128);
  }
};

}  // namespace kdtrain::tc
