// Deterministic chunked prefix/suffix scan: __global__ wrappers and launchers. The
// bodies (and the algorithm) are in prefix_scan_kernel.cuh.
#include "kernels/cuda_check.cuh"
#include "kernels/attention/prefix_scan.cuh"

namespace kdtrain::cuda {
namespace {

template <typename In>
__global__ void __launch_bounds__(flash::kScanThreads) scan_totals_kernel(flash::ScanArgs<In> a) {
  flash::scan_chunk_totals(a);
}

template <typename In>
__global__ void __launch_bounds__(flash::kScanThreads) scan_apply_kernel(flash::ScanArgs<In> a) {
  flash::scan_chunk_apply(a);
}

template <typename In>
void launch(const flash::ScanArgs<In>& a, cudaStream_t stream) {
  if (a.batches == 0 || a.rows == 0 || a.cols == 0) return;
  const int64_t chunks = flash::scan_chunks(a.rows);
  if (a.batches > 65535 || chunks > 65535)
    fail("prefix_scan: at most 65535 batches and 65535 chunks of ", flash::kScanChunkRows, " rows");
  const dim3 grid(static_cast<unsigned>((a.cols + flash::kScanThreads - 1) / flash::kScanThreads),
                  static_cast<unsigned>(chunks), static_cast<unsigned>(a.batches));
  scan_totals_kernel<In><<<grid, flash::kScanThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
  scan_apply_kernel<In><<<grid, flash::kScanThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t prefix_scan_workspace_bytes(int64_t batches, int64_t rows, int64_t cols) {
  return sizeof(float) * static_cast<size_t>(batches * flash::scan_chunks(rows) * cols);
}

void prefix_scan(const flash::ScanArgs<uint16_t>& args, cudaStream_t stream) { launch(args, stream); }
void prefix_scan(const flash::ScanArgs<float>& args, cudaStream_t stream) { launch(args, stream); }

}  // namespace kdtrain::cuda
