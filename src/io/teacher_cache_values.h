// The values of a teacher cache, checked as they are read: a cache is input
// like any other (docs/reliability.md, "Hostile input files"), and a tampered
// one whose checksum was recomputed must not train silently on positive
// log-probabilities, fail later as a gradient error, or index past the
// vocabulary. Every reader of teacher-cache rows calls check_teacher_cache_rows
// on each window it decodes, before the rows are used.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace kdtrain::io {

// The decoded rows of one window: T target positions, K cached ids each.
struct TeacherRows {
  const int32_t* ids = nullptr;       // (T, K)
  const float* logp = nullptr;        // (T, K) log-probabilities, as stored (rounded)
  const float* log_tail = nullptr;    // (T) log of the mass outside the K ids, -inf when none
  int64_t T = 0, K = 0;
};

// Relative rounding of a stored log-probability: bf16 keeps 8 significant
// bits (round to nearest: half an ulp, 2^-8 of the value); f32 keeps 24.
inline constexpr double kBf16LogProbRounding = 1.0 / 256;
inline constexpr double kF32LogProbRounding = 1.0 / (1 << 24);

// Throws naming `file`, the window, the position and the value unless, for every row:
//   - every id is in [0, V) and no id appears twice;
//   - every log-probability is finite and <= 0, and log_tail is <= 0 or -inf
//     (each within kLogProbSlack, the float32 rounding of z - logsumexp(z));
//   - the K probabilities and the tail mass sum to 1 within the rounding of
//     the stored values (`rounding`: kBf16LogProbRounding or kF32LogProbRounding).
void check_teacher_cache_rows(const TeacherRows& rows, int64_t V, double rounding, const std::string& file,
                              int64_t window);

// exp(x) of a log-probability (finite, x <= kLogProbSlack) in float, written
// without a library call so that a row's loop vectorizes: exp(x) = 2^n exp(r),
// n = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by its Taylor polynomial to r^6
// (truncation (ln 2 / 2)^7 / 7! < 1.2e-7 of the value; with the float roundings
// the tests bound the relative error by 1e-6). Below -87 (where float exp
// turns subnormal) x is clamped: such a probability changes no sum.
inline float exp_log_prob(float x) {
  // x = max(x, -87) on the bits (a float below -87 has the larger pattern): GCC
  // vectorizes an unsigned min, not a float max or select.
  uint32_t x_bits;
  std::memcpy(&x_bits, &x, 4);
  x_bits = std::min(x_bits, 0xc2ae0000u);  // -87.f
  std::memcpy(&x, &x_bits, 4);
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = x * 1.44269504f + kRound;
  const float n = shifted - kRound;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 split: n * hi is exact
  const float p = 1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * (1.f / 24 + r * (1.f / 120 + r * (1.f / 720))))));
  uint32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, 4);
  const uint32_t scale_bits = (shifted_bits - 0x4b400000u + 127u) << 23;  // 0x4b400000: kRound's bits; 2^n
  float scale;
  std::memcpy(&scale, &scale_bits, 4);
  return p * scale;
}

// How far above 0 a stored log-probability may be: a builder computing
// z - logsumexp(z) in float32 for logits up to 10^3 in magnitude errs by an
// ulp of 1024 (1.2e-4); a probability of exp(1e-3) = 1.001 is an error no
// rounding makes.
inline constexpr double kLogProbSlack = 1e-3;

}  // namespace kdtrain::io
