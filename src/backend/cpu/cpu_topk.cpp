// The reference of topk_log_probs (backend.h; kernels/topk.cu is its CUDA form),
// which the CPU backend runs and the teacher cache writer's tests compare with.
//
// Per row, in double: m = max z, lse = m + log sum_j exp(z_j - m); the top K by
// (z descending, id ascending) — a strict order, so the set and its order are
// unique and equal logits go to the lower id; logp_k = z_k - lse rounded once to
// fp32; the tail sum_{j not in top K} exp(z_j - m) is summed over the excluded
// ids themselves (not 1 minus the top K's mass, which loses all precision when
// the top K hold nearly everything), log_tail = log(tail) + m - lse.
// Rows are independent: the parallel loop over rows is deterministic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace kdtrain::cpu {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A row with NaN or +inf, or with every logit -inf, has no softmax.
template <typename T>
bool has_distribution(const T* z, int64_t V, double& max_out) {
  double m = -INFINITY;
  for (int64_t j = 0; j < V; ++j) {
    const double x = static_cast<double>(z[j]);
    if (std::isnan(x) || x == INFINITY) return false;
    m = std::max(m, x);
  }
  max_out = m;
  return m != -INFINITY;
}

template <typename T>
void topk_row(const T* z, int64_t V, int64_t K, std::vector<int32_t>& order, int32_t* ids, float* logp,
              float* log_tail) {
  double m = 0.0;
  if (!has_distribution(z, V, m)) {
    std::fill(ids, ids + K, -1);
    std::fill(logp, logp + K, kNaN);
    *log_tail = kNaN;
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j]) - m);
  const double lse = m + std::log(sum);
  order.resize(V);
  std::iota(order.begin(), order.end(), 0);
  auto before = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  if (K < V) std::nth_element(order.begin(), order.begin() + K, order.end(), before);
  std::sort(order.begin(), order.begin() + K, before);
  double rest = 0.0;
  for (int64_t j = K; j < V; ++j) rest += std::exp(static_cast<double>(z[order[j]]) - m);
  for (int64_t k = 0; k < K; ++k) {
    ids[k] = order[k];
    logp[k] = static_cast<float>(static_cast<double>(z[order[k]]) - lse);
  }
  *log_tail = rest > 0.0 ? static_cast<float>(std::log(rest) + m - lse) : -INFINITY;
}

}  // namespace

template <typename T>
void topk_log_probs(const T* logits, int64_t n, int64_t V, int64_t K, int32_t* ids, float* logp,
                    float* log_tail) {
#pragma omp parallel
  {
    std::vector<int32_t> order;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r)
      topk_row(logits + r * V, V, K, order, ids + r * K, logp + r * K, log_tail + r);
  }
}

template void topk_log_probs<float>(const float*, int64_t, int64_t, int64_t, int32_t*, float*, float*);

}  // namespace kdtrain::cpu
