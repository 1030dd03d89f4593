// Index arithmetic of the vectorised memory-bound kernels, written once for the
// host and the device: the kernels call these functions, and the host unit tests
// (tests/backend/test_vec_layout.cpp) run the very same code over odd sizes and
// misaligned tails to prove every element is visited exactly once.
//
// Conventions: a "pack" is VEC consecutive elements moved as one load/store
// (8 bf16 or 4 fp32 = 16 bytes); VEC is a power of two. Loops never divide a
// 64-bit index by a run-time value per element: flat loops split [0, n) into whole
// packs and a scalar tail; row loops take the row from the grid's y dimension
// and the pack within the row from x, so only per-row work does any division.
// Plain C++ (no CUDA headers), so host code and tests can include it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define KD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KD_HOST_DEVICE inline
#endif

namespace kdtrain::cuda {

constexpr int kPackBytes = 16;  // the widest load/store a thread issues

// Calls on_pack(first_element) for the whole packs and on_scalar(element) for the
// tail [n / VEC * VEC, n) that thread `tid` of `threads` (grid-stride) owns.
template <int VEC, typename OnPack, typename OnScalar>
KD_HOST_DEVICE void flat_split_loop(int64_t n, int64_t tid, int64_t threads, OnPack&& on_pack,
                                    OnScalar&& on_scalar) {
  static_assert(VEC > 0 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  const int64_t packs = n / VEC;  // a shift: VEC is a compile-time power of two
  for (int64_t p = tid; p < packs; p += threads) on_pack(p * VEC);
  for (int64_t k = packs * VEC + tid; k < n; k += threads) on_scalar(k);
}

// Rows [row0, rows) in steps of row_stride and, in each, packs [col0, cols_in_packs)
// in steps of col_stride: on_pack(row, first_column). The caller guarantees that
// VEC divides the row length, so no pack straddles two rows.
template <int VEC, typename OnPack>
KD_HOST_DEVICE void row_pack_loop(int64_t rows, int64_t row0, int64_t row_stride, int cols_in_packs,
                                  int col0, int col_stride, OnPack&& on_pack) {
  for (int64_t r = row0; r < rows; r += row_stride)
    for (int c = col0; c < cols_in_packs; c += col_stride) on_pack(r, c * VEC);
}

// RoPE within one token's (n_heads, D) row: work item j of n_rot * (half / VEC)
// is head j / (half / VEC), offset (j % (half / VEC)) * VEC in the first half.
// 32-bit arithmetic: a row holds far fewer than 2^31 items.
struct RopeItem {
  int head, offset;
};
template <int VEC>
KD_HOST_DEVICE RopeItem rope_item(int j, int half) {
  const int packs_per_head = half / VEC;
  const int head = j / packs_per_head;
  return RopeItem{head, (j - head * packs_per_head) * VEC};
}

// Multi-tensor loops: the index of the first of `count` sorted, disjoint ranges
// (anything with .end) whose end lies after element k (count when none does).
template <typename Range>
KD_HOST_DEVICE int64_t first_range_ending_after(const Range* ranges, int64_t count, int64_t k) {
  int64_t lo = 0, hi = count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ranges[mid].end <= k) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Deterministic column reductions cut the N rows into chunks of a fixed size that
// depends on N alone (never on the GPU): at most max_chunks chunks of at least
// min_rows rows; the last chunk may be shorter.
struct RowChunks {
  int64_t rows_per_chunk, chunks;
};
KD_HOST_DEVICE RowChunks row_chunks(int64_t N, int64_t max_chunks, int64_t min_rows) {
  int64_t rows = (N + max_chunks - 1) / max_chunks;
  if (rows < min_rows) rows = min_rows;
  return RowChunks{rows, N > 0 ? (N + rows - 1) / rows : 0};
}

KD_HOST_DEVICE bool address_aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Bytes a pack of VEC elements of `elem_bytes` must be aligned to: its size, but
// at most kPackBytes (wider packs are moved as several 16-byte accesses).
KD_HOST_DEVICE int pack_alignment(int vec, int elem_bytes) {
  return vec * elem_bytes < kPackBytes ? vec * elem_bytes : kPackBytes;
}

// The widest pack VEC (up to 16 bytes of the narrowest element type) such that VEC
// divides `divides` (0: no constraint, for flat loops that have a scalar tail) and
// every pointer is aligned to pack_alignment(VEC, its element size). When VEC
// divides the row length of a (rows, divides)-shaped tensor, every row starts
// aligned too.
template <typename... Ts>
inline int widest_pack(int64_t divides, const Ts*... ptrs) {
  const int narrowest = static_cast<int>(std::min({sizeof(Ts)...}));
  for (int vec = kPackBytes / narrowest; vec > 1; vec /= 2)
    if (divides % vec == 0 &&
        (address_aligned(ptrs, pack_alignment(vec, static_cast<int>(sizeof(Ts)))) && ...))
      return vec;
  return 1;
}

}  // namespace kdtrain::cuda
