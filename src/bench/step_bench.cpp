#include "bench/step_bench.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>

#include "core/error.h"
#include "model/init.h"
#include "train/teacher_load.h"

namespace kdtrain::bench {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// N rows of a cached top-K teacher: K distinct random ids per row, log-probabilities
// of a random softmax over them holding 90% of the mass, log(0.1) for the tail.
CachedRows random_cached_rows(int64_t N, int64_t V, int64_t K, uint64_t seed) {
  KD_CHECK(K >= 1 && K <= V, "--teacher-cache ", K, " must be in [1, vocab_size = ", V, "]");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
  std::normal_distribution<float> logit(0.f, 2.f);
  CachedRows rows;
  rows.K = K;
  std::vector<int32_t> taken(static_cast<size_t>(V), -1);
  std::vector<float> z(static_cast<size_t>(K));
  for (int64_t r = 0; r < N; ++r) {
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      int32_t id = pick(rng);
      while (taken[id] == r) id = (id + 1) % static_cast<int32_t>(V);
      taken[id] = static_cast<int32_t>(r);
      rows.ids.push_back(id);
      z[k] = logit(rng);
      sum += std::exp(double(z[k]));
    }
    for (int64_t k = 0; k < K; ++k)
      rows.logp.push_back(static_cast<float>(double(z[k]) - std::log(sum) + std::log(0.9)));
    rows.log_tail.push_back(static_cast<float>(std::log(0.1)));
  }
  return rows;
}

// Window w of the pool is row w of one (B, T+1) block of random tokens.
struct RandomWindows {
  int64_t T = 0;
  std::vector<int32_t> inputs, targets;  // (B, T)
  CachedRows cached;                     // (B*T) rows with --teacher-cache
};

}  // namespace

Config step_bench_config(const BenchShape& s, const BenchOptions& o) {
  Config c = s.config;
  c.train.device = s.device;
  c.train.micro_batch = s.B;
  c.train.global_batch = s.B;
  c.train.seq_len = s.T;
  c.train.steps = o.warmup + o.steps;
  return c;
}

BenchTeacher build_step_bench_parts(RunParts& parts, const BenchOptions& o) {
  const Config& c = parts.config;
  parts.backend = make_backend(c.train.device, c.train.threads, c.train.attention_forward,
                               c.train.attention_backward);
  parts.student = std::make_unique<Model>(c.model, c.attention, *parts.backend, ModelUse::train);
  parts.student->set_recompute(recompute_plan(c.train));
  parts.student->set_params(init_params(parts.student->layout(), c.model, c.attention, o.seed));
  parts.loss = std::make_unique<FusedLoss>(*parts.backend);
  BenchTeacher t;
  if (std::filesystem::is_directory(o.teacher)) {
    const auto start = Clock::now();
    parts.teacher = load_teacher(o.teacher, *parts.backend, c.model.vocab_size, "--teacher").model;
    parts.backend->synchronize();
    t.ready_s = ms_since(start, Clock::now()) / 1e3;
    t.source = "checkpoint";
  } else if (!o.teacher.empty()) {
    const ModelConfig m = model_preset(o.teacher);
    KD_CHECK(m.vocab_size == c.model.vocab_size, "--teacher: preset ", o.teacher, " has vocab_size ", m.vocab_size,
             " but the student has ", c.model.vocab_size);
    const AttentionConfig a;  // teachers are baseline models
    parts.teacher = std::make_unique<Model>(m, a, *parts.backend, ModelUse::teacher);
    parts.teacher->set_params(init_params(parts.teacher->layout(), m, a, o.seed + 1));
    t.source = "preset (random init)";
  }
  parts.sampler = std::make_unique<data::Sampler>(c.train.micro_batch, c.train.seed);
  parts.opt_range = {0, parts.student->layout().total};
  parts.optimizer = std::make_unique<AdamW>(*parts.student, c.optimizer);
  return t;
}

BatchSource random_batches(const Config& c, const BenchOptions& o) {
  const int64_t B = c.train.micro_batch, T = c.train.seq_len, V = c.model.vocab_size;
  auto pool = std::make_shared<RandomWindows>();
  pool->T = T;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
  pool->inputs.resize(B * T);
  pool->targets.resize(B * T);
  for (int64_t b = 0; b < B; ++b) {
    int32_t previous = pick(rng);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t next = pick(rng);
      pool->inputs[b * T + t] = previous;
      pool->targets[b * T + t] = next;
      previous = next;
    }
  }
  BatchSource source;
  source.tokens = [pool](const std::vector<int64_t>& windows, int32_t* inputs, int32_t* targets) {
    const int64_t T = pool->T;
    for (size_t i = 0; i < windows.size(); ++i) {
      std::copy_n(pool->inputs.begin() + windows[i] * T, T, inputs + i * T);
      std::copy_n(pool->targets.begin() + windows[i] * T, T, targets + i * T);
    }
  };
  if (o.teacher_cache <= 0) return source;
  pool->cached = random_cached_rows(B * T, V, o.teacher_cache, o.seed + 2);
  source.cached_rows = [pool](const std::vector<int64_t>& windows, const std::vector<int64_t>&) {
    const int64_t T = pool->T, K = pool->cached.K;
    const CachedRows& all = pool->cached;
    CachedRows rows;
    rows.K = K;
    for (int64_t w : windows) {
      rows.ids.insert(rows.ids.end(), all.ids.begin() + w * T * K, all.ids.begin() + (w + 1) * T * K);
      rows.logp.insert(rows.logp.end(), all.logp.begin() + w * T * K, all.logp.begin() + (w + 1) * T * K);
      rows.log_tail.insert(rows.log_tail.end(), all.log_tail.begin() + w * T, all.log_tail.begin() + (w + 1) * T);
    }
    return rows;
  };
  return source;
}

nlohmann::json measured_arenas(const RunParts& parts) {
  const AdamW& opt = *parts.optimizer;
  return {{"student_activations_bytes", static_cast<int64_t>(parts.student->activation_bytes())},
          {"teacher_activations_bytes", parts.teacher ? static_cast<int64_t>(parts.teacher->activation_bytes()) : 0},
          {"optimizer_bytes", 8 * (opt.shard_end() - opt.shard_begin())}};
}

void PhaseTimer::begin_step(bool record) {
  record_ = record;
  open_.fill(0.0);
  current_ = StepPhase::teacher;
  step_start_ = mark_ = Clock::now();
}

void PhaseTimer::close_phase() {
  backend_.synchronize();
  const auto now = Clock::now();
  open_[static_cast<int>(current_)] += ms_since(mark_, now);
  mark_ = now;
}

void PhaseTimer::on_phase(int64_t, StepPhase phase) {
  close_phase();
  current_ = phase;
}

void PhaseTimer::end_step() {
  close_phase();
  if (!record_) return;
  step_ms.push_back(ms_since(step_start_, mark_));
  for (int p = 0; p < kPhases; ++p) phase_ms[p].push_back(open_[p]);
}

}  // namespace kdtrain::bench
