// What a run tells (rank 0 only; the other ranks hold the same reduced values
// and stay silent): the set-up lines, one metrics.jsonl record per step with
// validation where due (train/metrics.h), the progress line, the attention
// paths and memory after the first and the last step, and the summary.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "train/metrics.h"
#include "train/run_parts.h"
#include "train/train_step.h"

namespace kdtrain {

using Clock = std::chrono::steady_clock;

// The cadences, in 1-based steps of a run of train.steps.
// Progress: every log.interval steps, on the first step this process runs
// (`first_step` + 1), on the last, and at least every `quiet` of silence.
bool progress_due(const Config& config, int64_t step, int64_t first_step, Clock::duration since_last,
                  Clock::duration quiet);
// Validation: every eval.interval steps (0: never) and on the last step.
bool validation_due(const Config& config, int64_t step);
// Whether step logs attn_logit_mean_abs_all at log.logit_mean_interval (validation steps always do).
bool logit_mean_due(const Config& config, int64_t step);

class Reporter {
 public:
  static constexpr std::chrono::seconds kProgressSeconds{30};

  explicit Reporter(RunParts& parts) : parts_(parts) {}

  // The set-up lines: student, teacher, data, validation plan, data parallelism.
  void log_setup(const dist::GradReducer& reducer) const;
  // A resumed run that already reached train.steps: say so, and how to go on.
  void log_already_finished(const std::string& resume, int64_t step) const;

  // Opens metrics.jsonl on rank 0 for a run continuing after `first_step` steps;
  // `pending` are the records a checkpoint carried because writing them failed.
  void start(int64_t first_step, const nlohmann::json& pending);
  // Rank 0: the record of step `step` (`seconds` of compute, `skipped` so far) and
  // the console lines due. A record that cannot be written is kept (pending
  // records) and the failure remembered: write_failed() then says so, and the
  // run stops after a checkpoint, which carries the record.
  void report(int64_t step, const StepResult& r, double seconds, int64_t skipped);
  bool write_failed() const { return failure_ != nullptr; }
  // Before a checkpoint: fsyncs metrics.jsonl (rank 0), so a checkpoint is never
  // durable ahead of its metrics, and returns what the checkpoint must carry.
  LogsAtCheckpoint flush();
  // Records not yet in metrics.jsonl.
  const nlohmann::json& pending_records() const { return pending_; }
  // The checkpoint the summary names.
  void set_checkpoint(const std::string& dir) { last_checkpoint_ = dir; }
  // Closes metrics.jsonl (unless `stopped`) and writes the summary lines.
  void finish(int64_t step, bool stopped);

  // The record of a step, without validation (exposed for tests).
  nlohmann::json step_record(int64_t step, const StepResult& r, double seconds, int64_t skipped) const;
  // Adds val_ce, val_kd, val_loss (and val_soft_ce with an online teacher): the
  // mean loss over the first eval.batches micro-batches of data.val, in order.
  void add_validation(nlohmann::json& record);

 private:
  void log_backend_report() const;

  RunParts& parts_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0, from start()
  nlohmann::json pending_ = nlohmann::json::array();
  std::exception_ptr failure_;  // the first failed write or sync of metrics.jsonl
  int64_t first_step_ = 0;
  Clock::time_point started_ = Clock::now(), last_progress_ = Clock::now();
  nlohmann::json last_record_, last_val_;  // for the summary
  std::string last_checkpoint_;
};

}  // namespace kdtrain
