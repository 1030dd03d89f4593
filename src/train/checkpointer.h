// When and how a run is saved, stopped and continued:
//   - cadence: every checkpoint.interval steps, on the last step, and on a stop;
//   - stop policy: SIGINT/SIGTERM (train/signals.h) or rank 0 failing to write
//     its logs, on any rank, stops every rank after the same step, after a checkpoint;
//   - save ordering: metrics.jsonl is fsynced before the checkpoint, so a
//     checkpoint is never durable ahead of the metrics it follows;
//   - resume: weights, moments, sampler and counters from a checkpoint, after
//     the checks of train/resume_checks.h;
//   - the run lock (train/run_lock.h): rank 0 owns the run directory, and
//     writes it (lock, --rewind, config.json) only in open_run, after every
//     rank's checks and their agreement (train/rank_agreement.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "train/training_checkpoint.h"
#include "train/metrics.h"
#include "train/run_lock.h"
#include "train/run_parts.h"
#include "train/train_step.h"
#include "train/train_options.h"

namespace kdtrain {

// A checkpoint is due after `step` every checkpoint.interval steps (0: never),
// on the last step, and when the run stops.
bool checkpoint_due(const Config& config, int64_t step, bool stopping);

class Checkpointer {
 public:
  Checkpointer(RunParts& parts, const TrainOptions& options) : parts_(parts), options_(options) {}

  // Continues from options.resume: locks an existing run directory (so nothing
  // prunes what is read), loads the weights into the student and the moments
  // into parts.optimizer, checks that the run may go on (data, config, teacher,
  // `latest`) and restores the sampler. Writes nothing. Returns the checkpoint's state.
  TrainingState resume();
  // Everything checked and agreed: rank 0 locks the run directory (creating
  // it), drops the checkpoints --rewind asked to drop, and writes config.json
  // (the config the run goes on with: new, or train.steps extended).
  void open_run();

  // Every rank's vote, after each step: stop when a signal arrived or rank 0
  // failed to write its logs (`write_failed`) on any rank.
  bool stop_agreed(bool write_failed);
  void log_stop(int64_t step) const;

  // Saves the checkpoint of `step`, carrying the metrics records `pending`
  // that metrics.jsonl lacks; returns its directory. Throws when it fails.
  std::string save(int64_t step, const SkipCounts& skips, const nlohmann::json& pending);
  // After the logs failed (logs.failure): still saves (the checkpoint carries
  // the unwritten records), then throws that error, saying where the run
  // stopped and how to go on, or that the checkpoint failed too.
  [[noreturn]] void save_then_stop(int64_t step, const SkipCounts& skips, const LogsAtCheckpoint& logs);
  const std::string& last() const { return last_; }

 private:
  RunParts& parts_;
  TrainOptions options_;
  std::unique_ptr<RunLock> lock_;  // rank 0: this process owns the run directory
  std::string rewind_to_;          // --rewind: the resumed checkpoint, whose newer ones go in open_run
  int64_t rewind_step_ = 0;
  std::string last_;               // the last checkpoint written
};

}  // namespace kdtrain
