// An in-process tiny training run for the trainer's companions (train_step,
// reporter, checkpointer): tiny-llama on pseudo-text, one rank, one thread,
// built by RunParts::build() exactly as `kdtrain train` builds it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/presets.h"
#include "dist/communicator.h"
#include "model/init.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"
#include "train/run_parts.h"

namespace kdtrain::testing {

inline Config tiny_run_config(const std::string& shard, AttentionVariant variant = AttentionVariant::baseline) {
  Config c;
  c.model = model_preset("tiny-llama");
  c.model.preset = "tiny-llama";
  c.attention.variant = variant;
  c.data.train = {shard};
  c.train.seq_len = 32;
  c.train.global_batch = 4;
  c.train.micro_batch = 2;
  c.train.steps = 6;
  c.train.threads = 1;
  c.schedule.warmup = 1;
  return c;
}

// The steps in 1..steps at which `due` holds (the cadence tests).
template <typename Due>
std::vector<int64_t> due_steps(int64_t steps, Due&& due) {
  std::vector<int64_t> out;
  for (int64_t s = 1; s <= steps; ++s)
    if (due(s)) out.push_back(s);
  return out;
}

struct TinyRun {
  TempDir tmp{"companions"};
  std::string shard = text_shard(tmp.path, "train.bin", 8000, 5);
  dist::SingleCommunicator comm;
  std::unique_ptr<RunParts> parts;

  explicit TinyRun(AttentionVariant variant = AttentionVariant::baseline) { reset(tiny_run_config(shard, variant)); }
  // Rebuilds the parts from `config`, with freshly initialised weights.
  void reset(Config config) {
    validate(config);
    parts = std::make_unique<RunParts>(config, comm, (tmp.path / "run").string());
    parts->build();
    Model& s = *parts->student;
    s.set_params(init_params(s.layout(), config.model, config.attention, config.train.seed));
  }
};

}  // namespace kdtrain::testing
