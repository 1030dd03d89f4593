// Fused classifier loss on a chunk of n rows: cross-entropy against targets, the
// distillation loss against teacher logits at temperature tau, and the logits
// gradient written in place over the bf16 student logits (as llm.c's fused
// classifier). Semantics match src/backend/cpu/cpu_loss.cpp:
//   ce          = logsumexp(s) - s[target]                 d/ds = softmax(s) - onehot
//   forward_kl  = tau^2 sum p_T (log p_T - log p_S)        d/ds = tau (p_S - p_T)
//   reverse_kl  = tau^2 sum p_S (log p_S - log p_T)        d/ds = tau p_S (r - E_pS[r])
//   soft_ce     = -tau^2 sum p_T log p_S                   d/ds = tau (p_S - p_T)
//   dlogits     = grad_scale * (w dKD + (1-w) dCE), w = kd_weight (0 without teacher)
// soft_ce (optional output) = -tau^2 sum p_T log p_S for any kind: the KD loss on a
// cross-entropy scale (KL + teacher entropy), for logging.
// A negative target masks the CE term of its row (ce = 0, no CE gradient); KD still
// counts. Targets >= V cannot raise an error from the device: they are treated as
// masked too (the CPU reference throws; callers validate on the host).
//
// Numerics: one block per row, two passes (loss.cu); logits read as bf16 (16-byte
// packs when the row allows), everything else fp32. Pass 1 keeps per thread an
// online (max, sum of exp, weighted sums) for s, s/tau (when tau != 1) and t/tau,
// merged by fixed block trees, giving ce, the KD value and soft-CE; pass 2 writes
// the gradient. Each thread owns a fixed strided set of columns: deterministic.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {

enum class KdKind : int { forward_kl = 0, reverse_kl = 1, soft_ce = 2 };

struct LossParams {
  int64_t n = 0, V = 0;
  bf16* logits = nullptr;                // (n, V) student logits in, dlogits out (if compute_grad)
  const bf16* teacher_logits = nullptr;  // (n, V) or null (no KD)
  const int32_t* targets = nullptr;      // (n)
  float* ce = nullptr;                   // (n), written
  float* kd = nullptr;                   // (n), written (0 without teacher)
  float* soft_ce = nullptr;              // (n) or null, written (0 without teacher)
  KdKind kind = KdKind::forward_kl;
  float temperature = 1.f;
  float kd_weight = 0.f;
  float grad_scale = 1.f;
  bool compute_grad = true;
};

void loss_chunk(const LossParams& p, cudaStream_t stream);

}  // namespace kdtrain::cuda
