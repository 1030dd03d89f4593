// Launchers of the deterministic chunked prefix/suffix scan (prefix_scan_kernel.cuh):
// out (batches, rows, cols) fp32 = inclusive running sums down (forward) or up
// (reverse) each column of a strided bf16 or fp32 input. Two launches on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/prefix_scan_kernel.cuh"

namespace kdtrain::cuda {

// Workspace (bytes) for the chunk totals of a scan of this size.
size_t prefix_scan_workspace_bytes(int64_t batches, int64_t rows, int64_t cols);

// args.chunk_sums must hold prefix_scan_workspace_bytes(); args.in must not alias args.out.
void prefix_scan(const flash::ScanArgs<uint16_t>& args, cudaStream_t stream);
void prefix_scan(const flash::ScanArgs<float>& args, cudaStream_t stream);

}  // namespace kdtrain::cuda
