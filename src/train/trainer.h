// The training loop (SPEC §3), top-down as torchtitan reads:
//   load or resume → while steps remain: train_step → log → validate → checkpoint.
// train_step: zero grads → micro-batches (teacher forward, student forward,
// fused KD+CE loss, backward) → global grad norm → non-finite check → clip →
// AdamW with the scheduled lr → alpha_ma update from the batch's mean alpha.
// Data parallel (docs/distributed.md): under an MPI launcher every rank takes
// its slice of each global batch; gradients are reduce-scattered (ZeRO-1,
// dist.zero1) or all-reduced, loss and alpha sums all-reduced, the norm taken
// over all shards, and the updated master weights all-gathered. Only rank 0
// logs and writes metrics and the model; an error on any rank ends the job.
#pragma once
#include <string>

#include "config/config.h"

namespace kdtrain {

class TrainObserver;  // train/observer.h

struct TrainOptions {
  std::string run_dir;      // where config.json, metrics.jsonl and checkpoints/ go
  std::string resume;       // run dir or checkpoint dir to continue from ("" = fresh)
  std::string config_path;  // for messages only
  TrainObserver* observer = nullptr;  // tests and diagnostics only (train/observer.h)
  bool allow_config_change = false;  // resume even when trajectory-changing keys changed
  bool rewind = false;  // resume a checkpoint older than the run's latest, deleting the newer ones
};

// Runs training to train.steps (or until SIGINT/SIGTERM, which checkpoint and
// return normally). Throws kdtrain::Error on bad input or a non-finite step
// under train.on_nonfinite=stop.
void train(const Config& config, const TrainOptions& options);

}  // namespace kdtrain
