// Optimizer support: deterministic sum of squares (for the global grad norm) and
// decoupled AdamW.
//
// Numerics: sum_squares splits x into fixed blocks of kBlock elements, sums each
// block in double, then adds the block sums in block order: the result is the
// same bits for any thread count. AdamW works per element in double and rounds
// the new weight and moments to T:
//   g = grad_scale * grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   w -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * w)
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace kdtrain::cpu {

namespace {
constexpr int64_t kBlock = 4096;
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(nblocks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t k1 = std::min(n, (blk + 1) * kBlock);
    double s = 0.0;
    for (int64_t k = blk * kBlock; k < k1; ++k) s += static_cast<double>(x[k]) * x[k];
    partial[blk] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

template <typename T>
void adamw_update(T* master, T* compute, const T* grad, T* m, T* v, int64_t n, T lr, T beta1,
                  T beta2, T eps, T weight_decay, T grad_scale, int64_t step) {
  const double b1 = beta1, b2 = beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  const bool write_compute = compute != nullptr && compute != master;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    const double g = static_cast<double>(grad_scale) * grad[k];
    const double mk = b1 * m[k] + (1.0 - b1) * g;
    const double vk = b2 * v[k] + (1.0 - b2) * g * g;
    m[k] = static_cast<T>(mk);
    v[k] = static_cast<T>(vk);
    const double w = master[k];
    const double upd = (mk / bc1) / (std::sqrt(vk / bc2) + eps) + weight_decay * w;
    master[k] = static_cast<T>(w - lr * upd);
    if (write_compute) compute[k] = master[k];
  }
}

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);
template void adamw_update<float>(float*, float*, const float*, float*, float*, int64_t, float,
                                  float, float, float, float, float, int64_t);
template void adamw_update<double>(double*, double*, const double*, double*, double*, int64_t,
                                   double, double, double, double, double, double, int64_t);

}  // namespace kdtrain::cpu
