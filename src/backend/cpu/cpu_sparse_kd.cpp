// The fused classifier against a cached sparse teacher: the reference of
// sparse_kd_loss_chunk (backend.h; kernels/sparse_kd_loss.cu is its CUDA form).
//
// Per row, in double, with s the student logits, p_S = softmax(s/tau), S the K
// cached ids and a_k = l_k/tau the tempered cached log-probabilities:
//   teacher q_k = exp(a_k - lse_a) on S; lse_a over the K values (renormalize)
//   or over them and a_tail = l_tail/tau (bucket, q_tail = exp(a_tail - lse_a));
//   student tail P = sum_{j not in S} p_S(j), summed over the tail ids (no
//   cancellation against the top K).
// The values are loss_chunk's against the dense teacher of dense_cached_teacher,
// which spreads q_tail over the tail like the student (q_j = q_tail p_S(j) / P):
//   forward_kl = tau^2 [sum_S q (log q - log p_S) + q_tail (log q_tail - log P)]
//   reverse_kl = tau^2 [sum_S p_S (log p_S - log q) + P (log P - log q_tail)]  (bucket)
//   soft_ce    = -tau^2 [sum_S q log p_S + q_tail log P]  (the bucket cross-entropy)
//   logged soft-CE = -tau^2 [sum_S q log p_S + (q_tail / P) sum_{j not in S} p_S(j) log p_S(j)]
// and the gradient tau (p_S - q) (forward_kl, soft_ce) or tau p_S (r - E_pS[r]),
// r = log p_S - log q (reverse_kl), q the dense teacher: on the tail
// q_j / p_S(j) = q_tail / P and r_j = log P - log q_tail. Without a tail (K = V)
// the bucket teacher is renormalised over S, as the dense form's softmax does.
// Rows are independent: the parallel loop over rows is deterministic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "core/error.h"

namespace kdtrain::cpu {

namespace {

double log_sum_exp(const std::vector<double>& x) {
  double mx = -INFINITY;
  for (double v : x) mx = std::max(mx, v);
  if (mx == -INFINITY) return -INFINITY;
  double sum = 0.0;
  for (double v : x) sum += std::exp(v - mx);
  return mx + std::log(sum);
}

// The student's side of one row: logsumexp of s and of s/tau, and the tail's
// (the ids outside the top K) share of softmax(s/tau), in double.
struct StudentRow {
  double lse1 = 0, lseS = 0;  // log sum exp of s, of s / tau
  double log_P = 0, P = 0;    // the tail's mass under softmax(s / tau); -inf, 0 without a tail
  double tail_plogp = 0;      // sum over the tail of p_S log p_S
};

template <typename T>
StudentRow student_row(const T* s, int64_t V, int64_t K, double tau, const char* in_top) {
  double m1 = -INFINITY, mS = -INFINITY, mt = -INFINITY;
  for (int64_t j = 0; j < V; ++j) {
    const double x = static_cast<double>(s[j]);
    m1 = std::max(m1, x);
    mS = std::max(mS, x / tau);
    if (!in_top[j]) mt = std::max(mt, x / tau);
  }
  double z1 = 0.0, zS = 0.0, zt = 0.0, zt_s = 0.0;
  for (int64_t j = 0; j < V; ++j) {
    const double x = static_cast<double>(s[j]);
    z1 += std::exp(x - m1);
    zS += std::exp(x / tau - mS);
    if (!in_top[j]) {
      const double e = std::exp(x / tau - mt);
      zt += e;
      zt_s += e * (x / tau);
    }
  }
  StudentRow r;
  r.lse1 = m1 + std::log(z1);
  r.lseS = mS + std::log(zS);
  r.log_P = K < V ? mt + std::log(zt) - r.lseS : -INFINITY;
  r.P = std::exp(r.log_P);
  // sum over the tail of p_S log p_S = P (E_tail[s/tau] - lseS)
  r.tail_plogp = K < V ? r.P * (zt_s / zt - r.lseS) : 0.0;
  return r;
}

// Writes one row's gradient over its logits s: grad_scale (w dKD + (1 - w) dCE).
struct RowGradient {
  double tau, w, gs, lse1, lseS;
  int32_t target;  // < 0: no CE term
  double dce(int64_t j, double x) const {
    if (target < 0) return 0.0;
    return std::exp(x - lse1) - (j == target ? 1.0 : 0.0);
  }
};

// Every id first with the tail's dKD (tau p_S(j) tail_factor), then the K cached
// ids over it with top_dkd(k); s_top holds their logits from before.
template <typename T, typename TopDkd>
void write_row_gradient(const RowGradient& g, T* s, int64_t V, double tail_factor, const TopDkd& top_dkd,
                        const int32_t* id, const double* s_top, int64_t K) {
  for (int64_t j = 0; j < V; ++j) {
    const double x = static_cast<double>(s[j]);
    const double dkd = g.tau * std::exp(x / g.tau - g.lseS) * tail_factor;
    s[j] = static_cast<T>(g.gs * (g.w * dkd + (1.0 - g.w) * g.dce(j, x)));
  }
  for (int64_t k = 0; k < K; ++k) s[id[k]] = static_cast<T>(g.gs * (g.w * top_dkd(k) + (1.0 - g.w) * g.dce(id[k], s_top[k])));
}

}  // namespace

template <typename T>
void sparse_kd_loss_chunk(T* logits, const int32_t* targets, const int32_t* ids, const float* logp,
                          const float* log_tail, T* ce, T* kd, T* soft_ce, int64_t n, int64_t V,
                          int64_t K, CacheTail tail, KdLoss kd_loss, T temperature, T kd_weight,
                          T grad_scale, bool compute_grad) {
  KD_CHECK(temperature > T(0), "sparse_kd_loss_chunk: temperature must be positive, got ",
           temperature);
  KD_CHECK(K >= 1 && K <= V, "sparse_kd_loss_chunk: K = ", K, " must be in [1, V = ", V, "]");
  KD_CHECK(!(kd_loss == KdLoss::reverse_kl && tail == CacheTail::renormalize),
           "sparse_kd_loss_chunk: reverse_kl needs kd.cache_tail=bucket");
  for (int64_t r = 0; r < n; ++r)
    KD_CHECK(targets[r] < V, "sparse_kd_loss_chunk: target ", targets[r], " at row ", r,
             " is outside the vocabulary of ", V);
  op_checks::sparse_teacher_ids(ids, n, K, V);
  const double tau = static_cast<double>(temperature), w = static_cast<double>(kd_weight),
               gs = static_cast<double>(grad_scale);
  const bool bucket = tail == CacheTail::bucket && K < V;

#pragma omp parallel
  {
    std::vector<char> in_top(static_cast<size_t>(V));
    std::vector<double> a(static_cast<size_t>(K + 1)), lq(static_cast<size_t>(K)),
        ls(static_cast<size_t>(K)), s_top(static_cast<size_t>(K));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      T* s = logits + r * V;
      const int32_t* id = ids + r * K;
      const float* lp = logp + r * K;
      std::fill(in_top.begin(), in_top.end(), 0);
      for (int64_t k = 0; k < K; ++k) in_top[id[k]] = 1;
      const StudentRow st = student_row(s, V, K, tau, in_top.data());
      const double lse1 = st.lse1, lseS = st.lseS, log_P = st.log_P, P = st.P, tail_plogp = st.tail_plogp;
      const int32_t target = targets[r];
      ce[r] = target >= 0 ? static_cast<T>(lse1 - static_cast<double>(s[target])) : T(0);

      // The teacher over the K ids (and the tail bucket).
      for (int64_t k = 0; k < K; ++k) a[k] = static_cast<double>(lp[k]) / tau;
      a[K] = bucket ? static_cast<double>(log_tail[r]) / tau : -INFINITY;
      const double lse_a = log_sum_exp(a);
      const double lq_tail = a[K] - lse_a, q_tail = std::exp(lq_tail);
      double fwd = 0.0, rev = 0.0, xent = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        s_top[k] = static_cast<double>(s[id[k]]);
        lq[k] = a[k] - lse_a;
        ls[k] = s_top[k] / tau - lseS;
        const double q = std::exp(lq[k]);
        if (q > 0.0) {
          fwd += q * (lq[k] - ls[k]);
          xent -= q * ls[k];
        }
        rev += std::exp(ls[k]) * (ls[k] - lq[k]);
      }
      double logged = xent;
      if (bucket) {
        if (q_tail > 0.0) {
          fwd += q_tail * (lq_tail - log_P);
          xent -= q_tail * log_P;
          logged -= q_tail / P * tail_plogp;
        }
        if (P > 0.0) rev += P * (log_P - lq_tail);
      }
      const double value = kd_loss == KdLoss::forward_kl   ? fwd
                           : kd_loss == KdLoss::reverse_kl ? rev
                                                           : xent;
      kd[r] = static_cast<T>(tau * tau * value);
      if (soft_ce) soft_ce[r] = static_cast<T>(tau * tau * logged);
      if (!compute_grad) continue;

      // dKD/ds_j = tau p_S(j) c on the tail (c = 1 - q_tail / P, or the reverse
      // KL's r - E[r]), then the K ids are written over with their own terms.
      const bool reverse = kd_loss == KdLoss::reverse_kl;
      const double tail_factor =
          reverse ? (log_P - lq_tail) - rev : 1.0 - (bucket && q_tail > 0.0 ? q_tail / P : 0.0);
      RowGradient g{tau, w, gs, lse1, lseS, target};
      write_row_gradient(g, s, V, tail_factor, [&](int64_t k) {
        const double pS = std::exp(ls[k]);
        return reverse ? tau * pS * ((ls[k] - lq[k]) - rev) : tau * (pS - std::exp(lq[k]));
      }, id, s_top.data(), K);
    }
  }
}

template void sparse_kd_loss_chunk<float>(float*, const int32_t*, const int32_t*, const float*,
                                          const float*, float*, float*, float*, int64_t, int64_t,
                                          int64_t, CacheTail, KdLoss, float, float, float, bool);
template void sparse_kd_loss_chunk<double>(double*, const int32_t*, const int32_t*, const float*,
                                           const float*, double*, double*, double*, int64_t,
                                           int64_t, int64_t, CacheTail, KdLoss, double, double,
                                           double, bool);

}  // namespace kdtrain::cpu
