// AdamW with decoupled weight decay (docs/training.md) over the model's parameter arena.
// Weight decay applies to matrices and embeddings only (ParamSpec::decayed):
// not to norms, biases, sinks; alpha_ma is a buffer and never updated here.
// The optimizer owns the elements [shard_begin, shard_end) of the arena, so
// data-parallel ZeRO-1 gives each rank a slice and its moments only for that slice.
// Per step it costs two backend calls: one sum of squares over the shard (one
// device reduction, one host read) and one multi-tensor AdamW over its segments.
#pragma once
#include <cstdint>
#include <vector>

#include "config/config.h"
#include "model/model.h"

namespace kdtrain {

class AdamW {
 public:
  AdamW(Model& model, const OptimizerConfig& config, int64_t shard_begin = 0,
        int64_t shard_end = -1);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Sum of squared gradients over this shard (fp64, deterministic order).
  double grad_sum_squares();
  // One update of the shard with learning rate lr; gradients are multiplied by clip_scale.
  void step(float lr, float clip_scale);
  int64_t steps_taken() const { return step_; }

  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }
  // Moments of the shard, on the host, for checkpoints.
  std::vector<float> first_moment();
  std::vector<float> second_moment();
  void set_state(const std::vector<float>& m, const std::vector<float>& v, int64_t steps);

 private:
  Model& model_;
  OptimizerConfig config_;
  int64_t begin_, end_;
  std::vector<ParamSegment> segments_;  // trainable ranges, relative to begin_, sorted
  float* m_ = nullptr;  // (end - begin)
  float* v_ = nullptr;
  int64_t step_ = 0;
};

// Clip factor for global-norm clipping: min(1, max_norm / norm); 1 when disabled.
float clip_scale(double grad_norm, double max_norm);

}  // namespace kdtrain
