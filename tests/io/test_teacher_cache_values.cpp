// A teacher cache is input like any other (io/teacher_cache_values.h): every
// row a teacher can produce passes, in f32 and rounded to bf16, and every value
// no teacher produces is refused naming the file, the window and the position.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "core/rng.h"
#include "data/teacher_cache.h"
#include "io/safetensors.h"
#include "io/teacher_cache_values.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;
using Catch::Matchers::Contains;

namespace {

// T rows of top-K over V random logits of scale `scale`, as the CPU builder computes them.
struct Rows {
  int64_t T, K, V;
  std::vector<int32_t> ids;
  std::vector<float> logp, tail;
  Rows(int64_t t, int64_t k, int64_t v, double scale, uint64_t seed) : T(t), K(k), V(v), ids(t * k), logp(t * k), tail(t) {
    SplitMix64 rng(seed);
    std::vector<float> z(static_cast<size_t>(V));
    for (int64_t r = 0; r < T; ++r) {
      for (float& x : z) x = static_cast<float>(scale * (2.0 * (rng.next() % 1000000) / 1e6 - 1.0));
      cpu::topk_log_probs<float>(z.data(), 1, V, K, ids.data() + r * K, logp.data() + r * K, tail.data() + r);
    }
  }
  void round_to_bf16() {
    for (float& l : logp) l = io::bf16_to_float(io::float_to_bf16(l));
  }
  void check(double rounding) const {
    io::check_teacher_cache_rows({ids.data(), logp.data(), tail.data(), T, K}, V, rounding, "cache.bin", 7);
  }
};

}  // namespace

TEST_CASE("teacher cache values: every row a teacher produces passes, in f32 and in bf16", "[teacher_cache][io]") {
  for (double scale : {0.1, 3.0, 30.0}) {
    for (int64_t K : {1, 4, 31}) {
      INFO("scale " << scale << ", K " << K);
      Rows rows(16, K, 61, scale, 11);
      CHECK_NOTHROW(rows.check(io::kF32LogProbRounding));
      rows.round_to_bf16();
      CHECK_NOTHROW(rows.check(io::kBf16LogProbRounding));
    }
  }
  Rows all(4, 61, 61, 3.0, 5);  // K = V: no tail, log_tail = -inf
  CHECK(std::isinf(all.tail[0]));
  CHECK_NOTHROW(all.check(io::kF32LogProbRounding));
}

TEST_CASE("teacher cache values: what no teacher produces is refused naming file, window and position",
          "[teacher_cache][io]") {
  auto refused = [](Rows rows, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(rows.check(io::kBf16LogProbRounding),
                      Contains("cache.bin") && Contains("window 7") && Contains("position 2") && Contains(what));
  };
  const Rows good(4, 4, 50, 3.0, 9);
  Rows r = good;
  r.logp[2 * 4] = 0.5f;  // a positive log-probability
  refused(r, "not a finite value <= 0");
  r = good;
  r.logp[2 * 4 + 1] = std::numeric_limits<float>::quiet_NaN();
  refused(r, "not a finite value <= 0");
  r = good;
  r.ids[2 * 4 + 3] = 50;
  refused(r, "outside the vocabulary");
  r = good;
  r.ids[2 * 4 + 3] = -1;
  refused(r, "outside the vocabulary");
  r = good;
  r.ids[2 * 4 + 3] = r.ids[2 * 4];
  refused(r, "listed twice");
  r = good;
  r.tail[2] = std::numeric_limits<float>::infinity();
  refused(r, "log tail mass");
  r = good;
  r.tail[2] = std::log(std::exp(r.tail[2]) + 0.05f);  // the tail no longer matches the top-k mass
  refused(r, "sum to");
  r = good;
  r.logp[2 * 4] -= 2.0f;  // the top-1 probability cut by 86%: the mass no longer sums to 1
  refused(r, "sum to");
}

// The check's exp (io::exp_log_prob) against double exp: relative error within
// 1e-6 (its bound: Taylor truncation 1.2e-7 plus the float roundings of the
// reduction and Horner steps, a few 6e-8 each) down to -87, and below -87 (where
// it clamps) no more than exp(-87) = 1.6e-38 of absolute error.
TEST_CASE("teacher cache values: exp_log_prob is exp within 1e-6 relative", "[teacher_cache][io]") {
  double worst = 0.0;
  std::vector<float> xs = {0.f, -0.f, 1e-3f, -1e-30f, -87.f, -86.999f, -0.34657359f, 0.34657359f / 1e3f};
  for (int n = -126; n <= 0; ++n) {  // the reduction's boundaries, n ln 2 +- half a step
    const float x = static_cast<float>(n * 0.6931471805599453);
    for (float d : {-1e-6f, 0.f, 1e-6f}) xs.push_back(x + d);
  }
  SplitMix64 rng(3);
  for (int i = 0; i < 200000; ++i) xs.push_back(static_cast<float>(-100.0 * rng.uniform()));
  for (float x : xs) {
    if (x > static_cast<float>(io::kLogProbSlack)) continue;
    const double exact = std::exp(static_cast<double>(x)), got = io::exp_log_prob(x);
    INFO("x " << x);
    if (x >= -87.f) {
      worst = std::max(worst, std::fabs(got - exact) / exact);
      REQUIRE(std::fabs(got - exact) <= 1e-6 * exact);
    } else {
      REQUIRE(std::fabs(got - exact) <= 1.7e-38);
    }
  }
  INFO("worst relative error " << worst);
  CHECK(worst > 0.0);  // the sweep reached values that are not exact
}
