// Token embedding lookup (bf16) and its gradient into fp32 dwte.
//
// Forward: out(N,C) = wte[tokens[n]]; a copy, exact. A token id outside [0, V)
// cannot be reported from the device: the backend validates ids on the host in
// the backward (the CPU reference throws in both), negative ids give zero rows.
//
// Backward, deterministic without atomics: the host groups positions by token id
// (TokenBuckets: each distinct id with its positions in increasing order, a
// stable counting sort). One thread block per distinct id and column slice sums
// its dout rows in position order in fp32 and adds the sum to dwte once. No two
// blocks touch the same dwte element, so the bits depend only on the inputs.
#pragma once
#include <vector>

#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {

// Positions grouped by token id, built on the host from host tokens.
struct TokenBuckets {
  std::vector<int32_t> ids;        // (U) distinct token ids, increasing
  std::vector<int32_t> offsets;    // (U+1) bucket u is positions[offsets[u], offsets[u+1])
  std::vector<int32_t> positions;  // (N) token positions, increasing within a bucket
};
// Throws kdtrain::Error naming the position when a token is outside [0, V).
TokenBuckets bucket_tokens(const int32_t* tokens, int64_t N, int64_t V);

// out (N,C) bf16 = wte (V,C) bf16 rows of tokens (N) int32 (device).
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, int64_t N, int64_t C,
                       cudaStream_t stream);

// dwte (V,C) fp32 += dout (N,C) bf16 gathered by bucket. ids (U), offsets (U+1),
// positions (N) are the TokenBuckets arrays copied to the device.
void embedding_backward(float* dwte, const bf16* dout, const int32_t* ids, const int32_t* offsets,
                        const int32_t* positions, int64_t U, int64_t C, cudaStream_t stream);

}  // namespace kdtrain::cuda
