// The __global__ wrapper and launcher of the top-K kernel (topk_kernel.cuh).
#include "kernels/cuda_check.cuh"
#include "kernels/topk.cuh"

namespace kdtrain::cuda {
namespace {

__global__ void __launch_bounds__(topk::kTopkThreads) topk_kernel(topk::TopkParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  topk::topk_row(p, smem);
}

}  // namespace

void topk_log_probs(const topk::TopkParams& p, cudaStream_t stream) {
  KD_CHECK(p.K >= 1 && p.K <= p.V && p.n >= 0 && p.n < (int64_t(1) << 31), "topk_log_probs: bad shape n=",
           p.n, " V=", p.V, " K=", p.K);
  KD_CHECK(p.K <= topk::kTopkMaxK, "topk_log_probs: K = ", p.K, " is above the ", topk::kTopkMaxK,
           " the CUDA kernel sorts in shared memory; use --device cpu or a smaller --top-k");
  KD_CHECK(p.V < (int64_t(1) << 31), "topk_log_probs: vocabulary ", p.V, " does not fit int32 ids");
  if (p.n == 0) return;
  topk_kernel<<<static_cast<unsigned>(p.n), topk::kTopkThreads, topk::topk_shared_bytes(p.K), stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kdtrain::cuda
