#include "model/cached_teacher_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/backend.h"
#include "backend/op_checks.h"
#include "core/error.h"
#include "model/model.h"

namespace kdtrain {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double logsumexp(const double* x, int64_t n) {
  double mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == kNegInf) return kNegInf;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}

}  // namespace

template <typename T>
void dense_cached_teacher(const int32_t* ids, const float* logp, const float* log_tail, int64_t n,
                          int64_t K, int64_t V, CacheTail tail, double tau, const T* student,
                          T* out) {
  KD_CHECK(tau > 0.0, "teacher cache: temperature must be positive");
  KD_CHECK(tail == CacheTail::renormalize || student != nullptr,
           "teacher cache: bucket mode needs the student logits");
  // Validate first: exceptions must not escape the parallel region.
  op_checks::sparse_teacher_ids(ids, n, K, V);
#pragma omp parallel
  {
    std::vector<char> in_topk(V);
    std::vector<double> a(K + 1), ls(V);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int32_t* id = ids + r * K;
      const float* lp = logp + r * K;
      T* t = out + r * V;
      std::fill(in_topk.begin(), in_topk.end(), 0);
      for (int64_t k = 0; k < K; ++k) in_topk[id[k]] = 1;
      if (tail == CacheTail::renormalize) {
        // softmax(t / tau) in the loss = p_T^(1/tau) renormalised over the K ids.
        std::fill(t, t + V, static_cast<T>(-INFINITY));
        for (int64_t k = 0; k < K; ++k) t[id[k]] = static_cast<T>(lp[k]);
        continue;
      }
      // Coarse teacher over K + 1 buckets at temperature tau.
      for (int64_t k = 0; k < K; ++k) a[k] = static_cast<double>(lp[k]) / tau;
      a[K] = static_cast<double>(log_tail[r]) / tau;
      const double lse_a = logsumexp(a.data(), K + 1);
      const double log_q_tail = a[K] - lse_a;
      // Student log softmax(s / tau) and the log of its tail bucket.
      const T* s = student + r * V;
      for (int64_t j = 0; j < V; ++j) ls[j] = static_cast<double>(s[j]) / tau;
      const double lse_s = logsumexp(ls.data(), V);
      double mx = kNegInf;
      for (int64_t j = 0; j < V; ++j) {
        ls[j] -= lse_s;
        if (!in_topk[j]) mx = std::max(mx, ls[j]);
      }
      double tail_sum = 0.0;
      for (int64_t j = 0; j < V; ++j)
        if (!in_topk[j]) tail_sum += std::exp(ls[j] - mx);
      const double log_p_tail = mx + std::log(tail_sum);  // -inf when K = V
      const double uniform = -std::log(static_cast<double>(std::max<int64_t>(V - K, 1)));
      for (int64_t j = 0; j < V; ++j) {
        if (in_topk[j]) continue;
        double v = log_q_tail + (std::isfinite(log_p_tail) ? ls[j] - log_p_tail : uniform);
        t[j] = static_cast<T>(tau * v);
      }
      for (int64_t k = 0; k < K; ++k) t[id[k]] = static_cast<T>(tau * (a[k] - lse_a));
    }
  }
}

template void dense_cached_teacher<float>(const int32_t*, const float*, const float*, int64_t,
                                          int64_t, int64_t, CacheTail, double, const float*,
                                          float*);
template void dense_cached_teacher<double>(const int32_t*, const float*, const float*, int64_t,
                                           int64_t, int64_t, CacheTail, double, const double*,
                                           double*);

void bucket_teacher_entropy(const float* logp, const float* log_tail, int64_t n, int64_t K,
                            double tau, double* out) {
  std::vector<double> a(K + 1);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < K; ++k) a[k] = static_cast<double>(logp[r * K + k]) / tau;
    a[K] = static_cast<double>(log_tail[r]) / tau;
    const double lse = logsumexp(a.data(), K + 1);
    double h = 0.0;
    for (int64_t m = 0; m <= K; ++m) {
      const double lq = a[m] - lse;
      if (std::isfinite(lq)) h -= std::exp(lq) * lq;
    }
    out[r] = tau * tau * h;
  }
}

void check_cached_loss_kind(KdLoss kd_loss, CacheTail tail) {
  KD_CHECK(!(tail == CacheTail::renormalize && kd_loss == KdLoss::reverse_kl),
           "kd.loss=reverse_kl with kd.teacher_cache needs kd.cache_tail=bucket: the "
           "renormalised top-k teacher gives zero probability to the student's other tokens");
}

LossSums run_cached_loss(FusedLoss& loss, Model& student, const CachedRows& rows, CacheTail tail,
                         const int32_t* targets, const LossSettings& settings, float grad_scale,
                         bool compute_grad) {
  const int64_t N = student.tokens_in_batch(), K = rows.K;
  const bool on_device = rows.device.ids != nullptr;
  KD_CHECK(rows.rows() == N && (on_device || static_cast<int64_t>(rows.ids.size()) == N * K),
           "kd.teacher_cache: ", rows.rows(), " cached rows for ", N, " student tokens");
  check_cached_loss_kind(settings.kd_loss, tail);
  FusedLoss::SparseTeacher teacher;
  teacher.K = K;
  teacher.ids = on_device ? rows.device.ids : rows.ids.data();
  teacher.logp = on_device ? rows.device.logp : rows.logp.data();
  teacher.log_tail = on_device ? rows.device.log_tail : rows.log_tail.data();
  teacher.on_device = on_device;
  teacher.tail = tail;
  return loss.run(student, teacher, targets, settings, grad_scale, compute_grad);
}

}  // namespace kdtrain
