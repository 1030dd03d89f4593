// Which checkpoint of a run a resume, `verify` and the commands that read a run
// take (io/run_head.h).
#include "io/run_head.h"

#include <algorithm>

#include "core/error.h"
#include "io/checksums.h"
#include "io/model_dir.h"
#include "io/run_layout.h"

namespace kdtrain::io {

namespace fs = std::filesystem;

std::string checkpoint_dir_name(int64_t step) {
  const std::string digits = std::to_string(step);
  return "step_" + std::string(digits.size() < 8 ? 8 - digits.size() : 0, '0') + digits;
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  if (!fs::exists(root)) return dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    int64_t step = 0;
    if (entry.is_directory() && !entry.is_symlink() && parse_step_name(entry.path().filename().string(), &step))
      dirs.emplace_back(step, entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

namespace {

// The newest checkpoint of a run whose files all verify against their
// checksums, "" when none does; `skipped` lists the newer ones that did not.
std::string newest_verified(const fs::path& root, std::string* skipped) {
  const auto all = list_checkpoints(root);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      io::verify_checksums(it->second.string());
      if (fs::exists(it->second / kTrainerStateFile)) return it->second.string();
      *skipped += "\n  " + it->second.string() + ": no " + kTrainerStateFile;
    } catch (const std::exception& e) {
      *skipped += "\n  " + std::string(e.what());
    }
  }
  return "";
}

// A run killed after its checkpoint moved into place and before `latest` did: the
// newest checkpoint that verifies when it is newer than the one `latest` names
// (`newest` is newest_verified's answer), else "". A step_<N> directory appears
// only whole, by rename, so that one is the run's true head.
std::string newer_than_latest(int64_t named, const std::string& newest) {
  int64_t step = 0;
  if (newest.empty() || !parse_step_name(fs::path(newest).filename().string(), &step) || step <= named) return "";
  return newest;
}

}  // namespace

ResumePoint resume_point_of_run(const std::string& run) {
  const fs::path root = fs::path(run) / kCheckpointsDir;
  const bool has_latest = fs::exists(root / kLatestCheckpointFile);
  if (has_latest) {
    const int64_t named = latest_named_step(run);
    const auto all = list_checkpoints(root);
    if (std::any_of(all.begin(), all.end(), [&](const auto& c) { return c.first == named; }) ||
        fs::exists(root / checkpoint_dir_name(named))) {
      const std::string named_dir = latest_checkpoint(run);  // which refuses a `latest` naming anything but a checkpoint
      if (all.empty() || all.back().first <= named) return {named_dir, ""};
      std::string skipped;
      const std::string newer = newer_than_latest(named, newest_verified(root, &skipped));
      if (newer.empty()) return {named_dir, ""};
      return {newer, "checkpoints/" + std::string(kLatestCheckpointFile) + " names " + checkpoint_dir_name(named) + ", but " + newer +
                         " is complete (a run stopped between writing it and moving " + kLatestCheckpointFile + ")"};
    }
    std::string skipped;
    const std::string newest = newest_verified(root, &skipped);
    fail((root / kLatestCheckpointFile).string(), " names ", checkpoint_dir_name(named), ", which no longer exists. ",
         newest.empty() ? "No other checkpoint of the run verifies" + skipped
                        : "The newest checkpoint that verifies is " + newest + "; continue from it with --resume " +
                              newest + " --rewind");
  }
  KD_CHECK(!list_checkpoints(root).empty(), "--resume ", run, ": neither a checkpoint directory (no ", kTrainerStateFile,
           ") nor a run directory (no checkpoints/", kLatestCheckpointFile, ")");
  std::string skipped;
  const std::string newest = newest_verified(root, &skipped);
  KD_CHECK(!newest.empty(), "--resume ", run, ": checkpoints/", kLatestCheckpointFile, " is missing and no checkpoint verifies:",
           skipped);
  return {newest, "checkpoints/" + std::string(kLatestCheckpointFile) + " is missing (a run stopped before writing it); " +
                      newest + " is the newest checkpoint that verifies" +
                      (skipped.empty() ? "" : " (newer ones did not:" + skipped + ")")};
}

}  // namespace kdtrain::io
