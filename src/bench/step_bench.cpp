#include "bench/step_bench.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <random>

#include "core/error.h"
#include "data/teacher_cache_synthetic.h"
#include "model/init.h"
#include "train/teacher_load.h"

namespace kdtrain::bench {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// --teacher-cache K: a cache of the pool's B windows (random rows, bf16, one
// shard) opened as training opens kd.teacher_cache, and its reader started, so
// the step takes its rows from the reader thread (and on CUDA its upload lane)
// as in training. The files are deleted once mapped.
void open_synthetic_cache(RunParts& parts, const BenchOptions& o) {
  const Config& c = parts.config;
  const int64_t V = c.model.vocab_size, K = o.teacher_cache;
  KD_CHECK(K >= 1 && K <= V, "--teacher-cache ", K, " must be in [1, vocab_size = ", V, "]");
  data::CacheHeader shape;
  shape.K = K;
  shape.V = V;
  shape.seq_len = c.train.seq_len;
  shape.windows = c.train.micro_batch;
  const std::string dir = data::synthetic_cache_dir("bench_teacher_cache");
  try {
    data::write_synthetic_cache(dir, shape, shape.windows, o.seed + 2);
    parts.cache = std::make_unique<data::TeacherCache>(dir);
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  parts.start_cache_reader();
}

// Window w of the pool is row w of one (B, T+1) block of random tokens.
struct RandomWindows {
  int64_t T = 0;
  std::vector<int32_t> inputs, targets;  // (B, T)
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
  if (o.teacher_cache > 0) open_synthetic_cache(parts, o);
  parts.sampler = std::make_unique<data::Sampler>(c.train.micro_batch, c.train.seed);
  parts.opt_range = {0, parts.student->layout().total};
  parts.optimizer = std::make_unique<AdamW>(*parts.student, c.optimizer);
  return t;
}

BatchSource random_batches(const RunParts& parts, const BenchOptions& o) {
  const Config& c = parts.config;
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
  source.cached_rows = cache_reader_rows(parts);
  return source;
}

CacheReaderCounts reader_counts(const RunParts& parts) {
  const data::CachePrefetcher* reader = parts.cache_reader.get();
  if (!reader) return {};
  return {reader->hits(), reader->misses()};
}

nlohmann::json cache_reader_report(const RunParts& parts, const CacheReaderCounts& timed_start) {
  if (!parts.cache_reader) return nullptr;
  const CacheReaderCounts now = reader_counts(parts);
  return {{"hits", now.hits - timed_start.hits},
          {"misses", now.misses - timed_start.misses},
          {"upload_lane", parts.cache_reader->uploads()}};
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
