// A teacher cache is input like any other (io/teacher_cache_values.h): every
// row a teacher can produce passes, in f32 and rounded to bf16, and every value
// no teacher produces is refused naming the file, the window and the position;
// through the CLI, a tampered cache with its checksum recomputed stops `train`
// before the run directory exists.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "cli/teacher_cache_builder.h"
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

// T rows of top-K over V random logits of scale `scale`, as the builder computes them.
struct Rows {
  int64_t T, K, V;
  std::vector<int32_t> ids;
  std::vector<float> logp, tail;
  Rows(int64_t t, int64_t k, int64_t v, double scale, uint64_t seed) : T(t), K(k), V(v), ids(t * k), logp(t * k), tail(t) {
    SplitMix64 rng(seed);
    std::vector<float> z(static_cast<size_t>(V));
    for (int64_t r = 0; r < T; ++r) {
      for (float& x : z) x = static_cast<float>(scale * (2.0 * (rng.next() % 1000000) / 1e6 - 1.0));
      REQUIRE(cli::topk_log_probs(z.data(), V, K, ids.data() + r * K, logp.data() + r * K, tail.data() + r));
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

TEST_CASE("teacher cache values: a tampered cache with its checksum recomputed stops train before the run exists",
          "[teacher_cache][reliability]") {
  TempDir tmp("cache_values");
  std::string out;
  const fs::path teacher = tmp.path / "teacher";
  REQUIRE(kdtrain_cli(tmp, {"init", "--preset", "tiny-llama", "--out", teacher.string()}, &out) == 0);
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path cache = tmp.path / "cache";
  REQUIRE(kdtrain_cli(tmp, {"teacher-cache", "--teacher", teacher.string(), "--data", shard, "--seq-len", "32",
                            "--top-k", "4", "--dtype", "f32", "--out", cache.string()}, &out) == 0);
  const fs::path bin = cache / "teacher_cache.bin";
  const std::string good = read_bytes(bin);
  const int64_t K = 4, T = 32, record = (T * K * 8 + T * 4 + 7) / 8 * 8, window = 3;
  // Changes one value of window 3, position 5, then writes the checksum a tamperer would.
  auto tamper = [&](size_t offset_in_record, const void* value, size_t n) {
    std::string bytes = good;
    std::memcpy(&bytes[256 + window * record + offset_in_record], value, n);
    data::CacheChecksum sum;
    sum.update(bytes.data(), bytes.size() - 16);
    const uint64_t v = sum.value();
    std::memcpy(&bytes[bytes.size() - 16], &v, 8);
    write_bytes(bin, bytes);
  };
  const size_t position = 5, logp_at = T * K * 4 + position * K * 4, id_at = position * K * 4;
  const float positive = 0.7f, nan = std::numeric_limits<float>::quiet_NaN();
  const int32_t outside = 300000;
  struct Case {
    size_t offset;
    const void* value;
    const char* what;
  };
  for (const Case& c : {Case{logp_at, &positive, "not a finite value <= 0"}, Case{logp_at, &nan, "not a finite"},
                        Case{id_at, &outside, "outside the vocabulary"}}) {
    INFO(c.what);
    tamper(c.offset, c.value, 4);
    const fs::path run_dir = tmp.path / "run";
    // Before: positive log-probabilities trained silently, NaN failed later as a gradient error
    // not naming the cache, an id outside the vocabulary was caught mid-run.
    CHECK(run(plus(tiny_train_args(shard, run_dir.string(), 2, 2),
                   {"--set", "kd.teacher_cache=" + cache.string(), "--set", "kd.cache_tail=bucket"}),
              &out, tmp.file("t.log")) == 1);
    require_all(out, {bin.string(), "window 3", "position 5", c.what});
    CHECK_FALSE(fs::exists(run_dir));
  }
}
