// Causal attention core for every variant, forward and backward (SPEC §2).
//
// Numerics:
// - x_ij = scale * q_i.k_j for j <= i; the softmax is computed stably (max
//   subtracted) and lse_i = log of its denominator (the sink term e^{s_h} included
//   for `sink`) is stored per (b, h, i). Accumulation is in T.
// - affine: out_i = alpha_i (PV)_i + beta_i S_i with beta_i = (alpha_ma - alpha_i)/N_i,
//   S_i = sum_{j<=i} v_j, N_i = i + 1. `gated` and `affine_gated` share the core of
//   baseline and affine (the gate is a separate op).
// - Backward stores nothing extra: P is recomputed from lse. Pass 1 runs one
//   independent task per (b, h, i) and writes dq_i, D_i = dO'_i.(PV)_i and dalpha_i.
//   Pass 2 runs one task per (b, kv head, j) and sums over its query heads and
//   over i >= j in a fixed order, so dk/dv need no atomics and the result does not
//   depend on the thread count. dsinks is reduced serially from the D_i.
// - Tasks are scheduled dynamically (causal rows have unequal cost); each task owns
//   its outputs, so the schedule never changes the result.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace kdtrain::cpu {

namespace {

template <typename T>
T dot(const T* a, const T* b, int64_t D) {
  T s = 0;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// Offsets into the packed qkv row of token (b, t): q heads, then k heads, then v heads.
struct QkvIndex {
  int64_t T, H, Hkv, D;
  int64_t row(int64_t b, int64_t t) const { return ((b * T + t) * (H + 2 * Hkv)) * D; }
  int64_t q(int64_t b, int64_t t, int64_t h) const { return row(b, t) + h * D; }
  int64_t k(int64_t b, int64_t t, int64_t g) const { return row(b, t) + (H + g) * D; }
  int64_t v(int64_t b, int64_t t, int64_t g) const { return row(b, t) + (H + Hkv + g) * D; }
};

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, const T* sinks, const T* alpha,
                       const T* alpha_ma, AttnDims dims, T scale, AttentionVariant variant) {
  const int64_t B = dims.B, Tn = dims.T, H = dims.H, Hkv = dims.Hkv, D = dims.D;
  const QkvIndex ix{Tn, H, Hkv, D};
  const int64_t group = H / Hkv;
  const bool sink = has_sink(variant);
  const bool affine = has_affine(variant);

#pragma omp parallel
  {
    std::vector<T> x(static_cast<size_t>(Tn));
    std::vector<T> pv(static_cast<size_t>(D)), vsum(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 8)
    for (int64_t task = 0; task < B * H * Tn; ++task) {
      const int64_t i = task % Tn;
      const int64_t h = (task / Tn) % H;
      const int64_t b = task / (Tn * H);
      const int64_t g = h / group;
      const T* q = qkv + ix.q(b, i, h);

      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j <= i; ++j) {
        x[j] = scale * dot(q, qkv + ix.k(b, j, g), D);
        mx = std::max(mx, x[j]);
      }
      if (sink) mx = std::max(mx, sinks[h]);
      T denom = 0;
      for (int64_t j = 0; j <= i; ++j) {
        x[j] = std::exp(x[j] - mx);
        denom += x[j];
      }
      if (sink) denom += std::exp(sinks[h] - mx);
      lse[(b * H + h) * Tn + i] = mx + std::log(denom);

      std::fill(pv.begin(), pv.end(), T(0));
      std::fill(vsum.begin(), vsum.end(), T(0));
      const T inv = T(1) / denom;
      for (int64_t j = 0; j <= i; ++j) {
        const T* v = qkv + ix.v(b, j, g);
        const T p = x[j] * inv;
        for (int64_t d = 0; d < D; ++d) pv[d] += p * v[d];
        if (affine) {
          for (int64_t d = 0; d < D; ++d) vsum[d] += v[d];
        }
      }

      T* o = out + ((b * Tn + i) * H + h) * D;
      if (affine) {
        const T a = alpha[(b * Tn + i) * H + h];
        const T beta = (alpha_ma[h] - a) / static_cast<T>(i + 1);
        for (int64_t d = 0; d < D; ++d) o[d] = a * pv[d] + beta * vsum[d];
      } else {
        for (int64_t d = 0; d < D; ++d) o[d] = pv[d];
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv,
                        const T* lse, const T* sinks, const T* alpha, const T* alpha_ma,
                        AttnDims dims, T scale, AttentionVariant variant) {
  const int64_t B = dims.B, Tn = dims.T, H = dims.H, Hkv = dims.Hkv, D = dims.D;
  const QkvIndex ix{Tn, H, Hkv, D};
  const int64_t group = H / Hkv;
  const bool sink = has_sink(variant);
  const bool affine = has_affine(variant);
  // Drow(b, h, i) = dO'_i . (PV)_i, shared between the two passes.
  std::vector<T> Drow(static_cast<size_t>(B * H * Tn));

  // Pass 1: per query row, dq_i, D_i and dalpha_i.
#pragma omp parallel
  {
    std::vector<T> p(static_cast<size_t>(Tn));
    std::vector<T> pv(static_cast<size_t>(D)), vsum(static_cast<size_t>(D));
    std::vector<T> dop(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 8)
    for (int64_t task = 0; task < B * H * Tn; ++task) {
      const int64_t i = task % Tn;
      const int64_t h = (task / Tn) % H;
      const int64_t b = task / (Tn * H);
      const int64_t g = h / group;
      const T* q = qkv + ix.q(b, i, h);
      const T* dO = dout + ((b * Tn + i) * H + h) * D;
      const T l = lse[(b * H + h) * Tn + i];
      const T a = affine ? alpha[(b * Tn + i) * H + h] : T(1);
      for (int64_t d = 0; d < D; ++d) dop[d] = a * dO[d];

      std::fill(pv.begin(), pv.end(), T(0));
      std::fill(vsum.begin(), vsum.end(), T(0));
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(scale * dot(q, qkv + ix.k(b, j, g), D) - l);
        const T* v = qkv + ix.v(b, j, g);
        for (int64_t d = 0; d < D; ++d) pv[d] += p[j] * v[d];
        if (affine) {
          for (int64_t d = 0; d < D; ++d) vsum[d] += v[d];
        }
      }
      const T Di = dot(dop.data(), pv.data(), D);
      Drow[task] = Di;  // task == (b*H + h)*T + i

      T* dq = dqkv + ix.q(b, i, h);
      std::fill(dq, dq + D, T(0));
      for (int64_t j = 0; j <= i; ++j) {
        const T dx = p[j] * (dot(dop.data(), qkv + ix.v(b, j, g), D) - Di);
        const T* k = qkv + ix.k(b, j, g);
        for (int64_t d = 0; d < D; ++d) dq[d] += dx * k[d];
      }
      for (int64_t d = 0; d < D; ++d) dq[d] *= scale;

      if (affine) {
        const T invN = T(1) / static_cast<T>(i + 1);
        T da = 0;
        for (int64_t d = 0; d < D; ++d) da += dO[d] * (pv[d] - vsum[d] * invN);
        dalpha[(b * Tn + i) * H + h] = da;
      }
    }
  }

  // Pass 2: per key row j of kv head g, dk_j and dv_j over the group's query heads.
#pragma omp parallel
  {
    std::vector<T> dop(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 8)
    for (int64_t task = 0; task < B * Hkv * Tn; ++task) {
      const int64_t j = task % Tn;
      const int64_t g = (task / Tn) % Hkv;
      const int64_t b = task / (Tn * Hkv);
      const T* k = qkv + ix.k(b, j, g);
      const T* v = qkv + ix.v(b, j, g);
      T* dk = dqkv + ix.k(b, j, g);
      T* dv = dqkv + ix.v(b, j, g);
      std::fill(dk, dk + D, T(0));
      std::fill(dv, dv + D, T(0));
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const T hm = affine ? alpha_ma[h] : T(0);
        for (int64_t i = j; i < Tn; ++i) {
          const T* q = qkv + ix.q(b, i, h);
          const T* dO = dout + ((b * Tn + i) * H + h) * D;
          const T a = affine ? alpha[(b * Tn + i) * H + h] : T(1);
          for (int64_t d = 0; d < D; ++d) dop[d] = a * dO[d];
          const T p = std::exp(scale * dot(q, k, D) - lse[(b * H + h) * Tn + i]);
          const T dx = p * (dot(dop.data(), v, D) - Drow[(b * H + h) * Tn + i]);
          for (int64_t d = 0; d < D; ++d) dk[d] += scale * dx * q[d];
          for (int64_t d = 0; d < D; ++d) dv[d] += p * dop[d];
          if (affine) {
            // the prefix-sum term: out_i gets beta_i v_j for every i >= j
            const T beta = (hm - a) / static_cast<T>(i + 1);
            for (int64_t d = 0; d < D; ++d) dv[d] += beta * dO[d];
          }
        }
      }
    }
  }

  if (sink && dsinks != nullptr) {
    // d lse-normalised sink prob: dL/ds_h = -sum_{b,i} p_sink,i D_i, serial fixed order.
    for (int64_t h = 0; h < H; ++h) {
      T acc = 0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < Tn; ++i) {
          const int64_t r = (b * H + h) * Tn + i;
          acc += std::exp(sinks[h] - lse[r]) * Drow[r];
        }
      }
      dsinks[h] -= acc;
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       const float*, AttnDims, float, AttentionVariant);
template void attention_forward<double>(double*, double*, const double*, const double*,
                                        const double*, const double*, AttnDims, double,
                                        AttentionVariant);
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        AttnDims, float, AttentionVariant);
template void attention_backward<double>(double*, double*, double*, const double*,
                                         const double*, const double*, const double*,
                                         const double*, const double*, AttnDims, double,
                                         AttentionVariant);

}  // namespace kdtrain::cpu
