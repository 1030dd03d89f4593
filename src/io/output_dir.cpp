#include "io/output_dir.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/paths.h"
#include "io/model_dir.h"
#include "io/run_layout.h"

namespace kdtrain::io {

namespace fs = std::filesystem;

namespace {

std::set<std::string> entries_of(const fs::path& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.insert(it->path().filename().string());
  return names;
}

bool is_step_under_checkpoints(const fs::path& dir) {
  int64_t step = 0;
  const fs::path p(normal_path(fs::absolute(dir).string()));
  return parse_step_name(p.filename().string(), &step) && p.parent_path().filename() == kCheckpointsDir;
}

const char* kind_text(DirContent c) {
  switch (c) {
    case DirContent::absent: return "does not exist";
    case DirContent::empty: return "an empty directory";
    case DirContent::run: return "a training run directory";
    case DirContent::training_checkpoint: return "a checkpoint of a training run";
    case DirContent::model: return "a model checkpoint";
    case DirContent::other: return "a directory of other files";
  }
  return "?";
}

}  // namespace

DirContent dir_content(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (!fs::exists(st)) return DirContent::absent;
  if (!fs::is_directory(fs::status(dir, ec))) return DirContent::other;
  const std::set<std::string> names = entries_of(dir);
  if (names.count(kTrainerStateFile) || names.count(kRunConfigFile) || is_step_under_checkpoints(dir))
    return DirContent::training_checkpoint;
  if (names.count("config.json") && (names.count("model.safetensors") || names.count("model.safetensors.index.json")))
    return DirContent::model;
  if (names.count(kRunLockFile) || names.count(kCheckpointsDir) || names.count(kMetricsFile)) return DirContent::run;
  return names.empty() ? DirContent::empty : DirContent::other;
}

std::string describe_dir(const std::string& dir) {
  const DirContent c = dir_content(dir);
  std::error_code ec;
  if (c == DirContent::other && !fs::is_directory(dir, ec)) return "a file, not a directory";
  std::string text = kind_text(c);
  const std::set<std::string> names = entries_of(dir);
  if (names.empty()) return text;
  std::string list;
  int shown = 0;
  for (const std::string& n : names) {
    if (shown++ == 4) {
      list += ", ...";
      break;
    }
    list += (list.empty() ? "" : ", ") + n;
  }
  return text + " (" + list + ")";
}

void claim_output_dir(const std::string& dir, const OutputSpec& spec) {
  KD_CHECK(!dir.empty(), spec.flag, ": no directory given");
  const DirContent c = dir_content(dir);
  if (c == DirContent::absent || c == DirContent::empty) return;
  const std::string holds = describe_dir(dir);
  KD_CHECK(c != DirContent::run && c != DirContent::training_checkpoint, spec.flag, " ", dir, ": is ", holds,
           "; this command never writes into a training run or its checkpoints, --force or not. Choose another ",
           spec.flag);
  std::error_code ec;
  KD_CHECK(fs::is_directory(dir, ec), spec.flag, " ", dir, ": exists and is not a directory");
  if (c == DirContent::other) {
    const std::set<std::string> names = entries_of(dir);
    const bool own = std::all_of(names.begin(), names.end(), [&](const std::string& n) {
      return std::find(spec.own_files.begin(), spec.own_files.end(), n) != spec.own_files.end();
    });
    if (own) return;  // this command's own earlier output, replaced
  }
  KD_CHECK(c != DirContent::model || spec.force, spec.flag, " ", dir, ": is ", holds,
           " (a teacher or another model?); pass --force to replace it, or choose another ", spec.flag);
  KD_CHECK(spec.force, spec.flag, " ", dir, ": exists and is not empty: ", holds,
           "; pass --force to write into it anyway, or choose another ", spec.flag);
}

void claim_run_dir(const std::string& dir, bool branch, const std::string& resumed) {
  const DirContent c = dir_content(dir);
  if (c == DirContent::absent || c == DirContent::empty) return;
  std::error_code ec;
  KD_CHECK(c == DirContent::run, "--run-dir ", dir, ": is ", describe_dir(dir),
           ", not a run directory; train writes a run only into a new or empty directory or a run "
           "directory of its own. Choose another --run-dir");
  if (!branch) return;
  const fs::path checkpoints = fs::path(dir) / kCheckpointsDir;
  bool history = fs::exists(checkpoints / kLatestCheckpointFile, ec);
  for (const std::string& name : entries_of(checkpoints)) {
    int64_t step = 0;
    history = history || parse_step_name(name, &step);
  }
  const fs::path metrics = fs::path(dir) / kMetricsFile;
  history = history || (fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0);
  KD_CHECK(!history, "--run-dir ", dir, " already holds another run (", describe_dir(dir), "); resuming ", resumed,
           " into it would mix the two runs' checkpoints and metrics. Choose a new --run-dir, or resume ", dir,
           " itself with --resume ", dir);
}

void claim_output_file(const std::string& path, const std::string& flag) {
  const std::string parent = fs::path(normal_path(path)).parent_path().string();
  const DirContent c = dir_content(parent.empty() ? "." : parent);
  KD_CHECK(c != DirContent::training_checkpoint && c != DirContent::model, flag, " ", path,
           ": its directory is ", describe_dir(parent.empty() ? "." : parent),
           "; kdtrain never adds files to a checkpoint (its checksums would no longer match). Choose another ", flag);
}

}  // namespace kdtrain::io
