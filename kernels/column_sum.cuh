// Column sums of a bf16 matrix accumulated into fp32: sums(C) += sum_n x(n, c).
// Used for the alpha_ma statistics (x = alpha (N, H)) and for RMSNorm's dweight.
//
// Deterministic without atomics: rows are cut into fixed chunks (row_chunks in
// vec_layout.h, a function of N only), each chunk's column sums go to
// scratch(chunks, C) with rows added in order, then a second kernel adds the
// chunks in order. The bits depend only on (N, C) and the inputs, never on the
// GPU or its scheduling.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
// Bytes of fp32 scratch column_sum_accumulate needs for this shape.
size_t column_sum_scratch_bytes(int64_t N, int64_t C);
// sums (C) fp32 accumulated; x (N, C) bf16; scratch of column_sum_scratch_bytes(N, C).
void column_sum_accumulate(float* sums, const bf16* x, int64_t N, int64_t C, void* scratch,
                           cudaStream_t stream);
// The second pass, shared with other chunked column reductions:
// out(C) += sum over chunks i in order of partial(i, C).
void sum_chunk_partials(float* out, const float* partial, int64_t chunks, int64_t C,
                        cudaStream_t stream);
}  // namespace kdtrain::cuda
