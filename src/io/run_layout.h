// The names of a training run's files, spelled once (docs/training.md):
//   <run>/kdtrain.lock              the run lock (train/run_lock.h)
//   <run>/config.json               the resolved run config
//   <run>/metrics.jsonl             one record per step
//   <run>/checkpoints/latest        the name of the newest complete checkpoint
//   <run>/checkpoints/step_<N>/     a training checkpoint: the model files plus
//                                   trainer_state.json, run_config.json, optimizer files
// Whatever recognises a run or a checkpoint (the output-directory check,
// `verify`, `--resume`) reads these.
#pragma once

namespace kdtrain {

inline constexpr const char* kRunLockFile = "kdtrain.lock";
inline constexpr const char* kRunConfigJson = "config.json";
inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kCheckpointsDir = "checkpoints";
inline constexpr const char* kLatestCheckpointFile = "latest";
inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kRunConfigFile = "run_config.json";

}  // namespace kdtrain
