#include "io/teacher_cache_values.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace kdtrain::io {

namespace {

// The bound on |sum of the K probabilities and the tail - 1| that rounding
// allows: a stored log-probability l rounded by a relative r moves its
// probability by about p |l| r (`spread` sums p |l|); twice that covers
// round-to-nearest with room, and 2e-4 the float32 error of a builder's
// logsumexp (every l shifted by an ulp of |lse|: 1.2e-4 for |lse| up to 1024,
// times mass 1) and of the sum itself.
double mass_tolerance(double spread, double rounding) { return 2.0 * rounding * spread + 2e-4; }

[[noreturn]] void refuse(const std::string& file, int64_t window, int64_t t, const std::string& what) {
  fail(file, ": window ", window, ", position ", t, ": ", what,
       "; the teacher cache is corrupt or was not written by `kdtrain teacher-cache` (its checksum "
       "matches, so it was changed on purpose or by a broken writer): rebuild it");
}

// Names the first value of row t that is out of range and throws.
[[noreturn]] void refuse_value(const TeacherRows& r, int64_t t, int64_t V, const std::string& file, int64_t window) {
  const int32_t* ids = r.ids + t * r.K;
  const float* logp = r.logp + t * r.K;
  for (int64_t k = 0; k < r.K; ++k) {
    if (ids[k] < 0 || ids[k] >= V)
      refuse(file, window, t, "token id " + std::to_string(ids[k]) + " is outside the vocabulary [0, " +
                                  std::to_string(V) + ")");
    if (!std::isfinite(logp[k]) || logp[k] > kLogProbSlack)
      refuse(file, window, t, "the log-probability of token " + std::to_string(ids[k]) + " is " +
                                  std::to_string(logp[k]) + ", not a finite value <= 0");
  }
  fail("teacher cache rows: internal error: row ", t, " flagged without a bad value");
}

// seen: V bits, all clear on entry and on return (a row sets and clears its own K),
// so the duplicate check is O(K) per row: the reader decodes every token it trains on.
void check_row(const TeacherRows& r, int64_t t, int64_t V, double rounding, const std::string& file,
               int64_t window, std::vector<uint64_t>& seen) {
  const int64_t K = r.K;  // locals: the stores to `seen` could alias the fields
  const int32_t* ids = r.ids + t * K;
  const float* logp = r.logp + t * K;
  const int32_t vocab = static_cast<int32_t>(V);  // at most 2^24 (SizeLimits): one lane width with the ids
  const float slack = static_cast<float>(kLogProbSlack);
  // One vectorized pass: the range flags, the probabilities' sum and their
  // spread sum p |l| (the tolerance); a flagged row's sums are not used.
  int bad = 0;
  float mass = 0.f, spread = 0.f;
#pragma omp simd reduction(| : bad) reduction(+ : mass, spread)
  for (int64_t k = 0; k < K; ++k) {
    const float l = logp[k];
    bad |= (ids[k] < 0) | (ids[k] >= vocab) | !(l <= slack) | (l == -INFINITY);
    const float p = exp_log_prob(l);
    mass += p;
    spread -= p * l;
  }
  if (bad) refuse_value(r, t, V, file, window);
  int64_t twice = -1;
  uint64_t* bits = seen.data();
  for (int64_t k = 0; k < K; ++k) {
    uint64_t& word = bits[static_cast<size_t>(ids[k]) / 64];
    const uint64_t bit = uint64_t(1) << (ids[k] % 64);
    if (word & bit) twice = ids[k];
    word |= bit;
  }
  for (int64_t k = 0; k < K; ++k) bits[static_cast<size_t>(ids[k]) / 64] = 0;
  if (twice >= 0) refuse(file, window, t, "token id " + std::to_string(twice) + " is listed twice");
  const float tail = r.log_tail[t];
  if (std::isnan(tail) || tail > kLogProbSlack)
    refuse(file, window, t, "the log tail mass is " + std::to_string(tail) + ", not <= 0 or -inf");
  // Float sums of K + 1 terms and exp_log_prob's 1e-6: errors near 1e-6, far
  // inside the tolerance's 2e-4 floor.
  const float tail_mass = tail == -INFINITY ? 0.f : exp_log_prob(tail);  // -inf: no tail
  const double total = static_cast<double>(mass) + tail_mass;
  if (std::fabs(total - 1.0) > mass_tolerance(spread, rounding))
    refuse(file, window, t, "the top-" + std::to_string(r.K) + " probabilities and the tail mass sum to " +
                                std::to_string(total) + ", not 1");
}

}  // namespace

void check_teacher_cache_rows(const TeacherRows& rows, int64_t V, double rounding, const std::string& file,
                              int64_t window) {
  thread_local std::vector<uint64_t> seen;
  if (seen.size() < static_cast<size_t>((V + 63) / 64)) seen.assign(static_cast<size_t>((V + 63) / 64), 0);
  for (int64_t t = 0; t < rows.T; ++t) check_row(rows, t, V, rounding, file, window, seen);
}

}  // namespace kdtrain::io
