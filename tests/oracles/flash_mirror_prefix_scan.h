// CPU mirror of the deterministic chunked prefix/suffix scan of the CUDA kernels
// (kernels/attention/prefix_scan_kernel.cuh): the same chunks of flash::kScanChunkRows rows and
// the same order of additions, so in float it reproduces the kernel's bits exactly
// (tests/attention/test_flash_forward_sim.cpp checks that against the emulated kernel).
//   forward: out[b][i][c] = sum_{r <= i} in[b][r][c];  reverse: sum_{r >= i}.
#pragma once
#include <cstdint>

namespace kdtrain::cpu {

template <typename T>
void chunked_prefix_scan(T* out,       // (batches, rows, cols), contiguous, written
                         const T* in,  // row r of batch b at in + b*in_batch_stride + r*in_row_stride
                         int64_t batches, int64_t rows, int64_t cols, int64_t in_row_stride,
                         int64_t in_batch_stride, bool reverse);

}  // namespace kdtrain::cpu
