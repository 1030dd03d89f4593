// Argument checks shared by every Backend implementation: each backend method
// calls the check of its op first, so the CPU reference and the CUDA backend
// accept and refuse exactly the same calls with the same messages.
//
// The checks read only the arguments, never backend memory: a shape that is
// negative or inconsistent, an output or input pointer that is null while work is
// due, a variant input the variant needs, a non-positive temperature. Checks that
// need the data (token ids and targets inside the vocabulary) are done on the
// host by the callers that own the host copy (Model::forward, FusedLoss) for
// every backend; the CPU ops repeat them because their memory is host memory.
// Limits of one implementation (e.g. a kernel's 2^31 grid) stay in its launcher.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "backend/backend.h"

namespace kdtrain::op_checks {

void embedding_forward(const void* out, const int32_t* tokens, const void* wte, int64_t N,
                       int64_t C);
void embedding_backward(const float* dwte, const void* dout, const int32_t* tokens, int64_t N,
                        int64_t C, int64_t V);
void rmsnorm_forward(const void* out, const float* rstd, const void* inp, const void* weight,
                     int64_t N, int64_t C, float eps);
void add_rmsnorm_forward(const void* sum_out, const void* out, const float* rstd, const void* a,
                         const void* b, const void* weight, int64_t N, int64_t C, float eps);
void rmsnorm_backward(const void* dinp, const float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int64_t N, int64_t C);
void matmul_forward(const void* out, const void* inp, const void* weight, int64_t N, int64_t IC,
                    int64_t OC);
void matmul_backward(const void* dout, const void* inp, const void* weight, int64_t N, int64_t IC,
                     int64_t OC);
void rope(const char* op, const void* x, const float* cos, const float* sin, int64_t B, int64_t T,
          int64_t n_heads, int64_t n_rot, int64_t D);
void attention_forward(const AttentionForwardArgs& args);
void attention_backward(const AttentionBackwardArgs& args);
// Elementwise ops over n elements: every pointer must be given when n > 0.
void elementwise(const char* op, int64_t n, std::initializer_list<const void*> pointers);
void column_sum(const float* sums, const void* x, int64_t N, int64_t H);
void swiglu(const char* op, int64_t N, int64_t F, std::initializer_list<const void*> pointers);
void loss_chunk(const LossChunkArgs& args);
void sparse_kd_loss_chunk(const SparseKdChunkArgs& args);
// Host ids (n, K) of a cached sparse teacher: each row's distinct and in [0, V);
// the error names the row and the id.
void sparse_teacher_ids(const int32_t* ids, int64_t n, int64_t K, int64_t V);
void topk_log_probs(const TopkArgs& args);
void sum_squares(const float* x, int64_t n);
void adamw(const AdamWArgs& args);

}  // namespace kdtrain::op_checks
