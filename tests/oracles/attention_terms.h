// Sizes of quantities the attention tests' tolerances scale with.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace kdtrain::testing {

// dalpha_i = sum_j P_ij dO_i.v_j - dO_i.S_i / N_i (S_i = sum_{j<=i} v_j, N_i = T or i + 1 by
// the divisor) is a difference of two terms that can cancel (exactly at row 0 under
// `visible`: P_00 = 1, S_0 = v_0), so its round-off scales with the terms, not with
// dalpha. Returns max over rows and heads of |dO_i.S_i| / N_i. qkv (B, T, H + 2*Hkv, D),
// dout (B, T, H, D).
template <typename T>
double dalpha_cancelling_terms(const T* qkv, const T* dout, const AttentionShape& d, AffineBiasDivisor divisor) {
  const int64_t tok = (d.H + 2 * d.Hkv) * d.D, group = d.H / d.Hkv;
  double worst = 0;
  std::vector<double> S(static_cast<size_t>(d.D));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      std::fill(S.begin(), S.end(), 0.0);
      for (int64_t i = 0; i < d.T; ++i) {
        const T* v = qkv + (b * d.T + i) * tok + (d.H + d.Hkv + h / group) * d.D;
        const T* dO = dout + ((b * d.T + i) * d.H + h) * d.D;
        double sig = 0;
        for (int64_t k = 0; k < d.D; ++k) sig += static_cast<double>(dO[k]) * (S[static_cast<size_t>(k)] += v[k]);
        worst = std::max(worst, std::fabs(sig) / affine_bias_count(divisor, i, d.T));
      }
    }
  return worst;
}

}  // namespace kdtrain::testing
