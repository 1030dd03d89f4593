// One optimizer step (docs/training.md): zero the gradients → micro-batches
// (each one run_micro_batch of model/micro_step.h: teacher forward, student
// forward, fused KD+CE loss, backward) → reduce across ranks → global gradient
// norm → non-finite guard → clip → AdamW with the scheduled lr → the variant's
// end of step (model/variant_state.h: alpha_ma's running mean). `kdtrain bench`
// times this same step, on random tokens, through the observer's phase hook.
//
// Data parallel (docs/distributed.md): every rank draws the same global batch
// and keeps its slice; gradients are reduce-scattered (ZeRO-1) or all-reduced
// bucket by bucket during the backward, loss sums all-reduced, the norm taken
// over all shards and the updated master weights all-gathered, so every rank
// takes the same non-finite decision and holds the same weights.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dist/grad_reducer.h"
#include "model/cached_teacher_loss.h"
#include "model/loss.h"
#include "train/run_parts.h"

namespace kdtrain {

class TrainObserver;  // train/observer.h

struct StepResult {
  LossSums sums;        // over all ranks' tokens of the step
  double loss = 0.0;    // the optimised loss: weight*KD + (1-weight)*CE, or CE without a teacher
  double grad_norm = 0.0;
  double lr = 0.0;
  bool applied = true;  // false: a non-finite step skipped under train.on_nonfinite=skip
  std::vector<double> alpha_mean;  // (L*H) the step's mean alpha, affine variants only
};

// The non-finite policy's counters, carried by checkpoints.
struct SkipCounts {
  int64_t skipped = 0;      // non-finite steps skipped so far
  int64_t consecutive = 0;  // of which in a row, up to the last step
};

// Where a step's micro-batches come from, by window id: the inputs and targets
// (B*T each, host), and with a teacher cache the windows' cached rows in order;
// `next` are the windows the step reads after these, for a source that reads
// ahead. Training reads parts.train_data and parts.cache_reader (dataset_batches);
// `kdtrain bench` gives random tokens (and reads a synthetic cache through the
// same reader, cache_reader_rows).
using CachedRowsSource =
    std::function<CachedRows(const std::vector<int64_t>& windows, const std::vector<int64_t>& next)>;
struct BatchSource {
  std::function<void(const std::vector<int64_t>& windows, int32_t* inputs, int32_t* targets)> tokens;
  CachedRowsSource cached_rows;  // empty: no cache
};
BatchSource dataset_batches(const RunParts& parts);
// The rows from parts.cache_reader, taken for these windows and the next ones
// requested (empty without a reader): training's, and `kdtrain bench --teacher-cache`'s.
CachedRowsSource cache_reader_rows(const RunParts& parts);

class TrainStep {
 public:
  // Builds the gradient reducer and hooks it to the student's backward.
  // `parts.optimizer` must be set before the first run(). `source`: where the
  // micro-batches come from (empty: dataset_batches(parts)).
  TrainStep(RunParts& parts, TrainObserver* observer, BatchSource source = {});

  // Computes optimizer step `step` (1-based) and applies it, unless its loss or
  // gradient norm is not finite: then train.on_nonfinite=stop throws and skip
  // counts it (throwing after train.max_consecutive_skips in a row).
  StepResult run(int64_t step);

  SkipCounts& skips() { return skips_; }
  const dist::GradReducer& reducer() const { return *reducer_; }

 private:
  // KD terms exist with an online teacher or cached rows.
  bool has_teacher() const { return parts_.teacher != nullptr || static_cast<bool>(source_.cached_rows); }
  LossSums micro_batches(int64_t step, const std::vector<int64_t>& windows);
  void reduce_across_ranks(LossSums& sums);
  double global_grad_norm();
  // Throws under on_nonfinite=stop or after too many skips in a row.
  void skip_nonfinite(int64_t step, double loss, double grad_norm);
  void apply(const StepResult& r);

  RunParts& parts_;
  TrainObserver* observer_;  // null in production
  BatchSource source_;
  std::unique_ptr<dist::GradReducer> reducer_;  // calls into the student's arena
  SkipCounts skips_;
  int64_t step_ = 0;  // the step being computed, for the observer's hooks
  std::vector<int64_t> windows_;  // this rank's windows of the step
};

}  // namespace kdtrain
