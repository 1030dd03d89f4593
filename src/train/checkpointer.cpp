#include "train/checkpointer.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/error.h"
#include "train/resume_checks.h"
#include "train/signals.h"

namespace kdtrain {

bool checkpoint_due(const Config& config, int64_t step, bool stopping) {
  const int64_t interval = config.checkpoint.interval;
  return (interval > 0 && step % interval == 0) || step == config.train.steps || stopping;
}

void Checkpointer::open_run() {
  if (!parts_.is_root()) return;
  if (!lock_) lock_ = std::make_unique<RunLock>(parts_.run_dir);
  if (!rewind_to_.empty()) rewind_run(parts_.run_dir, rewind_to_, rewind_step_);
  write_resolved_config(parts_.config, parts_.run_dir);
}

TrainingState Checkpointer::resume() {
  const Config& config = parts_.config;
  const data::TokenDataset& data = *parts_.train_data;
  // An existing run directory is locked before reading, so no other process
  // writes the checkpoints being read; a new one is created only in open_run.
  if (parts_.is_root() && std::filesystem::exists(parts_.run_dir))
    lock_ = std::make_unique<RunLock>(parts_.run_dir);
  TrainingState state = load_training_checkpoint(options_.resume, config, *parts_.student, parts_.opt_range);
  parts_.optimizer->set_state(state.adam_m, state.adam_v, state.step);
  KD_CHECK(state.data_fingerprint == data.fingerprint(), "--resume ", options_.resume,
           ": the training data differs from the checkpoint's (fingerprint ", state.data_fingerprint, " vs ",
           data.fingerprint(), ")");
  const ResumeContext ctx{state.directory,       parts_.run_dir,          data.num_windows(),
                          parts_.teacher_fingerprint, options_.allow_config_change, options_.rewind,
                          parts_.is_root()};
  if (check_resume(config, state, ctx)) {
    rewind_to_ = state.directory;
    rewind_step_ = state.step;
  }
  parts_.sampler->from_json(state.sampler, state.directory);
  spdlog::info("resumed from {} at step {} (written by {} rank(s), now {})", state.directory, state.step,
               state.world_size, parts_.comm.world());
  return state;
}

// A signal, or rank 0 failing to write its logs, may come at different steps
// on different ranks: all ranks vote after every step and stop together.
bool Checkpointer::stop_agreed(bool write_failed) { return parts_.comm.any(stop_requested() || write_failed); }

void Checkpointer::log_stop(int64_t step) const {
  if (stop_signal() != 0)
    spdlog::warn("signal {} received: checkpoint written at step {}, exiting", stop_signal(), step);
  else
    spdlog::warn("another rank received a stop signal: checkpoint written at step {}, exiting", step);
}

void Checkpointer::save_then_stop(int64_t step, const SkipCounts& skips, const LogsAtCheckpoint& logs) {
  std::string failure = "the logs failed";
  try {
    std::rethrow_exception(logs.failure);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  try {
    save(step, skips, logs.pending);
  } catch (const std::exception& e) {
    fail(failure, "; the checkpoint attempted after it failed too (", e.what(),
         "); the last checkpoint written before is intact");
  }
  fail(failure, "; stopped after writing a checkpoint at step ", step,
       " (it keeps the unwritten record); free space or fix the file, then resume with --resume ",
       parts_.run_dir);
}

std::string Checkpointer::save(int64_t step, const SkipCounts& skips, const nlohmann::json& pending) {
  TrainingState state;
  state.pending_metrics = pending;
  state.step = step;
  state.skipped_steps = skips.skipped;
  state.consecutive_skips = skips.consecutive;
  state.teacher_fingerprint = parts_.teacher_fingerprint;
  state.moments_begin = parts_.opt_range.begin;
  state.adam_m = parts_.optimizer->first_moment();
  state.adam_v = parts_.optimizer->second_moment();
  state.sampler = parts_.sampler->to_json();
  state.data_fingerprint = parts_.train_data->fingerprint();
  last_ = save_training_checkpoint(parts_.run_dir, parts_.config, *parts_.student, state,
                                   parts_.config.checkpoint.keep, parts_.comm);
  spdlog::info("checkpoint: {}", last_);
  return last_;
}

}  // namespace kdtrain
