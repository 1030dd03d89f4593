#include "io/output_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/paths.h"
#include "io/file_util.h"
#include "io/model_dir.h"
#include "io/output_manifest.h"
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

bool is_link(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// `latest` or a step_<N> directory: what only a run's checkpoints/ folder holds.
bool holds_checkpoints(const fs::path& dir) {
  for (const std::string& name : entries_of(dir)) {
    int64_t step = 0;
    if (name == kLatestCheckpointFile || (parse_step_name(name, &step) && fs::is_directory(dir / name))) return true;
  }
  return false;
}

bool is_step_under_checkpoints(const fs::path& dir) {
  int64_t step = 0;
  const fs::path p(normal_path(fs::absolute(dir).string()));
  return parse_step_name(p.filename().string(), &step) && p.parent_path().filename() == kCheckpointsDir;
}

// Where the OS leads: every link in the existing part of the path followed.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(normal_path(path), ec);
  const fs::path p = fs::weakly_canonical(abs, ec);
  return ec ? abs : p;
}

const char* kind_text(DirContent c) {
  switch (c) {
    case DirContent::absent: return "does not exist";
    case DirContent::empty: return "an empty directory";
    case DirContent::run: return "a training run directory";
    case DirContent::run_checkpoints: return "the checkpoints folder of a training run";
    case DirContent::training_checkpoint: return "a checkpoint of a training run";
    case DirContent::model: return "a model checkpoint";
    case DirContent::other: return "a directory of other files";
  }
  return "?";
}

bool written_by_train_only(DirContent c) {
  return c == DirContent::run || c == DirContent::run_checkpoints || c == DirContent::training_checkpoint;
}

// What a run directory holds that `train` writes or reads.
bool is_run_own_name(const std::string& name) {
  return name == kRunLockFile || name == kRunConfigJson || name == kMetricsFile || name == kCheckpointsDir;
}

// The nearest directory above `path` that no command but `train` writes
// under: a training run, a run's checkpoints folder or a checkpoint (training
// or model). `child` is the entry of that directory the path lies under; `dir`
// is empty when there is none. Links and `..` are followed as the OS follows them.
struct Protected {
  std::string dir;
  DirContent kind = DirContent::absent;
  std::string child;
};
Protected protected_ancestor(const std::string& path) {
  const fs::path p = resolved(path);
  fs::path child = p;
  for (fs::path a = p.parent_path(); !a.empty(); child = a, a = a.parent_path()) {
    const DirContent c = dir_content(a.string());
    if (c == DirContent::run_checkpoints || c == DirContent::training_checkpoint || c == DirContent::model ||
        c == DirContent::run)
      return {a.string(), c, child.filename().string()};
    if (a == a.root_path()) break;
  }
  return {};
}

// Where the output could go instead: the same relative path beside the run
// (RUN/analysis -> RUN/../analysis), as scripts/report/study_layout.py keeps a
// run's results beside its run directory.
std::string beside_run(const std::string& path, const std::string& run) {
  const fs::path rel = resolved(path).lexically_relative(run);
  return (fs::path(run).parent_path() / rel).string();
}

void refuse_inside_protected(const std::string& path, const std::string& flag) {
  const Protected above = protected_ancestor(path);
  if (above.dir.empty()) return;
  const std::string where = flag + " " + path + ": is inside " + above.dir + ", " + describe_dir(above.dir);
  if (flag == "--run-dir")
    fail(where, "; a run directory is never inside another run or a checkpoint (their checksums and `latest` "
         "would no longer hold). Choose another --run-dir");
  if (above.kind == DirContent::run && !is_run_own_name(above.child))
    fail(where, "; no command but `train` writes anywhere inside a training run directory, --force or not "
         "(docs/reliability.md, \"The place rule\"). Write it beside the run instead, e.g. ", flag, " ",
         beside_run(path, above.dir));
  fail(where, "; only `train` writes a run's own files (kdtrain.lock, config.json, metrics.jsonl, "
       "checkpoints/), and this command never writes into a training run or its checkpoints, nor into a "
       "model checkpoint, --force or not (their checksums and `latest` would no longer hold). Choose another ",
       flag);
}

// "" when every entry of `dir` is a regular file named in `own`; else the others, for a message.
std::string not_among(const std::string& dir, const std::vector<std::string>& own) {
  std::string extra;
  for (const std::string& name : entries_of(dir)) {
    const bool ours = std::find(own.begin(), own.end(), name) != own.end() && !is_link(fs::path(dir) / name);
    if (!ours) extra += (extra.empty() ? "" : ", ") + name;
  }
  return extra.empty() ? "" : "holds files this command did not write: " + extra;
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
  const fs::path p(dir);
  if (names.count(kRunLockFile) || (names.count(kCheckpointsDir) && holds_checkpoints(p / kCheckpointsDir)) ||
      (names.count(kMetricsFile) && names.count(kRunConfigJson)))
    return DirContent::run;
  if (resolved(dir).filename() == kCheckpointsDir && holds_checkpoints(p)) return DirContent::run_checkpoints;
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
  refuse_inside_protected(dir, spec.flag);
  KD_CHECK(!is_link(dir), spec.flag, " ", dir, ": is a symbolic link; kdtrain writes a directory of its own, "
           "never through a link. Give the directory itself");
  const DirContent c = dir_content(dir);
  if (c == DirContent::absent || c == DirContent::empty) return;
  std::error_code ec;
  KD_CHECK(fs::is_directory(dir, ec), spec.flag, " ", dir, ": exists and is not a directory");
  const std::string holds = describe_dir(dir);
  KD_CHECK(!written_by_train_only(c), spec.flag, " ", dir, ": is ", holds,
           "; this command never writes into a training run or its checkpoints, --force or not. Choose another ",
           spec.flag);
  const std::string in_the_way =
      spec.own_files.empty() ? not_own_output(dir, spec.command) : not_among(dir, spec.own_files);
  KD_CHECK(in_the_way.empty(), spec.flag, " ", dir, ": is ", holds, " and ", in_the_way,
           "; kdtrain replaces only a directory that holds exactly an earlier output of the same command "
           "(listed in its ", kOutputManifest, "), --force or not. Choose a new or empty ", spec.flag);
  KD_CHECK(spec.force || spec.rerun_replaces || !spec.own_files.empty(), spec.flag, " ", dir, ": holds an earlier output of `kdtrain ",
           spec.command, "` (", holds, "); pass --force to replace it, or choose another ", spec.flag);
}

void claim_run_dir(const std::string& dir, RunClaim claim, const std::string& resumed) {
  refuse_inside_protected(dir, "--run-dir");
  for (const char* own : {kMetricsFile, kRunConfigJson, kRunLockFile, kCheckpointsDir}) {
    const fs::path p = fs::path(dir) / own;
    KD_CHECK(!is_link_to_a_file(p.string()), "--run-dir ", dir, ": ", p.string(), " is a symbolic link; a run writes only files "
             "of its own, never through a link out of its directory (put the whole --run-dir where the "
             "link points instead)");
  }
  const DirContent c = dir_content(dir);
  if (c == DirContent::absent || c == DirContent::empty) return;
  KD_CHECK(c == DirContent::run, "--run-dir ", dir, ": is ", describe_dir(dir),
           ", not a run directory; train writes a run only into a new or empty directory or a run "
           "directory of its own. Choose another --run-dir");
  if (claim != RunClaim::resume_branch) return;
  std::error_code ec;
  const fs::path metrics = fs::path(dir) / kMetricsFile;
  const bool history =
      holds_checkpoints(fs::path(dir) / kCheckpointsDir) || (fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0);
  KD_CHECK(!history, "--run-dir ", dir, " already holds another run (", describe_dir(dir), "); resuming ", resumed,
           " into it would mix the two runs' checkpoints and metrics. Choose a new --run-dir, or resume ", dir,
           " itself with --resume ", dir);
}

void claim_output_file(const std::string& path, const std::string& flag, const std::vector<std::string>& inputs) {
  KD_CHECK(!path.empty(), flag, ": no file given");
  refuse_inside_protected(path, flag);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    KD_CHECK(!S_ISLNK(st.st_mode), flag, " ", path, ": is a symbolic link; kdtrain replaces a file of its own, "
             "never writes through a link. Give the file itself");
    KD_CHECK(S_ISREG(st.st_mode), flag, " ", path, ": exists and is ",
             S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", "; give a file name");
  }
  for (const std::string& input : inputs)
    KD_CHECK(input.empty() || !same_file(path, input), flag, " ", path, ": is the input file ", input,
             "; writing it would destroy what this command reads. Choose another ", flag);
}

}  // namespace kdtrain::io
