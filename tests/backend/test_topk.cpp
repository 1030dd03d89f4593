// The teacher cache's top K (topk_log_probs, src/backend/backend.h): the CUDA
// kernel body (kernels/topk_kernel.cuh) run in the host SIMT emulator against
// the CPU reference (src/backend/cpu/cpu_topk.cpp) on random and adversarial
// rows, and on a tiny teacher's logits, as the cache writer feeds it.
//
// Bounds. Both sides read the same bf16 logits. The reference works in double
// and rounds once; the kernel sums exp(z - m) in fp32, ceil(V / 256) terms per
// thread then 5 shuffle levels and 8 warp partials, so the sum's relative error
// is at most g = (V / 256 + 16) 2^-24 (each term's exp within 2^-23) and its log
// moves by at most g; z - m is exact (two bf16 values within 2^16 of each
// other), and the final subtraction and the log round once more (2^-24 of the
// result and of log sum). So |logp - ref| <= 2g + 2^-23 (|ref| + |log sum|),
// taken as 2^-22 (V / 256 + 16 + |ref| + 20) (|log sum| <= log V + 10 <= 20
// here); the tail is a second such sum, so its bound is twice that.
// Ids are compared exactly: the order is a strict order over (value, id).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/tc/sim/simt.h"
#include "kernels/topk_kernel.cuh"
#include "model/init.h"
#include "model/model.h"
#include "support/model_fixtures.h"

using namespace kdtrain;

namespace {

struct TopkOut {
  std::vector<int32_t> ids;
  std::vector<float> logp, log_tail;
};

// bf16 bits of each logit (the kernel's input) and the same values as fp32 (the reference's).
struct Rows {
  int64_t n = 0, V = 0;
  std::vector<uint16_t> bits;
  std::vector<float> values() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = sim::bf16_value(bits[i]);
    return v;
  }
};

TopkOut run_kernel(const Rows& rows, int64_t K, sim::Schedule schedule = sim::Schedule::forward) {
  TopkOut out;
  out.ids.assign(rows.n * K, 12345);
  out.logp.assign(rows.n * K, 0.f);
  out.log_tail.assign(rows.n, 0.f);
  topk::TopkParams p;
  p.n = rows.n;
  p.V = rows.V;
  p.K = K;
  p.logits = rows.bits.data();
  p.ids = out.ids.data();
  p.logp = out.logp.data();
  p.log_tail = out.log_tail.data();
  sim::LaunchConfig c;
  c.grid = {static_cast<unsigned>(rows.n), 1, 1};
  c.block = {topk::kTopkThreads, 1, 1};
  c.shared_bytes = topk::topk_shared_bytes(K);
  c.schedule = schedule;
  c.stack_bytes = 32 * 1024;
  sim::launch(c, [&](unsigned char* smem) { topk::topk_row(p, smem); });
  return out;
}

TopkOut run_reference(const Rows& rows, int64_t K) {
  auto cpu = make_backend("cpu", 0);
  const std::vector<float> z = rows.values();
  TopkOut out;
  out.ids.assign(rows.n * K, 0);
  out.logp.assign(rows.n * K, 0.f);
  out.log_tail.assign(rows.n, 0.f);
  TopkArgs a;
  a.n = rows.n;
  a.V = rows.V;
  a.K = K;
  a.logits = z.data();
  a.ids = out.ids.data();
  a.logp = out.logp.data();
  a.log_tail = out.log_tail.data();
  cpu->topk_log_probs(a);
  return out;
}

bool same_or_close(float got, float ref, double bound) {
  if (std::isnan(ref)) return std::isnan(got);
  if (std::isinf(ref)) return got == ref;
  return std::fabs(static_cast<double>(got) - ref) <= bound;
}

void check_against_reference(const Rows& rows, int64_t K, const std::string& what) {
  INFO(what << ": V=" << rows.V << " K=" << K);
  const TopkOut got = run_kernel(rows, K), ref = run_reference(rows, K);
  CHECK(got.ids == ref.ids);
  const double g = std::ldexp(static_cast<double>(rows.V) / 256 + 16 + 20, -22);
  for (int64_t i = 0; i < rows.n * K; ++i) {
    INFO("row " << i / K << " rank " << i % K << ": " << got.logp[i] << " vs " << ref.logp[i]);
    CHECK(same_or_close(got.logp[i], ref.logp[i], g + std::ldexp(std::fabs(ref.logp[i]), -22)));
  }
  for (int64_t r = 0; r < rows.n; ++r) {
    INFO("row " << r << " tail: " << got.log_tail[r] << " vs " << ref.log_tail[r]);
    CHECK(same_or_close(got.log_tail[r], ref.log_tail[r], 2 * (g + std::ldexp(std::fabs(ref.log_tail[r]), -22))));
  }
}

Rows random_rows(int64_t n, int64_t V, float stddev, float grid, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  Rows rows{n, V, std::vector<uint16_t>(n * V)};
  for (auto& b : rows.bits) {
    float x = d(rng);
    if (grid > 0.f) x = std::round(x / grid) * grid;
    b = sim::bf16_round(x);
  }
  return rows;
}

constexpr uint16_t kNegInf = 0xff80, kPosInf = 0x7f80, kNaN = 0x7fc0, kNegZero = 0x8000;

}  // namespace

TEST_CASE("topk kernel (emulated) equals the CPU reference on random rows", "[topk][sim][teacher_cache]") {
  for (const int64_t V : {1, 37, 300, 1500})
    for (const int64_t K : {int64_t(1), int64_t(7), int64_t(64), V})
      if (K <= V) check_against_reference(random_rows(3, V, 3.f, 0.f, 7 + V + K), K, "random");
}

TEST_CASE("topk kernel (emulated) on adversarial rows", "[topk][sim][teacher_cache]") {
  const int64_t V = 300;
  SECTION("ties everywhere: ids by lower id first, the equal ones cut at K") {
    for (const int64_t K : {int64_t(1), int64_t(5), int64_t(64), int64_t(299), V})
      check_against_reference(random_rows(3, V, 1.f, 0.5f, 11), K, "ties");
  }
  SECTION("all equal") {
    Rows rows{2, V, std::vector<uint16_t>(2 * V, sim::bf16_round(1.5f))};
    for (const int64_t K : {int64_t(1), int64_t(64), V}) {
      check_against_reference(rows, K, "all equal");
      const TopkOut got = run_kernel(rows, K);
      for (int64_t k = 0; k < K; ++k) CHECK(got.ids[k] == k);
    }
  }
  SECTION("-inf logits, -0 and +0 as one value") {
    Rows rows = random_rows(3, V, 2.f, 0.f, 12);
    for (int64_t j = 0; j < V; j += 3) rows.bits[j] = kNegInf;               // row 0: a third masked
    for (int64_t j = 0; j < V; ++j) rows.bits[V + j] = j % 2 ? 0 : kNegZero;  // row 1: +-0 alternate
    for (int64_t j = 1; j < V; ++j) rows.bits[2 * V + j] = kNegInf;          // row 2: one finite logit
    for (const int64_t K : {int64_t(1), int64_t(64), int64_t(250), V}) check_against_reference(rows, K, "-inf");
  }
  SECTION("rows without a distribution: NaN, +inf, all -inf") {
    Rows rows = random_rows(4, V, 2.f, 0.f, 13);
    rows.bits[17] = kNaN;
    rows.bits[V + 200] = kPosInf;
    for (int64_t j = 0; j < V; ++j) rows.bits[2 * V + j] = kNegInf;
    const TopkOut got = run_kernel(rows, 8);
    for (int64_t r = 0; r < 3; ++r) {
      CHECK(std::isnan(got.log_tail[r]));
      CHECK(got.ids[r * 8] == -1);
    }
    CHECK(std::isfinite(got.log_tail[3]));
    check_against_reference(rows, 8, "no distribution");
  }
}

TEST_CASE("topk kernel (emulated): every thread schedule gives the same bits", "[topk][sim][teacher_cache]") {
  const Rows rows = random_rows(2, 700, 1.f, 0.25f, 14);
  const TopkOut a = run_kernel(rows, 40, sim::Schedule::forward), b = run_kernel(rows, 40, sim::Schedule::reverse),
                c = run_kernel(rows, 40, sim::Schedule::shuffled);
  for (const TopkOut* o : {&b, &c}) {
    CHECK(o->ids == a.ids);
    CHECK(std::memcmp(o->logp.data(), a.logp.data(), a.logp.size() * 4) == 0);
    CHECK(std::memcmp(o->log_tail.data(), a.log_tail.data(), a.log_tail.size() * 4) == 0);
  }
}

// The cache writer's path on a tiny teacher: its head logits rounded to bf16, as a
// CUDA teacher emits them, go through the kernel and the reference. Stored as
// bf16 (the cache's value type), the log-probs then differ by at most one bf16
// step (2^-8 relative): the kernel's fp32 result lies within the bound above of
// the reference, which can straddle one rounding boundary, never two. Ids are
// identical. (A real GPU teacher computes its logits in bf16 and so differs from
// the CPU teacher's by its own rounding; this compares the top K of one set of
// logits, which is what makes caches from the two backends agree.)
TEST_CASE("topk: a tiny teacher's cache rows agree between the kernel and the reference",
          "[topk][sim][teacher_cache]") {
  auto cpu = make_backend("cpu", 0);
  ModelConfig config = testing::llama_like();
  config.initializer_range = 0.5;  // spread logits
  AttentionConfig attention;
  Model teacher(config, attention, *cpu, ModelUse::frozen);
  teacher.set_params(init_params(teacher.layout(), config, attention, 5));
  const int64_t B = 2, T = 9, V = config.vocab_size, N = B * T;
  const std::vector<int32_t> tokens = testing::random_tokens(N, V, 6);
  teacher.forward(tokens.data(), B, T, false);
  std::vector<float> logits(N * V);
  teacher.head_logits(logits.data(), 0, N);
  Rows rows{N, V, std::vector<uint16_t>(N * V)};
  for (int64_t i = 0; i < N * V; ++i) rows.bits[i] = sim::bf16_round(logits[i]);
  for (const int64_t K : {int64_t(4), int64_t(16)}) {
    const TopkOut got = run_kernel(rows, K), ref = run_reference(rows, K);
    CHECK(got.ids == ref.ids);
    for (int64_t i = 0; i < N * K; ++i) {
      const float a = sim::bf16_value(sim::bf16_round(got.logp[i])), b = sim::bf16_value(sim::bf16_round(ref.logp[i]));
      INFO("row " << i / K << " rank " << i % K << ": " << a << " vs " << b);
      CHECK(std::fabs(a - b) <= std::ldexp(std::fabs(b), -8));
    }
    check_against_reference(rows, K, "tiny teacher");
  }
}
