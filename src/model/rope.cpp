#include "model/rope.h"

#include <cmath>

#include "core/error.h"

namespace kdtrain {

std::vector<double> rope_inverse_frequencies(const ModelConfig& m) {
  const int64_t half = m.head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0 / std::pow(m.rope_theta, static_cast<double>(2 * i) / m.head_dim);
  const RopeScaling& s = m.rope_scaling;
  if (s.type == RopeScalingType::none) return inv_freq;
  const double two_pi = 6.283185307179586;
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_len / s.low_freq_factor;
  const double high_freq_wavelen = old_len / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = two_pi / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies stay as they are
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else {
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv_freq;
}

void rope_tables(const ModelConfig& m, int64_t T, std::vector<float>& cos,
                 std::vector<float>& sin) {
  const std::vector<double> inv_freq = rope_inverse_frequencies(m);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  cos.assign(T * half, 0.f);
  sin.assign(T * half, 0.f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
}

}  // namespace kdtrain
