// What a resume checks before it continues a run, beyond what
// loading the checkpoint checks (checksums, field ranges, shapes, finite values):
//   - the state agrees with the run it came from: the sampler has drawn exactly
//     step x global_batch windows of this data;
//   - nothing that changes the trajectory changed since the checkpoint (its
//     run_config.json): the optimizer, schedule, batch, seed, model,
//     attention, distillation settings, device — and the teacher's weights, by
//     fingerprint. Operational keys (checkpoint/log/eval intervals, threads,
//     validation data, timeouts, paths whose content is fingerprinted) and
//     train.steps (extending a run) may change.
//     --allow-config-change lets the listed changes through, on purpose;
//   - a checkpoint older than the run's `latest` is not resumed into the same run
//     directory (that would rewind the run and leave `latest` ahead of it)
//     unless --rewind asks for exactly that.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "train/training_checkpoint.h"

namespace kdtrain {

// Keys of `before` and `now` that differ and change the trajectory, as
// "train.global_batch: 8 -> 16"; empty when the resume continues the same run.
std::vector<std::string> trajectory_changes(const Config& before, const Config& now);

struct ResumeContext {
  std::string checkpoint_dir;   // the checkpoint being resumed
  std::string run_dir;          // where the resumed run writes
  int64_t num_windows = 0;      // of data.train now
  std::string teacher_fingerprint;  // of the teacher now ("" without one)
  bool allow_config_change = false;
  bool rewind = false;
  bool owns_run_dir = true;  // rank 0: the one process that checks and moves `latest`
};

// Throws naming the checkpoint and what differs. Writes nothing: returns true
// when the run directory holds newer checkpoints that --rewind (ctx.rewind) asks
// to drop, which rewind_run then does once every rank agrees.
bool check_resume(const Config& now, const TrainingState& state, const ResumeContext& ctx);
// Deletes the checkpoints of run_dir after `step` and points `latest` at
// `checkpoint_dir` (or at nothing, when that lives in another run).
void rewind_run(const std::string& run_dir, const std::string& checkpoint_dir, int64_t step);

// value flattened to "a.b.c" -> leaf, for listing what differs between configs.
void flatten_json(const nlohmann::json& value, const std::string& path, std::map<std::string, nlohmann::json>* out);

}  // namespace kdtrain
