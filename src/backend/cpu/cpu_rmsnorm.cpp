// RMSNorm forward and backward.
//
// Numerics: rstd = 1/sqrt(mean(x^2) + eps) with the mean accumulated in double;
// out = x * rstd * w. Backward, with y = x * rstd:
//   dx_k += rstd * (w_k dy_k - y_k * mean_c(w_c dy_c y_c))
//   dw_c += sum_n dy_nc y_nc
// dinp rows are independent (parallel over rows); dweight is reduced by threads
// that own column blocks and walk the rows in order (thread-count independent).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_parallel.h"

namespace kdtrain::cpu {

namespace {
// One row of the forward: rstd and out from x.
template <typename T>
void normalize_row(T* o, T* rstd, const T* x, const T* weight, int64_t C, T eps) {
  double ss = 0.0;
  for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
  const T r = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
  *rstd = r;
  for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
}
}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     T eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) normalize_row(out + n * C, rstd + n, inp + n * C, weight, C, eps);
}

template <typename T>
void add_rmsnorm_forward(T* sum_out, T* out, T* rstd, const T* a, const T* b, const T* weight,
                         int64_t N, int64_t C, T eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* s = sum_out + n * C;
    for (int64_t c = 0; c < C; ++c) s[c] = a[n * C + c] + b[n * C + c];
    normalize_row(out + n * C, rstd + n, s, weight, C, eps);
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t N, int64_t C) {
  if (dinp != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      const T r = rstd[n];
      double dot = 0.0;  // sum_c w_c dy_c y_c
      for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(weight[c] * dy[c] * x[c] * r);
      const T mean_dot = static_cast<T>(dot / static_cast<double>(C));
      T* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) dx[c] += r * (weight[c] * dy[c] - x[c] * r * mean_dot);
    }
  }
  if (dweight != nullptr) {
    for_column_blocks(C, [&](int64_t c0, int64_t c1) {
      for (int64_t n = 0; n < N; ++n) {
        const T* x = inp + n * C;
        const T* dy = dout + n * C;
        const T r = rstd[n];
        for (int64_t c = c0; c < c1; ++c) dweight[c] += dy[c] * x[c] * r;
      }
    });
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t,
                                     float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                      int64_t, double);
template void add_rmsnorm_forward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, int64_t, int64_t, float);
template void add_rmsnorm_forward<double>(double*, double*, double*, const double*,
                                          const double*, const double*, int64_t, int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t);

}  // namespace kdtrain::cpu
