// Which checkpoint of a run directory counts (docs/reliability.md, "A run killed
// between a checkpoint and `latest`"): `--resume RUN`, `kdtrain verify RUN` and
// the commands that read a run's model (eval, analyze, dump, export) all take
// the one resume_point_of_run names, so a run never gives two answers.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kdtrain::io {

// "step_<8 digits>".
std::string checkpoint_dir_name(int64_t step);

// The checkpoint directories under a run's checkpoints/ folder, oldest first.
// Only real directories named step_<digits> count: staging ("*.tmp.<pid>") and
// moved-aside ("*.old.<pid>") leftovers of a killed writer, and links, are not
// checkpoints.
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& checkpoints_dir);

// The checkpoint `--resume RUN` continues from: the one `latest` names, or, in a
// run stopped before its first `latest` or between a checkpoint and `latest`,
// the newest checkpoint that verifies, with `note` saying why ("" when `latest`
// names it). Throws as --resume does when `latest` names a checkpoint that
// vanished (naming the newest that verifies and the --rewind that continues
// from it) or no checkpoint verifies.
struct ResumePoint {
  std::string checkpoint, note;
};
ResumePoint resume_point_of_run(const std::string& run_dir);

}  // namespace kdtrain::io
