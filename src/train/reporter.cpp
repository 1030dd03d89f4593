#include "train/reporter.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>

#include "backend/backend_stats.h"
#include "core/error.h"
#include "io/file_util.h"
#include "model/attention_readback.h"
#include "model/init.h"
#include "model/micro_step.h"
#include "train/run_report.h"

namespace kdtrain {

bool progress_due(const Config& config, int64_t step, int64_t first_step, Clock::duration since_last,
                  Clock::duration quiet) {
  return step % config.log.interval == 0 || step == config.train.steps || step == first_step + 1 ||
         since_last > quiet;
}

bool validation_due(const Config& config, int64_t step) {
  return (config.eval.interval > 0 && step % config.eval.interval == 0) || step == config.train.steps;
}

bool logit_mean_due(const Config& config, int64_t step) {
  return config.log.logit_mean_interval > 0 && step % config.log.logit_mean_interval == 0;
}

void Reporter::log_setup(const dist::GradReducer& reducer) const {
  const Config& c = parts_.config;
  const Model& student = *parts_.student;
  const ParamBreakdown counts = count_params(student.layout());
  spdlog::info("student: {} ({}), {:.2f}M params, backend {}", c.model.preset.empty() ? "custom" : c.model.preset,
               to_string(c.attention.variant), counts.total / 1e6, parts_.backend->name());
  if (parts_.teacher)
    spdlog::info("teacher: {} ({:.2f}M params), kd.loss {}, tau {}, weight {}", c.kd.teacher,
                 count_params(parts_.teacher->layout()).total / 1e6, to_string(c.kd.loss), c.kd.temperature,
                 c.kd.weight);
  if (parts_.cache) {
    const data::TeacherCache& cache = *parts_.cache;
    spdlog::info("teacher cache: {} (top-{}, tail {}, {} shard verifier thread(s), checksums {}), kd.loss {}, tau {}, "
                 "weight {}; validation is CE only",
                 cache.path(), cache.header().K, to_string(c.kd.cache_tail),
                 parts_.cache_reader ? parts_.cache_reader->verify_threads() : 0,
                 cache.checks_shared() ? "shared by " + std::to_string(cache.checks_sharers()) + " ranks of this node"
                                       : "this rank's (" + cache.checks_private_reason() + ")",
                 to_string(c.kd.loss), c.kd.temperature, c.kd.weight);
  }
  spdlog::info("data: {} train windows of {} tokens; global batch {} = {} rank(s) x {} micro-batches of {}",
               parts_.train_data->num_windows(), c.train.seq_len, c.train.global_batch, parts_.comm.world(),
               parts_.accumulation_steps(), c.train.micro_batch);
  log_validation_plan(c, parts_.val_data.get());
  spdlog::info("memory plan (model/memory_plan.h), micro-batch {} x {} tokens:", c.train.micro_batch, c.train.seq_len);
  for (const std::string& line : memory_plan_lines(to_json(plan_memory(parts_.memory_plan_input()))))
    spdlog::info("{}", line);
  const double mib = 1024.0 * 1024.0;
  const dist::Range& range = parts_.opt_range;
  spdlog::info("data parallel: {} rank(s) over {}, {}; optimizer state per rank {:.1f} MiB "
               "(AdamW moments for {} of {} parameters)",
               parts_.comm.world(), parts_.comm.name(), parts_.zero1() ? "ZeRO-1" : "all-reduce",
               8.0 * range.size() / mib, range.size(), student.layout().total);
  if (parts_.comm.distributed())
    spdlog::info("gradient reduction: {} buckets of up to {:g} MiB, {}, {} on the wire", reducer.buckets().size(),
                 c.dist.bucket_mb, c.dist.overlap ? "overlapped with the backward" : "after the backward",
                 to_string(c.dist.reduce_dtype));
}

void Reporter::log_already_finished(const std::string& resume, int64_t step) const {
  spdlog::info("{} is finished: its checkpoint is at step {} and train.steps is {}; nothing to do", resume, step,
               parts_.config.train.steps);
  spdlog::info("to train further, extend it: kdtrain train --resume {} --set train.steps=N (N > {})", resume,
               step);
}

void Reporter::start(int64_t first_step, const nlohmann::json& pending) {
  if (parts_.is_root())
    metrics_ = std::make_unique<MetricsLog>(
        (std::filesystem::path(parts_.run_dir) / "metrics.jsonl").string(), first_step, pending);
  pending_ = nlohmann::json::array();
  first_step_ = first_step;
  started_ = Clock::now();
}

void Reporter::report(int64_t step, const StepResult& r, double seconds, int64_t skipped) {
  if (!metrics_) return;
  const int64_t total = parts_.config.train.steps;
  const bool progress = progress_due(parts_.config, step, first_step_, Clock::now() - last_progress_,
                                     kProgressSeconds);
  nlohmann::json record = step_record(step, r, seconds, skipped);
  // Mean |QK^T/sqrt(d)| on the last micro-batch (paper Fig. 2); with several
  // ranks, rank 0's last micro-batch. Reads the last micro-batch's q/k prefix
  // before validation overwrites them.
  if (progress) record["attn_logit_mean_abs"] = probe_mean_abs_attention_logit(*parts_.student, 128);
  // The paper's Fig. 2 quantity, every position of every sequence of that micro-batch:
  // O(L H B T^2 D) host work, so at its own cadence and where validation runs; the
  // seconds it took are logged beside it.
  const bool validate = validation_due(parts_.config, step);
  if (validate || logit_mean_due(parts_.config, step)) {
    const auto t0 = Clock::now();
    record["attn_logit_mean_abs_all"] = probe_mean_abs_attention_logit(*parts_.student, 0, 0);
    record["attn_logit_mean_abs_all_seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (validate) add_validation(record);
  try {
    metrics_->write(record);
  } catch (const Error&) {
    pending_.push_back(record);
    if (!failure_) failure_ = std::current_exception();
    return;
  }
  last_record_ = record;
  if (progress) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
    const double eta = elapsed / (step - first_step_) * (total - step);
    spdlog::info("{}", progress_line(record, total, eta, parts_.has_teacher()));
    last_progress_ = Clock::now();
  }
  if (record.contains("val_loss")) {
    last_val_ = record;
    spdlog::info("{}", validation_line(record, total, parts_.teacher != nullptr));
  }
  if (step == first_step_ + 1 || step == total) log_backend_report();
  // The console is a log too: when it goes to a file on a full disk, say so.
  if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && !failure_)
    failure_ = std::make_exception_ptr(Error("standard output (the console log): write failed: " + errno_text()));
}

LogsAtCheckpoint Reporter::flush() {
  if (metrics_ && !failure_) {
    try {
      metrics_->sync();
    } catch (const Error&) {
      failure_ = std::current_exception();
    }
  }
  return {pending_, failure_};
}

void Reporter::finish(int64_t step, bool stopped) {
  if (metrics_ && !stopped) metrics_->close();
  if (!parts_.is_root()) return;
  const Config& c = parts_.config;
  RunSummary s;
  s.step = step;
  s.total_steps = c.train.steps;
  s.steps_run = step - first_step_;
  s.tokens = static_cast<double>(s.steps_run * c.train.global_batch * c.train.seq_len);
  s.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  s.last = last_record_;
  s.last_val = last_val_;
  s.checkpoint = last_checkpoint_;
  s.stopped = stopped;
  s.has_teacher = parts_.has_teacher();
  s.val_has_teacher = parts_.teacher != nullptr;
  for (const std::string& line : summary_lines(s)) spdlog::info("{}", line);
}

nlohmann::json Reporter::step_record(int64_t step, const StepResult& r, double seconds, int64_t skipped) const {
  const Config& c = parts_.config;
  const double tokens = static_cast<double>(c.train.global_batch * c.train.seq_len);
  nlohmann::json rec;
  rec["step"] = step;
  rec["lr"] = r.lr;
  rec["loss"] = r.loss;
  rec["kd"] = r.sums.tokens ? r.sums.kd / r.sums.tokens : 0.0;
  rec["ce"] = r.sums.tokens ? r.sums.ce / r.sums.tokens : 0.0;
  // The KD loss on a cross-entropy scale (KL + teacher entropy), docs/evaluation.md.
  if (parts_.has_teacher()) rec["soft_ce"] = r.sums.tokens ? r.sums.soft_ce / r.sums.tokens : 0.0;
  rec["grad_norm"] = r.grad_norm;
  rec["tokens_per_s"] = seconds > 0 ? tokens / seconds : 0.0;
  rec["step_time_s"] = seconds;
  rec["applied"] = r.applied;
  rec["skipped_steps"] = skipped;
  rec["peak_memory_bytes"] = parts_.backend->memory_stats().peak_bytes;  // device on GPU, host on CPU
  add_variant_params(rec, *parts_.student, r.alpha_mean);
  return rec;
}

void Reporter::add_validation(nlohmann::json& record) {
  if (!parts_.val_data) return;
  const Config& c = parts_.config;
  const int64_t b = c.train.micro_batch, T = c.train.seq_len;
  const int64_t batches = validation_batches(c, *parts_.val_data);
  if (batches <= 0) return;
  std::vector<int32_t> inputs(b * T), targets(b * T);
  const LossSettings settings = loss_settings(c.kd);
  MicroTeacher teacher;  // the online teacher; a cached one has no rows for data.val
  teacher.model = parts_.teacher.get();
  LossSums total;
  for (int64_t i = 0; i < batches; ++i) {
    std::vector<int64_t> ids(b);
    for (int64_t j = 0; j < b; ++j) ids[j] = i * b + j;
    parts_.val_data->fill_batch(ids, inputs.data(), targets.data());
    total += run_micro_batch({inputs.data(), targets.data(), b, T}, *parts_.student, teacher, *parts_.loss, settings,
                             MicroPass::eval());
  }
  const bool online_teacher = parts_.teacher != nullptr;
  record["val_ce"] = total.ce / total.tokens;
  record["val_kd"] = total.kd / total.tokens;
  if (online_teacher) record["val_soft_ce"] = total.soft_ce / total.tokens;
  record["val_loss"] = total.mixed(static_cast<float>(c.kd.weight), online_teacher);
}

// Which attention implementation ran each distinct shape, and the peak memory.
void Reporter::log_backend_report() const {
  for (const AttentionPathUse& use : parts_.backend->attention_paths()) spdlog::info("attention {}", describe(use));
  spdlog::info("memory: {}", describe(parts_.backend->memory_stats()));
}

}  // namespace kdtrain
