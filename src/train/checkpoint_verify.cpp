#include "train/checkpoint_verify.h"

#include <algorithm>
#include <filesystem>

#include "config/config.h"
#include "core/error.h"
#include "core/paths.h"
#include "io/checkpoint_format.h"
#include "io/checksums.h"
#include "io/file_util.h"
#include "io/model_dir.h"
#include "io/output_dir.h"
#include "io/run_head.h"
#include "io/run_layout.h"
#include "io/safetensors.h"
#include "model/param_layout.h"
#include "train/training_checkpoint.h"
#include "train/trainer_state.h"

namespace kdtrain {

namespace fs = std::filesystem;

namespace {

// config.json and the weights: shapes against the layout, every value finite.
int64_t verify_weights(const std::string& dir, int64_t* total) {
  ModelConfig model;
  AttentionConfig attention;
  io::read_hf_config((fs::path(dir) / "config.json").string(), &model, &attention);
  const ParamLayout layout = make_param_layout(model, attention);
  *total = layout.total;
  const io::WeightsSummary summary = io::check_model_weights(dir, layout);
  int64_t tensors = 0;
  for (const std::string& path : summary.files) {
    const io::SafetensorsFile file(path);
    for (const std::string& name : file.names()) {
      file.require_finite(name);
      ++tensors;
    }
  }
  return tensors;
}

}  // namespace

VerifiedCheckpoint verify_checkpoint(const std::string& given) {
  const std::string dir = normal_path(given);
  const std::string why = not_a_regular_file(dir);
  KD_CHECK(why.rfind("is a directory", 0) == 0, dir, ": ", why.empty() ? "is a file, not a checkpoint directory" : why);
  VerifiedCheckpoint v;
  v.dir = dir;
  // What a resume would take for a training checkpoint (its name and place
  // included) must verify as one: a lost trainer_state.json is a failure.
  v.training = io::dir_content(dir) == io::DirContent::training_checkpoint;
  v.checksummed = io::has_checksums(dir);
  // A training checkpoint always carries its checksums; a model may (kdtrain init) or not (Hugging Face).
  if (v.training || v.checksummed) {
    const io::ChecksumReport sums = io::verify_checksums(dir);
    v.files = sums.files;
    v.bytes = sums.bytes;
  }
  int64_t total = 0;
  v.tensors = verify_weights(dir, &total);
  if (!v.training) return v;
  const std::string state_path = (fs::path(dir) / kTrainerStateFile).string();
  TrainingState state;
  parse_trainer_state(read_json_file(state_path), state_path, &state);
  int64_t dir_step = 0;
  KD_CHECK(parse_step_name(fs::path(dir).filename().string(), &dir_step) && dir_step == state.step, state_path,
           ": step ", state.step, " does not match its checkpoint directory ", fs::path(dir).filename().string());
  v.step = state.step;
  const std::string run_config = (fs::path(dir) / "run_config.json").string();
  Config config;
  apply_json(config, read_json_file(run_config), run_config);
  verify_moments(dir, total, state.step);
  return v;
}

RunVerification verify_run(const std::string& given) {
  const std::string run_dir = normal_path(given);
  RunVerification r;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  KD_CHECK(fs::is_directory(root), run_dir, ": not a run directory (no checkpoints/)");
  std::vector<std::pair<int64_t, std::string>> dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    int64_t step = 0;
    if (entry.is_directory() && parse_step_name(entry.path().filename().string(), &step))
      dirs.emplace_back(step, entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  // A live run prunes old checkpoints while this reads them. Pruning renames a
  // checkpoint aside in one step (io::remove_dir_atomically), so one that fails
  // and is gone afterwards was pruned, not corrupt.
  auto check = [&](const std::string& dir) {
    try {
      r.good.push_back(verify_checkpoint(dir));
    } catch (const std::exception& e) {
      if (fs::exists(dir)) r.bad.emplace_back(dir, e.what());
      else r.pruned.push_back(dir);
    }
  };
  for (const auto& [step, dir] : dirs) check(dir);
  if (dirs.empty() && !fs::exists(root / kLatestCheckpointFile)) {
    r.resume_error = root.string() + " holds no checkpoint yet";
    return r;
  }
  // What a resume takes is read last and may be a checkpoint written meanwhile
  // (verified here too), or one pruned since it was read (then it is read again).
  for (int attempt = 0; attempt < 5; ++attempt) {
    try {
      const io::ResumePoint point = io::resume_point_of_run(run_dir);
      const std::string& resumed = point.checkpoint;
      auto named = [&](const std::string& dir) { return fs::exists(dir) && fs::equivalent(dir, resumed); };
      bool seen = std::any_of(r.bad.begin(), r.bad.end(), [&](const auto& b) { return named(b.first); });
      for (const VerifiedCheckpoint& v : r.good) seen = seen || named(v.dir);
      if (!seen) check(resumed);
      if (std::any_of(r.good.begin(), r.good.end(), [&](const VerifiedCheckpoint& v) { return named(v.dir); })) {
        r.resume_from = resumed;
        r.resume_note = point.note;
        r.resume_error.clear();
        return r;
      }
      r.resume_error = (point.note.empty() ? "checkpoints/latest names " : "--resume would take ") + resumed +
                       ", which did not verify";
      if (fs::exists(resumed)) return r;
    } catch (const std::exception& e) {
      r.resume_error = e.what();  // read again: `latest` may have moved past a pruned checkpoint
    }
  }
  return r;
}

}  // namespace kdtrain
