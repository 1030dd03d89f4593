// Training checkpoints (docs/training.md): <run>/checkpoints/step_<8 digits>/ holding
//   config.json + model.safetensors   the model, Hugging Face layout (io/checkpoint_format.h),
//                                     alpha_ma included, loadable by `dump`, `eval`, `export`
//   optimizer.safetensors             one process: AdamW moments exp_avg / exp_avg_sq
//                                     over the whole parameter arena
//   optimizer.rank<r>-of-<W>.safetensors  W > 1 ranks: rank r's part
//                                     dist::shard_range(total, r, W) of the moments, with
//                                     metadata begin / end / total / world_size
//   trainer_state.json                step, skipped steps, sampler position, data fingerprint,
//                                     world size
//   run_config.json                   the resolved run config
// written into a staging directory and renamed into place; then
// <run>/checkpoints/latest (the directory name) is replaced atomically, and only
// then are checkpoints beyond the newest `keep` deleted. A kill at any moment
// leaves `latest` naming a complete checkpoint.
//
// Data parallel: saving is collective. Rank 0 creates the staging directory and
// writes the model (once), the state and the config; every rank writes its
// optimizer file into it; all ranks agree that every write succeeded before
// rank 0 renames the directory into place and moves `latest`. The run directory
// must be on a file system every rank sees. Loading re-shards: each rank reads,
// from whichever files the checkpoint has (flat or any world size), the slices
// overlapping the range its optimizer owns, so a run moves between 4 and 8 ranks.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/communicator.h"
#include "model/model.h"

namespace kdtrain {

struct TrainingState {
  int64_t step = 0;           // optimizer steps completed
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  int64_t consecutive_skips = 0;  // of which in a row, up to this step
  // AdamW moments over arena elements [moments_begin, moments_begin + adam_m.size()).
  int64_t moments_begin = 0;
  std::vector<float> adam_m, adam_v;
  int64_t world_size = 1;     // ranks of the run that wrote it (informational)
  nlohmann::json sampler;
  uint64_t data_fingerprint = 0;
  // What the run distils from, fixed at its start: "model:<hash>" (kd.teacher),
  // "cache:<hash>" (kd.teacher_cache) or "" (no teacher). A resume compares it.
  std::string teacher_fingerprint;
  // Metrics records of steps <= step that could not be written to metrics.jsonl
  // (a full disk); a resume appends them (train/metrics.h).
  nlohmann::json pending_metrics = nlohmann::json::array();
  std::string directory;      // where it was read from
};

// Writes a checkpoint of `model` and `state` under run_dir; returns its directory.
// Collective over `comm`: every rank calls it with its own moments, which must
// cover its dist::shard_range(total, rank, world). Throws on every rank when
// any rank failed (the staging directory is then removed, `latest` unchanged).
std::string save_training_checkpoint(const std::string& run_dir, const Config& config, Model& model,
                                     const TrainingState& state, int64_t keep,
                                     dist::Communicator& comm);
// `path` is a run directory (its `latest` checkpoint; without `latest`, its
// newest checkpoint that verifies) or a checkpoint directory.
// Loads the weights into `model` after checking that the architecture and
// vocabulary match `config`, and the moments for arena range `moments`
// (default: the whole arena) from the checkpoint's optimizer file(s).
TrainingState load_training_checkpoint(const std::string& path, const Config& config, Model& model,
                                       dist::Range moments = {0, -1});
// The optimizer files of checkpoint `dir` (model of `total` parameters, `step`):
// they tile the arena, belong to this step and hold finite moments. Reads no
// tensor into memory (for `kdtrain verify`).
void verify_moments(const std::string& dir, int64_t total, int64_t step);
// The name of a run's newest step_<N> checkpoint directory, whether `latest`
// names it or not; "" when it has none.
std::string newest_checkpoint_name(const std::string& run_dir);
// How far a run got: the newest of the step `latest` names (even one that
// vanished) and its step_<N> directories; 0 for none.
int64_t run_head_step(const std::string& run_dir);
// The run directory a --resume path belongs to.
std::string run_dir_of(const std::string& resume_path);
// <run>/config.json: the resolved config, written atomically.
void write_resolved_config(const Config& config, const std::string& run_dir);

}  // namespace kdtrain
