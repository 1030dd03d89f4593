// The training loop (docs/training.md), top-down as torchtitan reads:
//   build the run's parts (train/run_parts.h) → start fresh or resume → while
//   steps remain: step → report → checkpoint where due.
// Three companions do the work, each with its own tests:
//   train/train_step.h    one optimizer step: zero, micro-batches, reduce across
//                         ranks, norm, non-finite guard, optimizer, schedule;
//   train/reporter.h      metrics.jsonl, the progress line, the validation
//                         cadence and the summary (rank 0);
//   train/checkpointer.h  the checkpoint cadence, the stop policy, the save
//                         ordering, resume and the run lock.
// Data parallel (docs/distributed.md): under an MPI launcher every rank runs
// this loop on its slice of each global batch; only rank 0 logs and writes
// metrics and the model; an error on any rank ends the job.
#pragma once
#include "config/config.h"
#include "train/train_options.h"

namespace kdtrain {

// Runs training to train.steps (or until SIGINT/SIGTERM, which checkpoint and
// return normally). Throws kdtrain::Error on bad input or a non-finite step
// under train.on_nonfinite=stop.
void train(const Config& config, const TrainOptions& options);

}  // namespace kdtrain
