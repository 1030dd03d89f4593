#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "backend/backend.h"
#include "backend/backend_stats.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/shard_manifest.h"
#include "data/teacher_cache.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "io/checksums.h"
#include "io/file_util.h"
#include "io/model_dir.h"
#include "model/attention_readback.h"
#include "model/cached_teacher_loss.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/observer.h"
#include "train/optimizer.h"
#include "train/resume_checks.h"
#include "train/run_lock.h"
#include "train/run_report.h"
#include "train/schedule.h"
#include "train/signals.h"

namespace kdtrain {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct StepResult {
  LossSums sums;
  double grad_norm = 0.0;
  double lr = 0.0;
  bool applied = true;
  std::vector<double> alpha_mean;  // (L*H) batch mean of alpha, affine only
};

class Trainer {
 public:
  Trainer(const Config& config, const TrainOptions& options, dist::Communicator& comm)
      : config_(config), options_(options), comm_(comm), observer_(options.observer) {}

  void run() {
    setup();
    install_stop_handlers();
    const int64_t total = config_.train.steps;
    if (step_ >= total) {
      log_already_finished();
      return;
    }
    // Only rank 0 writes metrics; the others compute the same reduced values.
    if (is_root())
      metrics_ = std::make_unique<MetricsLog>((fs::path(options_.run_dir) / "metrics.jsonl").string(), step_,
                                              pending_records_);
    pending_records_ = nlohmann::json::array();
    const auto started = Clock::now();
    const int64_t first_step = step_;
    if (observer_) observer_->on_start(comm_.rank(), comm_.world());
    while (step_ < total) {
      const auto t0 = Clock::now();
      StepResult r = train_step();
      ++step_;
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (observer_) observe_step_end(r);
      const std::string write_error =
          metrics_ ? report_step(*metrics_, r, seconds, started, first_step) : std::string();
      // A signal, or rank 0 failing to write its logs, may come at different steps
      // on different ranks: stop together, after a checkpoint.
      const bool stop = comm_.any(stop_requested() || !write_error.empty());
      const bool interval_hit =
          config_.checkpoint.interval > 0 && step_ % config_.checkpoint.interval == 0;
      if (interval_hit || step_ == total || stop) save_or_fail(write_error);
      if (stop) {
        if (stop_signal() != 0)
          spdlog::warn("signal {} received: checkpoint written at step {}, exiting", stop_signal(),
                       step_);
        else
          spdlog::warn("another rank received a stop signal: checkpoint written at step {}, exiting",
                       step_);
        log_summary(started, first_step, true);
        return;
      }
    }
    if (metrics_) metrics_->close();
    log_summary(started, first_step, false);
  }

 private:
  // Rank 0: the metrics record (with validation where due) and the progress line,
  // which also comes every kProgressSeconds so a slow run with a long
  // log.interval still shows it is alive. Returns "" or what failed to be written
  // (the run then stops after a checkpoint, which keeps the unwritten record).
  std::string report_step(MetricsLog& metrics, const StepResult& r, double seconds, Clock::time_point started,
                          int64_t first_step) {
    const int64_t total = config_.train.steps;
    const bool progress_due = step_ % config_.log.interval == 0 || step_ == total ||
                              step_ == first_step + 1 || Clock::now() - last_progress_ > kProgressSeconds;
    nlohmann::json record = step_record(r, seconds);
    // Mean |QK^T/sqrt(d)| on the last micro-batch (paper Fig. 2); with several
    // ranks, rank 0's last micro-batch. Reads the last micro-batch's q/k prefix
    // before validation overwrites them.
    if (progress_due) record["attn_logit_mean_abs"] = probe_mean_abs_attention_logit(*student_, 128);
    if ((config_.eval.interval > 0 && step_ % config_.eval.interval == 0) || step_ == total)
      add_validation(record);
    try {
      metrics.write(record);
    } catch (const Error& e) {
      pending_records_.push_back(record);
      return e.what();
    }
    last_record_ = record;
    if (progress_due) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
      const double eta = elapsed / (step_ - first_step) * (total - step_);
      spdlog::info("{}", progress_line(record, total, eta, has_teacher()));
      last_progress_ = Clock::now();
    }
    if (record.contains("val_loss")) {
      last_val_ = record;
      spdlog::info("{}", validation_line(record, total, teacher_ != nullptr));
    }
    if (step_ == first_step + 1 || step_ == total) log_backend_report();
    // The console is a log too: when it goes to a file on a full disk, say so.
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      return "standard output (the console log): write failed: " + errno_text();
    return "";
  }

  void setup() {
    const TrainConfig& t = config_.train;
    // train.threads = 0 means all cores; ranks sharing a node share them out,
    // else their thread pools oversubscribe the cores and every step crawls.
    int64_t threads = t.threads;
    if (threads == 0 && comm_.local_world() > 1)
      threads = std::max<int64_t>(1, std::thread::hardware_concurrency() / comm_.local_world());
    backend_ = make_backend(t.device, threads);
    const ModelConfig& m = config_.model;
    student_ = std::make_unique<Model>(m, config_.attention, *backend_, true);
    loss_ = std::make_unique<FusedLoss>(*backend_);

    // Optimizer range: this rank's shard under ZeRO-1, else the whole arena.
    const int64_t total_params = student_->layout().total;
    opt_range_ = zero1() ? dist::shard_range(total_params, comm_.rank(), comm_.world())
                         : dist::Range{0, total_params};
    make_grad_reducer();

    KD_CHECK(!config_.data.train.empty(), "data.train: no training shards given");
    data::check_manifest_vocab(config_.data.train, m.vocab_size, "data.train");
    train_data_ = std::make_unique<data::TokenDataset>(config_.data.train, t.seq_len, m.vocab_size);
    if (!config_.data.val.empty()) {
      data::check_manifest_vocab(config_.data.val, m.vocab_size, "data.val");
      val_data_ = std::make_unique<data::TokenDataset>(config_.data.val, t.seq_len, m.vocab_size);
    }
    KD_CHECK(train_data_->num_windows() >= t.global_batch, "data.train: only ",
             train_data_->num_windows(), " windows of train.seq_len+1 = ", t.seq_len + 1,
             " tokens, fewer than one global batch (", t.global_batch, " sequences)");
    sampler_ = std::make_unique<data::Sampler>(train_data_->num_windows(), t.seed);

    if (!config_.kd.teacher.empty()) {
      LoadedModel teacher = load_model_dir(config_.kd.teacher);
      KD_CHECK(teacher.model.vocab_size == m.vocab_size, "kd.teacher: ", config_.kd.teacher,
               " has vocab_size ", teacher.model.vocab_size, " but the student has ",
               m.vocab_size, "; student and teacher must share the vocabulary");
      teacher_ = std::make_unique<Model>(teacher.model, teacher.attention, *backend_,
                                         ModelUse::teacher);
      teacher_->set_params(teacher.params);
      teacher_fingerprint_ = "model:" + io::hex64(data::teacher_hash(teacher));
    }
    // A cached teacher (kd.teacher_cache) replaces the online one.
    if (!config_.kd.teacher_cache.empty()) {
      cache_ = std::make_unique<data::TeacherCache>(config_.kd.teacher_cache);
      cache_->require_match(*train_data_, m.vocab_size, "kd.teacher_cache");
      const data::CacheHeader& h = cache_->header();
      teacher_fingerprint_ = "cache:" + io::hex64(h.teacher_hash) + ",top_k=" + std::to_string(h.K) +
                             (h.value_type == data::CacheValueType::bf16 ? ",bf16" : ",f32");
      check_cached_loss_kind(config_.kd.loss, config_.kd.cache_tail);
    }

    if (!options_.resume.empty()) {
      resume();
    } else {
      if (!config_.model.init.empty()) {
        LoadedModel init = load_model_dir(config_.model.init);
        student_->set_params(params_for(init, *student_, config_.model.init));
      } else {
        student_->set_params(init_params(student_->layout(), m, config_.attention, t.seed));
      }
      optimizer_ = std::make_unique<AdamW>(*student_, config_.optimizer, opt_range_.begin,
                                           opt_range_.end);
      // Everything above is checked before the run directory is created.
      if (is_root()) {
        lock_ = std::make_unique<RunLock>(options_.run_dir);
        write_resolved_config(config_, options_.run_dir);
      }
    }
    log_setup();
  }

  void resume() {
    // An existing run directory is locked before reading, so no other process
    // writes the checkpoints being read; a new one is created only once they check out.
    if (is_root() && fs::exists(options_.run_dir)) lock_ = std::make_unique<RunLock>(options_.run_dir);
    TrainingState state = load_training_checkpoint(options_.resume, config_, *student_, opt_range_);
    optimizer_ = std::make_unique<AdamW>(*student_, config_.optimizer, opt_range_.begin,
                                         opt_range_.end);
    optimizer_->set_state(state.adam_m, state.adam_v, state.step);
    KD_CHECK(state.data_fingerprint == train_data_->fingerprint(), "--resume ", options_.resume,
             ": the training data differs from the checkpoint's (fingerprint ",
             state.data_fingerprint, " vs ", train_data_->fingerprint(), ")");
    if (is_root() && !lock_) lock_ = std::make_unique<RunLock>(options_.run_dir);
    ResumeContext ctx{state.directory, options_.run_dir, train_data_->num_windows(), teacher_fingerprint_,
                      options_.allow_config_change, options_.rewind, is_root()};
    check_resume(config_, state, ctx);
    sampler_->from_json(state.sampler, state.directory);
    step_ = state.step;
    skipped_ = state.skipped_steps;
    consecutive_skips_ = state.consecutive_skips;
    pending_records_ = state.pending_metrics;
    // The config the run now goes on with (a new run directory, or train.steps extended).
    if (is_root()) write_resolved_config(config_, options_.run_dir);
    spdlog::info("resumed from {} at step {} (written by {} rank(s), now {})", state.directory,
                 step_, state.world_size, comm_.world());
  }

  // A resumed run that already reached train.steps: say so, and how to go on.
  void log_already_finished() const {
    spdlog::info("{} is finished: its checkpoint is at step {} and train.steps is {}; nothing to do",
                 options_.resume, step_, config_.train.steps);
    spdlog::info("to train further, extend it: kdtrain train --resume {} --set train.steps=N (N > {})",
                 options_.resume, step_);
  }

  // Rank 0: the run's last lines (metrics.h RunSummary).
  void log_summary(Clock::time_point started, int64_t first_step, bool stopped) const {
    if (!is_root()) return;
    RunSummary s;
    s.step = step_;
    s.total_steps = config_.train.steps;
    s.steps_run = step_ - first_step;
    s.tokens = static_cast<double>(s.steps_run * config_.train.global_batch * config_.train.seq_len);
    s.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    s.last = last_record_;
    s.last_val = last_val_;
    s.checkpoint = last_checkpoint_;
    s.stopped = stopped;
    s.has_teacher = has_teacher();
    s.val_has_teacher = teacher_ != nullptr;
    for (const std::string& line : summary_lines(s)) spdlog::info("{}", line);
  }

  void log_setup() {
    const ParamBreakdown counts = count_params(student_->layout());
    spdlog::info("student: {} ({}), {:.2f}M params, backend {}", config_.model.preset.empty() ? "custom" : config_.model.preset,
                 to_string(config_.attention.variant), counts.total / 1e6, backend_->name());
    if (teacher_)
      spdlog::info("teacher: {} ({:.2f}M params), kd.loss {}, tau {}, weight {}", config_.kd.teacher,
                   count_params(teacher_->layout()).total / 1e6, to_string(config_.kd.loss),
                   config_.kd.temperature, config_.kd.weight);
    if (cache_)
      spdlog::info("teacher cache: {} (top-{}, tail {}), kd.loss {}, tau {}, weight {}; validation is CE only",
                   cache_->path(), cache_->header().K, to_string(config_.kd.cache_tail),
                   to_string(config_.kd.loss), config_.kd.temperature, config_.kd.weight);
    spdlog::info("data: {} train windows of {} tokens; global batch {} = {} rank(s) x {} micro-batches of {}",
                 train_data_->num_windows(), config_.train.seq_len, config_.train.global_batch,
                 comm_.world(), accumulation_steps(), config_.train.micro_batch);
    log_validation_plan(config_, val_data_.get());
    const double mib = 1024.0 * 1024.0;
    spdlog::info("data parallel: {} rank(s) over {}, {}; optimizer state per rank {:.1f} MiB "
                 "(AdamW moments for {} of {} parameters)",
                 comm_.world(), comm_.name(), zero1() ? "ZeRO-1" : "all-reduce",
                 8.0 * opt_range_.size() / mib, opt_range_.size(), student_->layout().total);
    if (comm_.distributed())
      spdlog::info("gradient reduction: {} buckets of up to {:g} MiB, {}, {} on the wire",
                   reducer_->buckets().size(), config_.dist.bucket_mb,
                   config_.dist.overlap ? "overlapped with the backward" : "after the backward",
                   to_string(config_.dist.reduce_dtype));
  }

  // Which attention implementation ran each distinct shape, and the peak memory.
  void log_backend_report() const {
    for (const AttentionPathUse& use : backend_->attention_paths())
      spdlog::info("attention {}", describe(use));
    spdlog::info("memory: {}", describe(backend_->memory_stats()));
  }

  bool is_root() const { return comm_.rank() == 0; }
  bool zero1() const { return config_.dist.zero1 && comm_.distributed(); }

  // Micro-batches per rank per step: global_batch = micro_batch x world x accumulation.
  int64_t accumulation_steps() const {
    return config_.train.global_batch / (config_.train.micro_batch * comm_.world());
  }

  LossSettings loss_settings() const {
    LossSettings s;
    s.kd_loss = config_.kd.loss;
    s.temperature = static_cast<float>(config_.kd.temperature);
    s.kd_weight = static_cast<float>(config_.kd.weight);
    s.chunk_tokens = config_.kd.chunk_tokens;
    return s;
  }

  StepResult train_step() {
    const int64_t b = config_.train.micro_batch, T = config_.train.seq_len;
    const int64_t G = config_.train.global_batch;
    const float grad_scale = 1.f / static_cast<float>(G * T);
    // Every rank draws the same global batch and keeps its contiguous slice.
    std::vector<int64_t> windows =
        data::rank_slice(sampler_->next_global_batch(G), comm_.rank(), comm_.world());
    step_windows_ = windows;
    std::vector<int32_t> inputs(b * T), targets(b * T);
    StepResult r;
    student_->zero_grads();
    for (int64_t micro = 0; micro < accumulation_steps(); ++micro) {
      // The last micro-batch's backward makes the gradients final, bucket by bucket.
      if (micro + 1 == accumulation_steps()) reducer_->begin_step();
      std::vector<int64_t> ids(windows.begin() + micro * b, windows.begin() + (micro + 1) * b);
      train_data_->fill_batch(ids, inputs.data(), targets.data());
      if (observer_) observer_->on_micro_batch(step_ + 1, inputs.data(), b, T);
      if (teacher_) teacher_->forward(inputs.data(), b, T, false);
      student_->forward(inputs.data(), b, T, true);
      LossSums s = cache_ ? cached_loss(ids, targets.data(), grad_scale)
                          : loss_->run(*student_, teacher_.get(), targets.data(), loss_settings(),
                                       grad_scale, true);
      student_->backward();
      r.sums += s;
    }
    reducer_->finish();
    int64_t alpha_tokens = 0;
    std::vector<double> alpha_sums = student_->take_alpha_sums(&alpha_tokens);
    reduce_across_ranks(r.sums, alpha_sums, alpha_tokens);
    r.grad_norm = std::sqrt(global_grad_sum_squares());
    r.lr = learning_rate(config_.schedule, config_.optimizer.lr, step_, config_.train.steps);
    const double loss = r.sums.mixed(static_cast<float>(config_.kd.weight), has_teacher());
    if (!std::isfinite(loss) || !std::isfinite(r.grad_norm)) {
      r.applied = false;
      if (config_.train.on_nonfinite == NonFinitePolicy::stop)
        fail("step ", step_ + 1, ": non-finite ", std::isfinite(loss) ? "gradient norm" : "loss",
             " (loss ", loss, ", grad norm ", r.grad_norm,
             "); the update was not applied and the last checkpoint is intact. Set "
             "train.on_nonfinite=skip to skip such steps.");
      ++skipped_;
      ++consecutive_skips_;
      // Skipping forever is a diverged run reported as a success.
      KD_CHECK(consecutive_skips_ < config_.train.max_consecutive_skips, "step ", step_ + 1, ": ",
               consecutive_skips_, " steps in a row had a non-finite loss or gradient norm (loss ", loss,
               ", grad norm ", r.grad_norm, ") and were skipped; stopping at train.max_consecutive_skips = ",
               config_.train.max_consecutive_skips, ". The run is diverging: lower optimizer.lr or clip "
               "gradients (optimizer.grad_clip), then resume from the last checkpoint.");
      return r;
    }
    consecutive_skips_ = 0;
    optimizer_->step(static_cast<float>(r.lr), clip_scale(r.grad_norm, config_.optimizer.grad_clip));
    if (zero1()) {
      // Every rank updated its shard of the master weights; share them.
      backend_->synchronize();
      comm_.all_gather(student_->master(), student_->layout().total);
      student_->refresh_compute_weights();
    }
    if (!alpha_sums.empty()) update_alpha_ma(alpha_sums, alpha_tokens, r);
    return r;
  }

  // The gradient reduction (dist/grad_reducer.h): the student's backward marks
  // each range final; the reducer launches each complete bucket, in a fixed
  // order, during the backward (dist.overlap) or after it.
  void make_grad_reducer() {
    dist::GradReduceOptions options;
    options.bucket_elements = dist::bucket_elements_for_mib(config_.dist.bucket_mb);
    options.overlap = config_.dist.overlap;
    options.bf16 = config_.dist.reduce_dtype == ReduceDtype::bf16;
    reducer_ = std::make_unique<dist::GradReducer>(comm_, student_->grads(), student_->layout().total,
                                                   options, backend_->native_stream());
    student_->set_grads_final_hook([this](int64_t begin, int64_t end) { reducer_->mark_final(begin, end); });
    if (observer_)
      reducer_->set_before_launch([this](const dist::Range& bucket) {
        observer_->on_grads_ready(step_ + 1, bucket.begin, bucket.end, *student_);
      });
  }

  // Sums over ranks after the gradient buckets: under ZeRO-1 each rank holds
  // the summed gradients of its shard; with dist.zero1=false they are
  // all-gathered so every rank holds all of them. Loss sums and alpha sums are
  // all-reduced, so every rank takes the same non-finite decision and holds
  // the same alpha_ma. Each rank's gradients are already scaled by
  // 1/(global tokens), so the sum is the mean.
  void reduce_across_ranks(LossSums& sums, std::vector<double>& alpha_sums, int64_t& alpha_tokens) {
    if (!comm_.distributed()) return;
    if (!zero1()) comm_.all_gather(student_->grads(), student_->layout().total);
    std::vector<double> host = {sums.ce, sums.kd, static_cast<double>(sums.tokens),
                                static_cast<double>(alpha_tokens), sums.soft_ce};
    host.insert(host.end(), alpha_sums.begin(), alpha_sums.end());
    comm_.all_reduce_sum_host(host.data(), static_cast<int64_t>(host.size()));
    sums.ce = host[0];
    sums.kd = host[1];
    sums.tokens = static_cast<int64_t>(host[2]);
    alpha_tokens = static_cast<int64_t>(host[3]);
    sums.soft_ce = host[4];
    std::copy(host.begin() + 5, host.end(), alpha_sums.begin());
  }

  // Squared global gradient norm: per-shard sums added over ranks under ZeRO-1.
  double global_grad_sum_squares() {
    double sum = optimizer_->grad_sum_squares();
    if (zero1()) comm_.all_reduce_sum_host(&sum, 1);
    return sum;
  }

  void observe_step_end(const StepResult& r) {
    StepObservation o;
    o.step = step_;
    o.rank = comm_.rank();
    o.world = comm_.world();
    o.windows = &step_windows_;
    o.loss = r.sums.mixed(static_cast<float>(config_.kd.weight), has_teacher());
    o.grad_norm = r.grad_norm;
    o.applied = r.applied;
    observer_->on_step_end(o, *student_);
  }

  // The fused loss against the cached teacher rows of `windows`.
  bool has_teacher() const { return teacher_ != nullptr || cache_ != nullptr; }
  LossSums cached_loss(const std::vector<int64_t>& windows, const int32_t* targets, float grad_scale) {
    CachedRows rows;
    for (int64_t w : windows) cache_->append_window(w, rows);
    return run_cached_loss(*loss_, *student_, rows, config_.kd.cache_tail, targets, loss_settings(),
                           grad_scale, true);
  }

  // alpha_ma <- rho*alpha_ma + (1-rho)*mean(alpha) per (layer, head), after the update,
  // so every forward of this step used the value from before it (SPEC §2).
  void update_alpha_ma(const std::vector<double>& sums, int64_t tokens, StepResult& r) {
    const double rho = config_.attention.alpha_momentum;
    std::vector<float> ma = student_->alpha_ma();
    r.alpha_mean.resize(sums.size());
    for (size_t i = 0; i < ma.size(); ++i) {
      r.alpha_mean[i] = sums[i] / static_cast<double>(tokens);
      ma[i] = static_cast<float>(rho * ma[i] + (1.0 - rho) * r.alpha_mean[i]);
    }
    student_->set_alpha_ma(ma);
  }

  nlohmann::json step_record(const StepResult& r, double seconds) {
    const double tokens = static_cast<double>(config_.train.global_batch * config_.train.seq_len);
    nlohmann::json rec;
    rec["step"] = step_;
    rec["lr"] = r.lr;
    rec["loss"] = r.sums.mixed(static_cast<float>(config_.kd.weight), has_teacher());
    rec["kd"] = r.sums.tokens ? r.sums.kd / r.sums.tokens : 0.0;
    rec["ce"] = r.sums.tokens ? r.sums.ce / r.sums.tokens : 0.0;
    // The KD loss on a cross-entropy scale (KL + teacher entropy), docs/evaluation.md.
    if (has_teacher()) rec["soft_ce"] = r.sums.tokens ? r.sums.soft_ce / r.sums.tokens : 0.0;
    rec["grad_norm"] = r.grad_norm;
    rec["tokens_per_s"] = seconds > 0 ? tokens / seconds : 0.0;
    rec["step_time_s"] = seconds;
    rec["applied"] = r.applied;
    rec["skipped_steps"] = skipped_;
    rec["peak_memory_bytes"] = backend_->memory_stats().peak_bytes;  // device on GPU, host on CPU
    add_variant_params(rec, *student_, r.alpha_mean);
    return rec;
  }

  // Mean loss over the first eval.batches micro-batches of data.val, in order.
  void add_validation(nlohmann::json& record) {
    if (!val_data_) return;
    const int64_t b = config_.train.micro_batch, T = config_.train.seq_len;
    const int64_t batches = validation_batches(config_, *val_data_);
    if (batches <= 0) return;
    std::vector<int32_t> inputs(b * T), targets(b * T);
    LossSums total;
    for (int64_t i = 0; i < batches; ++i) {
      std::vector<int64_t> ids(b);
      for (int64_t j = 0; j < b; ++j) ids[j] = i * b + j;
      val_data_->fill_batch(ids, inputs.data(), targets.data());
      if (teacher_) teacher_->forward(inputs.data(), b, T, false);
      student_->forward(inputs.data(), b, T, false);
      LossSums s = loss_->run(*student_, teacher_.get(), targets.data(), loss_settings(), 1.f, false);
      total += s;
    }
    record["val_ce"] = total.ce / total.tokens;
    record["val_kd"] = total.kd / total.tokens;
    if (teacher_) record["val_soft_ce"] = total.soft_ce / total.tokens;
    record["val_loss"] = total.mixed(static_cast<float>(config_.kd.weight), teacher_ != nullptr);
  }

  // A checkpoint, after the metrics are fsynced (a checkpoint is never durable
  // ahead of them). When rank 0 failed to write its logs (`failure`), the run
  // ends with that error, saying whether the checkpoint made it.
  void save_or_fail(std::string failure) {
    if (metrics_ && failure.empty()) {
      try {
        metrics_->sync();
      } catch (const Error& e) {
        failure = e.what();
      }
    }
    if (failure.empty()) {
      save();
      return;
    }
    try {
      save();
    } catch (const std::exception& e) {
      fail(failure, "; the checkpoint attempted after it failed too (", e.what(),
           "); the last checkpoint written before is intact");
    }
    fail(failure, "; stopped after writing a checkpoint at step ", step_, " (it keeps the unwritten record); "
         "free space or fix the file, then resume with --resume ", options_.run_dir);
  }

  void save() {
    TrainingState state;
    state.pending_metrics = pending_records_;
    state.step = step_;
    state.skipped_steps = skipped_;
    state.consecutive_skips = consecutive_skips_;
    state.teacher_fingerprint = teacher_fingerprint_;
    state.moments_begin = opt_range_.begin;
    state.adam_m = optimizer_->first_moment();
    state.adam_v = optimizer_->second_moment();
    state.sampler = sampler_->to_json();
    state.data_fingerprint = train_data_->fingerprint();
    const std::string dir = save_training_checkpoint(options_.run_dir, config_, *student_, state,
                                                     config_.checkpoint.keep, comm_);
    spdlog::info("checkpoint: {}", dir);
    last_checkpoint_ = dir;
  }

  Config config_;
  TrainOptions options_;
  std::unique_ptr<RunLock> lock_;  // rank 0: this process owns the run directory
  std::unique_ptr<MetricsLog> metrics_;  // rank 0
  nlohmann::json pending_records_ = nlohmann::json::array();  // records a failed write lost
  dist::Communicator& comm_;
  dist::Range opt_range_;
  TrainObserver* observer_;             // null in production
  std::vector<int64_t> step_windows_;   // this rank's windows of the current step
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> student_, teacher_;
  std::unique_ptr<dist::GradReducer> reducer_;  // calls into student_'s arena
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<FusedLoss> loss_;
  std::unique_ptr<data::TokenDataset> train_data_, val_data_;
  std::unique_ptr<data::Sampler> sampler_;
  std::unique_ptr<data::TeacherCache> cache_;
  int64_t step_ = 0;
  int64_t skipped_ = 0;
  // Rank 0's console state: the last records for the summary, the last progress line.
  nlohmann::json last_record_, last_val_;
  std::string last_checkpoint_;
  Clock::time_point last_progress_ = Clock::now();
  static constexpr std::chrono::seconds kProgressSeconds{30};
  int64_t consecutive_skips_ = 0;  // skipped steps since the last applied one
  std::string teacher_fingerprint_;  // TrainingState::teacher_fingerprint
};

}  // namespace

void train(const Config& config, const TrainOptions& options) {
  std::unique_ptr<dist::Communicator> comm =
      dist::make_communicator(config.dist.backend, config.train.device, config.dist.timeout_s);
  // Only rank 0 talks on the console; every rank's errors still surface below.
  if (comm->rank() != 0) spdlog::set_level(spdlog::level::err);
  try {
    validate(config, comm->world());
    Trainer trainer(config, options, *comm);
    trainer.run();
  } catch (const std::exception& e) {
    if (comm->world() == 1) throw;
    // One rank's error must end the job, not leave the others in a collective.
    std::fprintf(stderr, "kdtrain: rank %d of %d: error: %s\n", comm->rank(), comm->world(), e.what());
    std::fflush(stderr);
    comm->abort(1);
  }
}

}  // namespace kdtrain
