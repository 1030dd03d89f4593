// The values of a teacher cache, checked as they are read: a cache is input
// like any other (docs/reliability.md, "Hostile input files"), and a tampered
// one whose checksum was recomputed must not train silently on positive
// log-probabilities, fail later as a gradient error, or index past the
// vocabulary. Every reader of teacher-cache rows calls check_teacher_cache_rows
// on each window it decodes, before the rows are used.
#pragma once
#include <cstdint>
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

// How far above 0 a stored log-probability may be: a builder computing
// z - logsumexp(z) in float32 for logits up to 10^3 in magnitude errs by an
// ulp of 1024 (1.2e-4); a probability of exp(1e-3) = 1.001 is an error no
// rounding makes.
inline constexpr double kLogProbSlack = 1e-3;

}  // namespace kdtrain::io
