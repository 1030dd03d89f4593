// The distillation loss against a cached teacher (data/teacher_cache.h stores,
// per target position, the teacher's top-K ids, their log-probabilities and the
// log of the remaining tail mass): the dense teacher logits that make the fused
// loss (model/loss.h) compute the cached-teacher loss exactly, and its run over a
// batch of cached rows. The maths is in docs/distillation.md.
#pragma once
#include <cstdint>
#include <vector>

#include "config/config.h"
#include "model/loss.h"

namespace kdtrain {

// One window's rows (or a batch's, appended in token order), decoded to fp32:
// ids (T, K), logp (T, K), log_tail (T).
struct CachedRows {
  int64_t K = 0;
  std::vector<int32_t> ids;
  std::vector<float> logp;
  std::vector<float> log_tail;
  // Rows a reader has already checked and uploaded to backend memory
  // (data/teacher_cache_prefetch.h, on CUDA): the host vectors are then empty,
  // and these stay valid until that reader's next take.
  struct OnDevice {
    const int32_t* ids = nullptr;   // (rows, K)
    const float* logp = nullptr;    // (rows, K)
    const float* log_tail = nullptr;  // (rows)
    int64_t rows = 0;
  } device;
  int64_t rows() const { return device.ids ? device.rows : static_cast<int64_t>(log_tail.size()); }
};

// The dense teacher logits (n, V) that make the fused loss (backend loss_chunk,
// which applies softmax(t / tau)) compute the cached-teacher loss exactly: the
// definition the sparse loss is checked against (tests/backend/test_backend_ops.cpp):
//   renormalize: t = stored log p_T on the K ids, -inf elsewhere, so the teacher
//     is softmax(log p_T / tau) renormalised over the K ids;
//   bucket: the K+1 coarse teacher q = softmax over {log p_T,k / tau, log_tail / tau};
//     t_k = tau log q_k on the K ids and, on every other id j, the tail mass spread
//     like the student's: t_j = tau (log q_tail + log p_S,j - log P_S,tail),
//     p_S = softmax(s / tau). Then every KD loss of the fine distributions equals
//     the same loss of the (K+1)-bucket distributions, and the fused loss's
//     gradient (teacher held fixed) is the exact gradient of the bucket loss.
// student (n, V) host logits are read in bucket mode only (may be null otherwise).
template <typename T>
void dense_cached_teacher(const int32_t* ids, const float* logp, const float* log_tail, int64_t n,
                          int64_t K, int64_t V, CacheTail tail, double tau, const T* student,
                          T* out);

// soft_ce in bucket mode: the fine cross-entropy against the expanded teacher is
// not the bucket cross-entropy (it adds the student's entropy inside the tail), so
// the fused loss runs forward_kl (same gradient) and the constant tau^2 H(q) of
// each row's (K+1)-bucket teacher is added to its KD value. Writes it per row.
void bucket_teacher_entropy(const float* logp, const float* log_tail, int64_t n, int64_t K,
                            double tau, double* out);

// Refuses kd.loss=reverse_kl with kd.cache_tail=renormalize (infinite: the teacher is
// zero outside its top K).
void check_cached_loss_kind(KdLoss kd_loss, CacheTail tail);

// The fused loss against cached rows [0, N) (N = the student's tokens in batch,
// rows in the order of the student's tokens), each chunk's KD computed from the
// K cached values by the backend's sparse_kd_loss_chunk, never from (n, V)
// teacher logits; its values and gradient are those of the fused loss against
// dense_cached_teacher (plus bucket_teacher_entropy for soft_ce in bucket mode).
// reverse_kl needs kd.cache_tail=bucket.
LossSums run_cached_loss(FusedLoss& loss, Model& student, const CachedRows& rows, CacheTail tail,
                         const int32_t* targets, const LossSettings& settings, float grad_scale,
                         bool compute_grad);

}  // namespace kdtrain
