// Training checkpoints (SPEC §3): <run>/checkpoints/step_<8 digits>/ holding
//   config.json + model.safetensors   the model, Hugging Face layout (io/checkpoint_format.h),
//                                     alpha_ma included, loadable by `dump`, `eval`, `export`
//   optimizer.safetensors             AdamW moments exp_avg / exp_avg_sq over the parameter arena
//   trainer_state.json                step, skipped steps, sampler position, data fingerprint
//   run_config.json                   the resolved run config
// written into a staging directory and renamed into place; then
// <run>/checkpoints/latest (the directory name) is replaced atomically, and only
// then are checkpoints beyond the newest `keep` deleted. A kill at any moment
// leaves `latest` naming a complete checkpoint.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/model.h"

namespace kdtrain {

// A model checkpoint read into its own layout's arena.
struct LoadedModel {
  ModelConfig model;
  AttentionConfig attention;
  std::vector<float> params;
};
LoadedModel load_model_dir(const std::string& dir);
// The arena for `target` from a loaded model: the architectures and variants must
// agree tensor for tensor, else an error naming the key or tensor and `source`.
std::vector<float> params_for(const LoadedModel& loaded, const Model& target,
                              const std::string& source);

struct TrainingState {
  int64_t step = 0;           // optimizer steps completed
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  std::vector<float> adam_m, adam_v;  // over the whole arena
  nlohmann::json sampler;
  uint64_t data_fingerprint = 0;
  std::string directory;      // where it was read from
};

// Writes a checkpoint of `model` and `state` under run_dir; returns its directory.
std::string save_training_checkpoint(const std::string& run_dir, const Config& config, Model& model,
                                     const TrainingState& state, int64_t keep);
// `path` is a run directory (its `latest` checkpoint) or a checkpoint directory.
// Loads the weights into `model` after checking that the architecture and
// vocabulary match `config`.
TrainingState load_training_checkpoint(const std::string& path, const Config& config, Model& model);
// The run directory a --resume path belongs to.
std::string run_dir_of(const std::string& resume_path);
// <run>/config.json: the resolved config, written atomically.
void write_resolved_config(const Config& config, const std::string& run_dir);

}  // namespace kdtrain
