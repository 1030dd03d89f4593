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

void check_row(const TeacherRows& r, int64_t t, int64_t V, double rounding, const std::string& file,
               int64_t window, std::vector<int32_t>& sorted) {
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
  sorted.assign(ids, ids + r.K);
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) refuse(file, window, t, "token id " + std::to_string(*twice) + " is listed twice");
  const float tail = r.log_tail[t];
  if (std::isnan(tail) || tail > kLogProbSlack)
    refuse(file, window, t, "the log tail mass is " + std::to_string(tail) + ", not <= 0 or -inf");
  double mass = std::exp(static_cast<double>(tail)), spread = 0.0;  // exp(-inf) = 0: no tail
  for (int64_t k = 0; k < r.K; ++k) {
    const double p = std::exp(static_cast<double>(logp[k]));
    mass += p;
    spread -= p * logp[k];
  }
  if (std::fabs(mass - 1.0) > mass_tolerance(spread, rounding))
    refuse(file, window, t, "the top-" + std::to_string(r.K) + " probabilities and the tail mass sum to " +
                                std::to_string(mass) + ", not 1");
}

}  // namespace

void check_teacher_cache_rows(const TeacherRows& rows, int64_t V, double rounding, const std::string& file,
                              int64_t window) {
  std::vector<int32_t> sorted;
  sorted.reserve(static_cast<size_t>(rows.K));
  for (int64_t t = 0; t < rows.T; ++t) check_row(rows, t, V, rounding, file, window, sorted);
}

}  // namespace kdtrain::io
