// Kernels for add.cuh: grid-stride loops.
#include "add.cuh"
#include "cuda_check.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void add_kernel(bf16* out, const bf16* a, const bf16* b, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x)
    out[k] = to_bf(to_f(a[k]) + to_f(b[k]));
}
}  // namespace

void add(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}
void accumulate(bf16* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  add(dst, dst, src, n, stream);
}
}  // namespace kdtrain::cuda
