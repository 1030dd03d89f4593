// Elementwise ops: alpha activation, sigmoid gate, SwiGLU, add/accumulate, and the
// column sums used for the alpha_ma update.
//
// Numerics: sigmoid is 1/(1+e^{-z}) for z >= 0 and e^{z}/(1+e^{z}) otherwise, so it
// never overflows. linear_clip is 0 for z <= -5, 0.1 z + 0.5 inside, 1 for z >= 5,
// with derivative 0.1 strictly inside and 0 at and beyond +-5. Elementwise loops
// are split across threads; column sums add rows in order per column.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_parallel.h"

namespace kdtrain::cpu {

namespace {

template <typename T>
T sigmoid(T z) {
  if (z >= T(0)) return T(1) / (T(1) + std::exp(-z));
  const T e = std::exp(z);
  return e / (T(1) + e);
}

}  // namespace

template <typename T>
void alpha_activation_forward(T* alpha, const T* z, int64_t n, AlphaActivation act) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    if (act == AlphaActivation::sigmoid) {
      alpha[k] = sigmoid(z[k]);
    } else {
      alpha[k] = z[k] <= T(-5) ? T(0) : (z[k] >= T(5) ? T(1) : T(0.1) * z[k] + T(0.5));
    }
  }
}

template <typename T>
void alpha_activation_backward(T* dz, const T* dalpha, const T* z, int64_t n,
                               AlphaActivation act) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    T d;
    if (act == AlphaActivation::sigmoid) {
      const T s = sigmoid(z[k]);
      d = s * (T(1) - s);
    } else {
      d = (z[k] > T(-5) && z[k] < T(5)) ? T(0.1) : T(0);
    }
    dz[k] = dalpha[k] * d;
  }
}

template <typename T>
void column_sum_accumulate(T* sums, const T* x, int64_t N, int64_t H) {
  for_column_blocks(H, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t c = c0; c < c1; ++c) sums[c] += x[r * H + c];
    }
  });
}

template <typename T>
void sigmoid_gate_forward(T* out, const T* inp, const T* gate, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) out[k] = inp[k] * sigmoid(gate[k]);
}

template <typename T>
void sigmoid_gate_backward(T* dinp, T* dgate, const T* dout, const T* inp, const T* gate,
                           int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    const T s = sigmoid(gate[k]);
    dinp[k] = dout[k] * s;
    dgate[k] = dout[k] * inp[k] * s * (T(1) - s);
  }
}

template <typename T>
void swiglu_forward(T* out, const T* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* g = gate_up + r * 2 * F;
    const T* u = g + F;
    T* o = out + r * F;
    for (int64_t f = 0; f < F; ++f) o[f] = g[f] * sigmoid(g[f]) * u[f];
  }
}

template <typename T>
void swiglu_backward(T* dgate_up, const T* dout, const T* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* g = gate_up + r * 2 * F;
    const T* u = g + F;
    const T* dy = dout + r * F;
    T* dg = dgate_up + r * 2 * F;
    T* du = dg + F;
    for (int64_t f = 0; f < F; ++f) {
      const T s = sigmoid(g[f]);
      const T silu = g[f] * s;
      // d silu/dg = s + g s (1 - s)
      dg[f] = dy[f] * u[f] * (s + g[f] * s * (T(1) - s));
      du[f] = dy[f] * silu;
    }
  }
}

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) out[k] = a[k] + b[k];
}

template <typename T>
void accumulate(T* dst, const T* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) dst[k] += src[k];
}

#define KDTRAIN_INSTANTIATE_ACTIVATIONS(T)                                                   \
  template void alpha_activation_forward<T>(T*, const T*, int64_t, AlphaActivation);         \
  template void alpha_activation_backward<T>(T*, const T*, const T*, int64_t,                \
                                             AlphaActivation);                               \
  template void column_sum_accumulate<T>(T*, const T*, int64_t, int64_t);                    \
  template void sigmoid_gate_forward<T>(T*, const T*, const T*, int64_t);                    \
  template void sigmoid_gate_backward<T>(T*, T*, const T*, const T*, const T*, int64_t);     \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);                           \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t);                \
  template void add<T>(T*, const T*, const T*, int64_t);                                     \
  template void accumulate<T>(T*, const T*, int64_t);

KDTRAIN_INSTANTIATE_ACTIVATIONS(float)
KDTRAIN_INSTANTIATE_ACTIVATIONS(double)
#undef KDTRAIN_INSTANTIATE_ACTIVATIONS

}  // namespace kdtrain::cpu
