// Column sums over rows, split across OpenMP threads without changing the bits:
// each thread owns whole blocks of columns and walks the rows in order, so every
// output is summed in row order whatever the thread count (see cpu_ops.h).
#pragma once
#include <algorithm>
#include <cstdint>

namespace kdtrain::cpu {

constexpr int64_t kColumnBlock = 64;

// Calls body(c0, c1) once for each block [c0, c1) of kColumnBlock columns of [0, columns).
template <typename Body>
void for_column_blocks(int64_t columns, const Body& body) {
  const int64_t nblocks = (columns + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColumnBlock;
    body(c0, std::min(columns, c0 + kColumnBlock));
  }
}

}  // namespace kdtrain::cpu
