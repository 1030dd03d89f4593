// Causal attention core for every variant, forward and backward (docs/model.md).
//
// Numerics:
// - x_ij = scale * q_i.k_j for j <= i; the softmax is computed stably (max
//   subtracted) and lse_i = log of its denominator (the sink term e^{s_h} included
//   for `sink`) is stored per (b, h, i). Accumulation is in T.
// - affine: out_i = alpha_i (PV)_i + beta_i S_i with beta_i = (alpha_ma - alpha_i)/N_i,
//   S_i = sum_{j<=i} v_j, N_i = T or the fixed training length (`sequence`) or i + 1
//   (`visible`), affine_bias_count().
//   `gated` and `affine_gated` share the core of baseline and affine (the gate is a
//   separate op).
// - Products are single-threaded BLAS calls on strided views of the packed qkv
//   buffer, one (b, h) [forward] or (b, kv head) [backward] task per thread, so
//   every output is computed by one thread in one fixed order: deterministic and
//   independent of the thread count. The T x T scores are materialised per task
//   (this is the reference backend; the fused kernels live in kernels/).
// - Backward stores nothing extra: P is recomputed from lse. A task owns its kv
//   head's dk/dv and walks the group's query heads in order (no atomics); dq of
//   each query head is written once. dsinks is reduced serially from
//   D_i = dO'_i.(PV)_i = sum_j P_ij dP_ij.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace kdtrain::cpu {

namespace {

// Offsets into the packed qkv row of token (b, t): q heads, then k heads, then v heads.
struct QkvIndex {
  int64_t T, H, Hkv, D;
  int64_t ld() const { return (H + 2 * Hkv) * D; }  // row stride of every q/k/v view
  int64_t row(int64_t b, int64_t t) const { return (b * T + t) * ld(); }
  int64_t q(int64_t b, int64_t t, int64_t h) const { return row(b, t) + h * D; }
  int64_t k(int64_t b, int64_t t, int64_t g) const { return row(b, t) + (H + g) * D; }
  int64_t v(int64_t b, int64_t t, int64_t g) const { return row(b, t) + (H + Hkv + g) * D; }
};

// P (T, T) from the scores in place: rows softmax-normalised over j <= i with the
// sink in the denominator, zero above the diagonal; returns lse per row.
template <typename T>
void causal_softmax(T* S, T* lse, int64_t Tn, const T* sink) {
  for (int64_t i = 0; i < Tn; ++i) {
    T* x = S + i * Tn;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, x[j]);
    if (sink) mx = std::max(mx, *sink);
    T denom = 0;
    for (int64_t j = 0; j <= i; ++j) {
      x[j] = std::exp(x[j] - mx);
      denom += x[j];
    }
    if (sink) denom += std::exp(*sink - mx);
    const T inv = T(1) / denom;
    for (int64_t j = 0; j <= i; ++j) x[j] *= inv;
    std::fill(x + i + 1, x + Tn, T(0));
    lse[i] = mx + std::log(denom);
  }
}

// N_i of the affine bias of query row i, in the element type.
template <typename T>
T bias_count(const AttentionFeatures& features, int64_t i, int64_t Tn) {
  return static_cast<T>(affine_bias_count(features, i, Tn));
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, const T* sinks, const T* alpha,
                       const T* alpha_ma, AttentionShape dims, T scale, AttentionFeatures features) {
  const int64_t B = dims.B, Tn = dims.T, H = dims.H, Hkv = dims.Hkv, D = dims.D;
  const QkvIndex ix{Tn, H, Hkv, D};
  const int64_t group = H / Hkv, ld = ix.ld(), ldo = H * D;
  const bool sink = features.sink, affine = features.affine;

#pragma omp parallel
  {
    std::vector<T> S(static_cast<size_t>(Tn * Tn));
    std::vector<T> pv(static_cast<size_t>(affine ? Tn * D : 0)), vsum(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < B * H; ++task) {
      const int64_t b = task / H, h = task % H, g = h / group;
      gemm_serial<T>(false, true, Tn, Tn, D, scale, qkv + ix.q(b, 0, h), ld, qkv + ix.k(b, 0, g), ld,
                     T(0), S.data(), Tn);
      causal_softmax(S.data(), lse + task * Tn, Tn, sink ? sinks + h : nullptr);
      T* o = out + (b * Tn * H + h) * D;  // rows of head h, stride H*D
      if (!affine) {
        gemm_serial<T>(false, false, Tn, D, Tn, T(1), S.data(), Tn, qkv + ix.v(b, 0, g), ld, T(0), o, ldo);
        continue;
      }
      gemm_serial<T>(false, false, Tn, D, Tn, T(1), S.data(), Tn, qkv + ix.v(b, 0, g), ld, T(0),
                     pv.data(), D);
      std::fill(vsum.begin(), vsum.end(), T(0));
      for (int64_t i = 0; i < Tn; ++i) {
        const T* v = qkv + ix.v(b, i, g);
        for (int64_t d = 0; d < D; ++d) vsum[d] += v[d];
        const T a = alpha[(b * Tn + i) * H + h];
        const T beta = (alpha_ma[h] - a) / bias_count<T>(features, i, Tn);
        for (int64_t d = 0; d < D; ++d) o[i * ldo + d] = a * pv[i * D + d] + beta * vsum[d];
      }
    }
  }
}

namespace {

// One query head's share of the affine term's backward, for a task of
// attention_backward: P (T, T) of the head, its values V and output gradient dO
// (row strides ld and ldo).
template <typename T>
struct AffineHeadBackward {
  const T* P;
  const T* V;
  const T* dO;
  int64_t ld, ldo, Tn, D;
  AttentionFeatures features;
};

// dalpha_i = dO_i . ((PV)_i - S_i / N_i), S_i the prefix sum of v; then
// dv_j += sum_{i >= j} beta_i dO_i, a reverse prefix sum. alpha and dalpha
// step by `H` per token; pv (T, D) and run (D) are scratch.
template <typename T>
void affine_head_backward(const AffineHeadBackward<T>& a, const T* alpha, T alpha_ma, int64_t H, T* dalpha, T* dV,
                          T* pv, T* run) {
  const int64_t Tn = a.Tn, D = a.D, ld = a.ld, ldo = a.ldo;
  gemm_serial<T>(false, false, Tn, D, Tn, T(1), a.P, Tn, a.V, ld, T(0), pv, D);
  std::fill(run, run + D, T(0));
  for (int64_t i = 0; i < Tn; ++i) {
    const T* v = a.V + i * ld;
    for (int64_t d = 0; d < D; ++d) run[d] += v[d];
    const T invN = T(1) / bias_count<T>(a.features, i, Tn);
    T da = 0;
    for (int64_t d = 0; d < D; ++d) da += a.dO[i * ldo + d] * (pv[i * D + d] - run[d] * invN);
    dalpha[i * H] = da;
  }
  std::fill(run, run + D, T(0));
  for (int64_t i = Tn - 1; i >= 0; --i) {
    const T beta = (alpha_ma - alpha[i * H]) / bias_count<T>(a.features, i, Tn);
    for (int64_t d = 0; d < D; ++d) run[d] += beta * a.dO[i * ldo + d];
    for (int64_t d = 0; d < D; ++d) dV[i * ld + d] += run[d];
  }
}

// dL/ds_h = -sum_{b,i} p_sink,i D_i, reduced serially in a fixed order.
template <typename T>
void sink_backward(T* dsinks, const T* sinks, const T* lse, const T* Drow, int64_t B, int64_t H, int64_t Tn) {
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

}  // namespace

template <typename T>
void attention_backward(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv,
                        const T* lse, const T* sinks, const T* alpha, const T* alpha_ma,
                        AttentionShape dims, T scale, AttentionFeatures features) {
  const int64_t B = dims.B, Tn = dims.T, H = dims.H, Hkv = dims.Hkv, D = dims.D;
  const QkvIndex ix{Tn, H, Hkv, D};
  const int64_t group = H / Hkv, ld = ix.ld(), ldo = H * D;
  const bool sink = features.sink, affine = features.affine;
  // Drow(b, h, i) = dO'_i . (PV)_i, for the sink gradient.
  std::vector<T> Drow(static_cast<size_t>(B * H * Tn));

#pragma omp parallel
  {
    std::vector<T> P(static_cast<size_t>(Tn * Tn)), dP(static_cast<size_t>(Tn * Tn));
    std::vector<T> dop(static_cast<size_t>(Tn * D)), pv(static_cast<size_t>(affine ? Tn * D : 0));
    std::vector<T> run(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < B * Hkv; ++task) {
      const int64_t b = task / Hkv, g = task % Hkv;
      const T* K = qkv + ix.k(b, 0, g);
      const T* V = qkv + ix.v(b, 0, g);
      T* dK = dqkv + ix.k(b, 0, g);
      T* dV = dqkv + ix.v(b, 0, g);
      for (int64_t j = 0; j < Tn; ++j) {
        std::fill(dK + j * ld, dK + j * ld + D, T(0));
        std::fill(dV + j * ld, dV + j * ld + D, T(0));
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const T* Q = qkv + ix.q(b, 0, h);
        const T* dO = dout + (b * Tn * H + h) * D;  // stride H*D
        const T* L = lse + (b * H + h) * Tn;
        // P from the saved statistics.
        gemm_serial<T>(false, true, Tn, Tn, D, scale, Q, ld, K, ld, T(0), P.data(), Tn);
        for (int64_t i = 0; i < Tn; ++i) {
          T* p = P.data() + i * Tn;
          for (int64_t j = 0; j <= i; ++j) p[j] = std::exp(p[j] - L[i]);
          std::fill(p + i + 1, p + Tn, T(0));
        }
        // dO' = alpha * dO (the softmax path sees the alpha-scaled gradient).
        for (int64_t i = 0; i < Tn; ++i) {
          const T a = affine ? alpha[(b * Tn + i) * H + h] : T(1);
          for (int64_t d = 0; d < D; ++d) dop[i * D + d] = a * dO[i * ldo + d];
        }
        gemm_serial<T>(false, true, Tn, Tn, D, T(1), dop.data(), D, V, ld, T(0), dP.data(), Tn);
        for (int64_t i = 0; i < Tn; ++i) {
          const T* p = P.data() + i * Tn;
          T* dp = dP.data() + i * Tn;
          T Di = 0;
          for (int64_t j = 0; j <= i; ++j) Di += p[j] * dp[j];
          Drow[(b * H + h) * Tn + i] = Di;
          for (int64_t j = 0; j <= i; ++j) dp[j] = p[j] * (dp[j] - Di);
          std::fill(dp + i + 1, dp + Tn, T(0));
        }
        gemm_serial<T>(false, false, Tn, D, Tn, scale, dP.data(), Tn, K, ld, T(0), dqkv + ix.q(b, 0, h), ld);
        gemm_serial<T>(true, false, Tn, D, Tn, scale, dP.data(), Tn, Q, ld, T(1), dK, ld);
        gemm_serial<T>(true, false, Tn, D, Tn, T(1), P.data(), Tn, dop.data(), D, T(1), dV, ld);
        if (!affine) continue;
        AffineHeadBackward<T> head{P.data(), V, dO, ld, ldo, Tn, D, features};
        affine_head_backward(head, alpha + b * Tn * H + h, alpha_ma[h], H, dalpha + b * Tn * H + h, dV, pv.data(),
                             run.data());
      }
    }
  }
  if (sink && dsinks != nullptr) sink_backward(dsinks, sinks, lse, Drow.data(), B, H, Tn);
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       const float*, AttentionShape, float, AttentionFeatures);
template void attention_forward<double>(double*, double*, const double*, const double*,
                                        const double*, const double*, AttentionShape, double,
                                        AttentionFeatures);
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        AttentionShape, float, AttentionFeatures);
template void attention_backward<double>(double*, double*, double*, const double*,
                                         const double*, const double*, const double*,
                                         const double*, const double*, AttentionShape, double,
                                         AttentionFeatures);

}  // namespace kdtrain::cpu
