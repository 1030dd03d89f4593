// CPU mirror of kernels/attention/prefix_scan_kernel.cuh. One (batch, column) per iteration of
// the outer loops; within it exactly the kernel's two passes.
#include "oracles/flash_mirror_prefix_scan.h"

#include <cstddef>
#include <vector>

#include "kernels/attention/flash_tiles.h"

namespace kdtrain::cpu {

template <typename T>
void chunked_prefix_scan(T* out, const T* in, int64_t batches, int64_t rows, int64_t cols, int64_t in_row_stride,
                         int64_t in_batch_stride, bool reverse) {
  const int64_t chunk_rows = flash::kScanChunkRows;
  const int64_t n_chunks = (rows + chunk_rows - 1) / chunk_rows;
#pragma omp parallel
  {
    std::vector<T> totals(static_cast<size_t>(n_chunks));
#pragma omp for schedule(static)
    for (int64_t item = 0; item < batches * cols; ++item) {
      const int64_t b = item / cols, c = item % cols;
      const T* src = in + b * in_batch_stride + c;
      T* dst = out + b * rows * cols + c;
      auto chunk_len = [&](int64_t k) { return rows - k * chunk_rows < chunk_rows ? rows - k * chunk_rows : chunk_rows; };
      // Pass 1: each chunk's total, its rows added in scan order.
      for (int64_t k = 0; k < n_chunks; ++k) {
        const int64_t n = chunk_len(k);
        T sum = 0;
        for (int64_t s = 0; s < n; ++s) sum += src[(k * chunk_rows + (reverse ? n - 1 - s : s)) * in_row_stride];
        totals[static_cast<size_t>(k)] = sum;
      }
      // Pass 2: the totals of the chunks before (in scan order), then the chunk's rows.
      for (int64_t k = 0; k < n_chunks; ++k) {
        T run = 0;
        if (!reverse)
          for (int64_t j = 0; j < k; ++j) run += totals[static_cast<size_t>(j)];
        else
          for (int64_t j = n_chunks - 1; j > k; --j) run += totals[static_cast<size_t>(j)];
        const int64_t n = chunk_len(k);
        for (int64_t s = 0; s < n; ++s) {
          const int64_t r = k * chunk_rows + (reverse ? n - 1 - s : s);
          run += src[r * in_row_stride];
          dst[r * cols] = run;
        }
      }
    }
  }
}

template void chunked_prefix_scan<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, bool);
template void chunked_prefix_scan<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                          bool);

}  // namespace kdtrain::cpu
