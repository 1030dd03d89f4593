// Fused classifier loss on a chunk of rows: cross-entropy and distillation.
//
// Numerics: every row is processed in double regardless of T (the cost is O(V)
// per row, against the O(V*C) matmul that produced the logits). log-softmaxes are
// computed as z - logsumexp(z) with the max subtracted, so p log p terms never
// see log(0) except when a probability underflows to exactly 0, where the term is
// taken as 0. With s the student logits, t the teacher logits, tau the temperature:
//   ce          = logsumexp(s) - s[target]                 d/ds = softmax(s) - onehot
//   forward_kl  = tau^2 sum p_T (log p_T - log p_S)        d/ds = tau (p_S - p_T)
//   reverse_kl  = tau^2 sum p_S (log p_S - log p_T)        d/ds = tau p_S (r - E_pS[r]), r = log p_S - log p_T
//   soft_ce     = -tau^2 sum p_T log p_S                   d/ds = tau (p_S - p_T)
// with p = softmax(./tau). The soft_ce output (optional) is that last quantity for
// any kd_loss: the KD loss on a cross-entropy scale (KL + teacher entropy), logged.
// Rows are independent, so the parallel loop over rows is deterministic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kdtrain::cpu {

namespace {

// out[k] = z[k]*inv_tau - logsumexp(z*inv_tau); returns the logsumexp.
template <typename T>
double log_softmax(std::vector<double>& out, const T* z, int64_t V, double inv_tau) {
  double mx = -INFINITY;
  for (int64_t k = 0; k < V; ++k) mx = std::max(mx, static_cast<double>(z[k]) * inv_tau);
  double sum = 0.0;
  for (int64_t k = 0; k < V; ++k) sum += std::exp(static_cast<double>(z[k]) * inv_tau - mx);
  const double lse = mx + std::log(sum);
  for (int64_t k = 0; k < V; ++k) out[k] = static_cast<double>(z[k]) * inv_tau - lse;
  return lse;
}

}  // namespace

template <typename T>
void loss_chunk(T* logits, const T* teacher_logits, const int32_t* targets, T* ce, T* kd,
                int64_t n, int64_t V, KdLoss kd_loss, T temperature, T kd_weight, T grad_scale,
                bool compute_grad, T* soft_ce) {
  KD_CHECK(temperature > T(0), "loss_chunk: temperature must be positive, got ", temperature);
  const bool has_teacher = teacher_logits != nullptr;
  const double w = has_teacher ? static_cast<double>(kd_weight) : 0.0;
  const double tau = static_cast<double>(temperature);
  const double gs = static_cast<double>(grad_scale);
  for (int64_t r = 0; r < n; ++r) {
    KD_CHECK(targets[r] < V, "loss_chunk: target ", targets[r], " at row ", r,
             " is outside the vocabulary of ", V);
  }

#pragma omp parallel
  {
    std::vector<double> ls1(static_cast<size_t>(V));   // log softmax(s)
    std::vector<double> lsS(static_cast<size_t>(V));   // log softmax(s/tau)
    std::vector<double> lsT(static_cast<size_t>(V));   // log softmax(t/tau)
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      T* s = logits + r * V;
      const int32_t target = targets[r];
      log_softmax(ls1, s, V, 1.0);
      ce[r] = target >= 0 ? static_cast<T>(-ls1[target]) : T(0);

      double kd_val = 0.0;
      double mean_r = 0.0;  // E_pS[log p_S - log p_T], reverse KL only
      if (has_teacher) {
        const T* t = teacher_logits + r * V;
        log_softmax(lsS, s, V, 1.0 / tau);
        log_softmax(lsT, t, V, 1.0 / tau);
        double acc = 0.0, xent = 0.0;
        for (int64_t k = 0; k < V; ++k) {
          const double pS = std::exp(lsS[k]);
          const double pT = std::exp(lsT[k]);
          if (pT > 0.0) xent -= pT * lsS[k];
          switch (kd_loss) {
            case KdLoss::forward_kl:
              if (pT > 0.0) acc += pT * (lsT[k] - lsS[k]);
              break;
            case KdLoss::reverse_kl:
              if (pS > 0.0) acc += pS * (lsS[k] - lsT[k]);
              break;
            case KdLoss::soft_ce:
              if (pT > 0.0) acc -= pT * lsS[k];
              break;
          }
        }
        if (kd_loss == KdLoss::reverse_kl) mean_r = acc;
        kd_val = tau * tau * acc;
        if (soft_ce) soft_ce[r] = static_cast<T>(tau * tau * xent);
      } else if (soft_ce) {
        soft_ce[r] = T(0);
      }
      kd[r] = static_cast<T>(kd_val);

      if (!compute_grad) continue;
      for (int64_t k = 0; k < V; ++k) {
        double dce = std::exp(ls1[k]);
        if (k == target) dce -= 1.0;
        if (target < 0) dce = 0.0;
        double dkd = 0.0;
        if (has_teacher) {
          const double pS = std::exp(lsS[k]);
          if (kd_loss == KdLoss::reverse_kl) {
            dkd = tau * pS * ((lsS[k] - lsT[k]) - mean_r);
          } else {
            dkd = tau * (pS - std::exp(lsT[k]));
          }
        }
        s[k] = static_cast<T>(gs * (w * dkd + (1.0 - w) * dce));
      }
    }
  }
}

template void loss_chunk<float>(float*, const float*, const int32_t*, float*, float*, int64_t,
                                int64_t, KdLoss, float, float, float, bool, float*);
template void loss_chunk<double>(double*, const double*, const int32_t*, double*, double*,
                                 int64_t, int64_t, KdLoss, double, double, double, bool, double*);

}  // namespace kdtrain::cpu
