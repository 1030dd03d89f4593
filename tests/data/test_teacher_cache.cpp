// Teacher logit cache: top-k extraction, the cached losses against
// independent formulas with finite-difference gradients in double, and K = V
// equal to the online teacher through the real model and the trainer.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>

#include "support/run_parts_fixture.h"
#include "support/teacher_cache_fixture.h"
#include "support/temp_dir.h"
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <unistd.h>

#include "backend/cpu/cpu_ops.h"
#include "cli/teacher_cache_builder.h"
#include "support/cpu_test_util.h"
#include "data/shard.h"
#include "data/shard_manifest.h"
#include "data/teacher_cache.h"
#include "io/checkpoint_format.h"
#include "model/cached_teacher_loss.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "io/model_dir.h"
#include "train/train_step.h"
#include "train/trainer.h"

using namespace kdtrain;
using namespace kdtrain::testutil;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using kdtrain::testing::TempDir;
using kdtrain::testing::CacheFixture;
using kdtrain::testing::cached_run_config;

// Teacher log-softmax of raw logits, in double.
std::vector<double> log_softmax(const std::vector<double>& z, double tau = 1.0) {
  double mx = -INFINITY, s = 0.0;
  for (double v : z) mx = std::max(mx, v / tau);
  for (double v : z) s += std::exp(v / tau - mx);
  std::vector<double> out(z.size());
  for (size_t i = 0; i < z.size(); ++i) out[i] = z[i] / tau - mx - std::log(s);
  return out;
}

// One row through the CPU backend's topk_log_probs (the reference the cache writer uses).
void topk_row(const std::vector<float>& z, int64_t K, int32_t* ids, float* logp, float* tail) {
  TopkArgs a;
  a.n = 1;
  a.V = static_cast<int64_t>(z.size());
  a.K = K;
  a.logits = z.data();
  a.ids = ids;
  a.logp = logp;
  a.log_tail = tail;
  make_backend("cpu", 1)->topk_log_probs(a);
}

constexpr int64_t kRows = 5, kV = 17;

// Cached rows for random teacher logits: top-K of each row computed by topk_log_probs.
struct SparseProblem {
  int64_t K;
  std::vector<double> s = random_vec(kRows * kV, 11, -3.0, 3.0);
  std::vector<double> t = random_vec(kRows * kV, 12, -4.0, 4.0);
  std::vector<int32_t> ids, targets{3, 0, 16, 7, 7};
  std::vector<float> logp, tail;
  CacheTail mode = CacheTail::bucket;
  KdLoss kind = KdLoss::forward_kl;
  double tau = 1.0;

  explicit SparseProblem(int64_t k) : K(k), ids(kRows * k), logp(kRows * k), tail(kRows) {
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<float> row(t.begin() + r * kV, t.begin() + (r + 1) * kV);
      topk_row(row, K, ids.data() + r * K, logp.data() + r * K, tail.data() + r);
    }
  }
  // Sum over rows of the KD loss (kd_weight 1) through dense_cached_teacher + loss_chunk;
  // the teacher depends on s in bucket mode and is rebuilt at every evaluation.
  double run(std::vector<double>* grad, std::vector<double>* kd_out = nullptr) const {
    std::vector<double> logits = s, dense(kRows * kV), ce(kRows), kd(kRows), h(kRows, 0.0);
    dense_cached_teacher<double>(ids.data(), logp.data(), tail.data(), kRows, K, kV, mode,
                                       tau, s.data(), dense.data());
    // As run_cached_loss: bucket soft_ce = bucket forward_kl + tau^2 H(bucket teacher).
    const bool soft_bucket = mode == CacheTail::bucket && kind == KdLoss::soft_ce;
    if (soft_bucket) bucket_teacher_entropy(logp.data(), tail.data(), kRows, K, tau, h.data());
    cpu::loss_chunk<double>(logits.data(), dense.data(), targets.data(), ce.data(), kd.data(),
                            kRows, kV, soft_bucket ? KdLoss::forward_kl : kind, tau, 1.0, 1.0,
                            grad != nullptr);
    for (int64_t r = 0; r < kRows; ++r) kd[r] += h[r];
    if (grad) *grad = logits;
    if (kd_out) *kd_out = kd;
    return std::accumulate(kd.begin(), kd.end(), 0.0);
  }
};

}  // namespace

TEST_CASE("teacher cache: top-k ids, log-probs and tail mass", "[teacher_cache]") {
  std::vector<double> z = random_vec(kV, 5, -5.0, 5.0);
  z[3] = z[9];  // a tie: the lower id comes first
  std::vector<float> zf(z.begin(), z.end());
  const std::vector<double> lp = log_softmax(std::vector<double>(zf.begin(), zf.end()));
  for (int64_t K : {int64_t(1), int64_t(4), kV}) {
    std::vector<int32_t> ids(K);
    std::vector<float> logp(K);
    float tail = 0.f;
    topk_row(zf, K, ids.data(), logp.data(), &tail);
    std::vector<int32_t> order(kV);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return zf[a] > zf[b]; });
    double kept = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      CHECK(ids[k] == order[k]);
      CHECK(logp[k] == Approx(lp[ids[k]]).epsilon(1e-6));
      kept += std::exp(lp[ids[k]]);
    }
    if (K == kV) CHECK(std::isinf(tail));
    else CHECK(tail == Approx(std::log1p(-kept)).epsilon(1e-5));
  }
  zf[2] = NAN;
  std::vector<int32_t> ids(2);
  std::vector<float> logp(2);
  float tail;
  topk_row(zf, 2, ids.data(), logp.data(), &tail);
  CHECK(std::isnan(tail));  // no distribution: the writer refuses the row
  CHECK(ids[0] == -1);
}

TEST_CASE("teacher cache: bucket loss equals the KL of the (K+1)-bucket distributions",
          "[teacher_cache]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    SparseProblem p(4);
    p.kind = kind;
    std::vector<double> kd;
    p.run(nullptr, &kd);
    for (int64_t r = 0; r < kRows; ++r) {
      // Independently: coarse-grain both full distributions into the teacher's top 4
      // ids (from a sort of the full teacher logits) plus one bucket for the rest.
      std::vector<double> zt(p.t.begin() + r * kV, p.t.begin() + (r + 1) * kV);
      std::vector<double> zs(p.s.begin() + r * kV, p.s.begin() + (r + 1) * kV);
      const std::vector<double> lt = log_softmax(zt), ls = log_softmax(zs);
      std::vector<int> order(kV);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return zt[a] > zt[b]; });
      std::vector<double> qt, ps;
      double qt_rest = 1.0, ps_rest = 1.0;
      for (int k = 0; k < 4; ++k) {
        qt.push_back(std::exp(lt[order[k]]));
        ps.push_back(std::exp(ls[order[k]]));
        qt_rest -= qt.back();
        ps_rest -= ps.back();
      }
      qt.push_back(qt_rest);
      ps.push_back(ps_rest);
      double expect = 0.0;
      for (size_t m = 0; m < qt.size(); ++m) {
        if (kind == KdLoss::forward_kl) expect += qt[m] * std::log(qt[m] / ps[m]);
        if (kind == KdLoss::reverse_kl) expect += ps[m] * std::log(ps[m] / qt[m]);
        if (kind == KdLoss::soft_ce) expect -= qt[m] * std::log(ps[m]);
      }
      INFO("loss " << int(kind) << " row " << r);
      // fp32 log-probs in the cache: agreement to fp32 precision
      CHECK(kd[r] == Approx(expect).epsilon(1e-5).margin(1e-6));
    }
  }
}

TEST_CASE("teacher cache: renormalize loss equals the formula of docs/distillation.md",
          "[teacher_cache]") {
  for (double tau : {1.0, 2.0}) {
    SparseProblem p(4);
    p.mode = CacheTail::renormalize;
    p.tau = tau;
    std::vector<double> kd;
    p.run(nullptr, &kd);
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<double> zs(p.s.begin() + r * kV, p.s.begin() + (r + 1) * kV);
      const std::vector<double> ls = log_softmax(zs, tau);
      double norm = 0.0;
      for (int k = 0; k < 4; ++k) norm += std::exp(p.logp[r * 4 + k] / tau);
      double expect = 0.0;
      for (int k = 0; k < 4; ++k) {
        const double q = std::exp(p.logp[r * 4 + k] / tau) / norm;
        expect += q * (std::log(q) - ls[p.ids[r * 4 + k]]);
      }
      CHECK(kd[r] == Approx(tau * tau * expect).epsilon(1e-10));
    }
  }
}

TEST_CASE("teacher cache: cached-loss gradients by finite differences in double",
          "[teacher_cache]") {
  struct Case {
    CacheTail mode;
    KdLoss kind;
    double tau;
    int64_t K;
  };
  const Case cases[] = {
      {CacheTail::renormalize, KdLoss::forward_kl, 1.0, 4},
      {CacheTail::renormalize, KdLoss::soft_ce, 2.0, 3},
      {CacheTail::bucket, KdLoss::forward_kl, 1.0, 4},
      {CacheTail::bucket, KdLoss::forward_kl, 2.0, 1},
      {CacheTail::bucket, KdLoss::reverse_kl, 1.5, 4},
      {CacheTail::bucket, KdLoss::soft_ce, 1.0, 6},
      {CacheTail::bucket, KdLoss::forward_kl, 1.0, kV},
  };
  for (const Case& c : cases) {
    SparseProblem p(c.K);
    p.mode = c.mode;
    p.kind = c.kind;
    p.tau = c.tau;
    std::vector<double> g;
    p.run(&g);
    INFO("mode " << int(c.mode) << " loss " << int(c.kind) << " tau " << c.tau << " K " << c.K);
    // The numeric gradient differentiates through the s-dependent bucket teacher too.
    check_grad(g, numeric_grad(p.s, [&] { return p.run(nullptr); }), "cached KD", 1e-6);
  }
}

TEST_CASE("teacher cache: renormalize refuses reverse_kl", "[teacher_cache]") {
  CacheFixture f;
  auto backend = make_backend("cpu", 1);
  Model student(f.student_cfg, f.attention, *backend, ModelUse::train);
  student.set_params(init_params(student.layout(), f.student_cfg, f.attention, 2));
  std::vector<int32_t> tokens = testing::random_tokens(f.T + 1, f.student_cfg.vocab_size, 4);
  student.forward(tokens.data(), 1, f.T, false);
  CachedRows rows;
  rows.K = 1;
  rows.ids.assign(f.T, 0);
  rows.logp.assign(f.T, 0.f);
  rows.log_tail.assign(f.T, -INFINITY);
  FusedLoss loss(*backend);
  LossSettings settings;
  settings.kd_loss = KdLoss::reverse_kl;
  settings.kd_weight = 1.f;
  CHECK_THROWS_WITH(run_cached_loss(loss, student, rows, CacheTail::renormalize,
                                          tokens.data() + 1, settings, 1.f, false),
                    Contains("kd.cache_tail=bucket"));
}

TEST_CASE("teacher cache: K = V equals the online teacher (loss and gradients)",
          "[teacher_cache]") {
  CacheFixture f;
  const int64_t V = f.teacher_cfg.vocab_size;
  for (auto vt : {data::CacheValueType::f32, data::CacheValueType::bf16}) {
    const data::CacheHeader h = cli::build_teacher_cache(f.options(V, vt)).header;
    data::TokenDataset dataset({f.shard}, f.T, V);
    CHECK(h.windows == dataset.num_windows());
    CHECK(h.windows == 4);  // (40 - 1) / 9
    data::TeacherCache cache(f.dir.file("cache"));
    cache.require_match(dataset, V, "kd.teacher_cache");

    auto backend = make_backend("cpu", 2);
    LoadedModel teacher_loaded = load_model_dir(f.teacher_dir);
    Model teacher(teacher_loaded.model, teacher_loaded.attention, *backend, ModelUse::frozen);
    teacher.set_params(teacher_loaded.params);
    Model student(f.student_cfg, f.attention, *backend, ModelUse::train);
    student.set_params(init_params(student.layout(), f.student_cfg, f.attention, 5));

    const std::vector<int64_t> windows{3, 0, 2};
    const int64_t B = 3, T = f.T;
    std::vector<int32_t> inputs(B * T), targets(B * T);
    dataset.fill_batch(windows, inputs.data(), targets.data());
    FusedLoss loss(*backend);
    for (double tau : {1.0, 2.0}) {
      LossSettings settings;
      settings.kd_weight = 0.7f;
      settings.temperature = static_cast<float>(tau);
      settings.chunk_tokens = 7;

      teacher.forward(inputs.data(), B, T, false);
      student.zero_grads();
      student.forward(inputs.data(), B, T, false);
      const LossSums online = loss.run(student, &teacher, targets.data(), settings, 0.01f, true);
      student.backward();
      const std::vector<float> g_online = student.get_grads();

      CachedRows rows;
      for (int64_t w : windows) cache.append_window(w, rows);
      for (CacheTail mode : {CacheTail::renormalize, CacheTail::bucket}) {
        student.zero_grads();
        student.forward(inputs.data(), B, T, false);
        const LossSums cached =
            run_cached_loss(loss, student, rows, mode, targets.data(), settings, 0.01f, true);
        student.backward();
        const std::vector<float> g_cached = student.get_grads();
        INFO("value type " << int(vt) << " tau " << tau << " mode " << int(mode));
        CHECK(cached.ce == Approx(online.ce).epsilon(1e-6));
        const double tol = vt == data::CacheValueType::f32 ? 1e-5 : 2e-2;
        CHECK(cached.kd == Approx(online.kd).epsilon(tol));
        CHECK(max_rel_diff(g_cached, g_online) < (vt == data::CacheValueType::f32 ? 1e-4 : 2e-2));
      }
    }
  }
}

TEST_CASE("teacher cache: the trainer trains from a cache", "[teacher_cache][train]") {
  CacheFixture f(400);
  Config c = cached_run_config(f);
  c.train.steps = 3;
  c.train.threads = 2;
  TrainOptions options;
  options.run_dir = f.dir.file("run");
  REQUIRE_NOTHROW(train(c, options));
  std::ifstream metrics(f.dir.file("run") + "/metrics.jsonl");
  std::string line, last;
  int lines = 0;
  while (std::getline(metrics, line)) last = line, ++lines;
  CHECK(lines == 3);
  auto rec = nlohmann::json::parse(last);
  CHECK(rec["kd"].get<double>() > 0.0);
  CHECK(std::isfinite(rec["loss"].get<double>()));

  CHECK(fs::exists(f.dir.file("cache") + "/manifest.json"));

  // A manifest from another tokenizer next to the shards is refused.
  std::ofstream(f.dir.file("manifest.json")) << R"({"vocab_size": 128256})";
  options.run_dir = f.dir.file("run_manifest");
  CHECK_THROWS_WITH(train(c, options), Contains("data.train") && Contains("128256"));
  fs::remove(f.dir.file("manifest.json"));

  c.train.seq_len = 8;  // the cache was made with seq_len 9
  options.run_dir = f.dir.file("run2");
  CHECK_THROWS_WITH(train(c, options), Contains("kd.teacher_cache") && Contains("seq_len 9"));
}

TEST_CASE("teacher cache: the step reads each micro-batch's rows ahead, while the one before computes",
          "[teacher_cache][train]") {
  CacheFixture f(400);
  Config c = cached_run_config(f);
  validate(c);
  dist::SingleCommunicator comm;
  RunParts parts(c, comm, f.dir.file("run"));
  parts.build();
  parts.student->set_params(init_params(parts.student->layout(), c.model, c.attention, 1));
  TrainStep step(parts, nullptr);
  for (int64_t s = 1; s <= 3; ++s) step.run(s);
  // 6 micro-batches: only the first found nothing requested (the sampler tells
  // the next step's first windows without drawing them).
  CHECK(parts.cache_reader->hits() + parts.cache_reader->misses() == 6);
  CHECK(parts.cache_reader->misses() == 1);
}

TEST_CASE("shard manifest: vocabulary check", "[teacher_cache][manifest]") {
  TempDir dir;
  const std::string shard = dir.file("x_train_000001.bin");
  data::write_shard(shard, {1, 2, 3}, 7);
  CHECK(data::check_manifest_vocab({shard}, 128256, "data.train").empty());  // no manifest
  auto manifest = [&](const std::string& text) {
    std::ofstream(dir.file("manifest.json")) << text;
  };
  manifest(R"({"vocab_size": 151646})");
  CHECK(data::check_manifest_vocab({shard}, 151936, "data.train").size() == 1);  // Qwen padding
  CHECK_THROWS_WITH(data::check_manifest_vocab({shard}, 128256, "data.train"),
                    Contains("data.train") && Contains("151646") && Contains("larger"));
  manifest(R"({"vocab_size": 128256})");
  CHECK_NOTHROW(data::check_manifest_vocab({dir.file("*.bin")}, 128256, "data.train"));
  CHECK_THROWS_WITH(data::check_manifest_vocab({shard}, 151936, "data.val"),
                    Contains("data.val") && Contains("does not belong"));
  manifest(R"({"tokens": 3})");
  CHECK_THROWS_WITH(data::check_manifest_vocab({shard}, 256, "data.train"),
                    Contains("no integer vocab_size"));
}
