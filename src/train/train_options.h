// How `kdtrain train` runs a config: where the run goes, what it resumes, and
// the checks a resume may relax. Read by the trainer (train/trainer.h) and the
// checkpointer (train/checkpointer.h).
#pragma once
#include <string>

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

}  // namespace kdtrain
