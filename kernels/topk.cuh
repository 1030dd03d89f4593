// topk_log_probs of src/backend/backend.h on the GPU: each row's top K of bf16
// logits with their log-probabilities and tail (the algorithm: topk_kernel.cuh).
#pragma once
#include <cuda_runtime.h>

#include "kernels/topk_kernel.cuh"

namespace kdtrain::cuda {

// Refuses K above topk::kTopkMaxK (the sort's shared memory) naming both.
void topk_log_probs(const topk::TopkParams& p, cudaStream_t stream);

}  // namespace kdtrain::cuda
