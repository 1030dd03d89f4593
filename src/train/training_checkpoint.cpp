#include "train/training_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <spdlog/spdlog.h>

#include "config/limits.h"
#include "core/error.h"
#include "core/paths.h"
#include "io/atomic_dir.h"
#include "io/checksums.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"
#include "io/model_dir.h"
#include "io/output_dir.h"
#include "io/run_head.h"
#include "io/safetensors.h"
#include "train/trainer_state.h"

namespace kdtrain {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLatest = kLatestCheckpointFile;
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = kTrainerStateFile;

void write_text_atomically(const std::string& path, const std::string& text) {
  io::AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

// Leftovers of a writer killed mid-checkpoint. The run lock guarantees no other
// process is writing here, so every one of them is stale.
void remove_stale_staging(const fs::path& root) {
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos || name.find(".old.") != std::string::npos)
      fs::remove_all(entry.path());
  }
}

// The step `latest` names now, 0 when there is none yet (a vanished one too:
// `latest` only moves forward, past what it named).
int64_t latest_step(const fs::path& root) { return latest_named_step(root.parent_path().string()); }

fs::path resolve_checkpoint(const std::string& given) {
  const std::string path = normal_path(given);
  const fs::path p(path);
  if (fs::exists(p / kStateFile)) return p;
  KD_CHECK(io::dir_content(path) != io::DirContent::training_checkpoint, path,
           ": not a complete training checkpoint (no ", kStateFile, ")");
  const io::ResumePoint point = io::resume_point_of_run(path);
  if (!point.note.empty()) spdlog::warn("--resume {}: {}; resuming {}", path, point.note, point.checkpoint);
  const fs::path dir = point.checkpoint;
  KD_CHECK(fs::exists(dir / kStateFile), dir.string(), ": not a complete training checkpoint (no ",
           kStateFile, ")");
  return dir;
}

}  // namespace

namespace {

std::string shard_file_name(int rank, int world) {
  return "optimizer.rank" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

// A checkpoint never holds a NaN: such weights would resume into garbage.
void require_finite(const std::vector<float>& values, const char* what, const fs::path& where) {
  const int64_t bad = io::first_non_finite(values.data(), static_cast<int64_t>(values.size()));
  KD_CHECK(bad < 0, "checkpoint ", where.string(), ": ", what, " hold a non-finite value at element ", bad,
           "; not writing it");
}

// Rank 0's part of a save: the staging directory with model, state and config.
std::unique_ptr<io::StagedDir> stage_checkpoint(const fs::path& root, const fs::path& final_dir,
                                                const Config& config, Model& model,
                                                const TrainingState& state, int world) {
  fs::create_directories(root);
  remove_stale_staging(root);
  auto stage = std::make_unique<io::StagedDir>(final_dir.string());
  const std::vector<float> params = model.get_params();
  require_finite(params, "the parameters", final_dir);
  io::write_model_files(stage->staging_path(), model.config(), model.attention(),
                        io::layout_tensors(model.layout(), params.data()));
  write_text_atomically(stage->file(kStateFile), trainer_state_json(state, world).dump(2) + "\n");
  write_text_atomically(stage->file(kRunConfigFile), to_json(config).dump(2) + "\n");
  return stage;
}

// This rank's optimizer file: its shard of the moments it holds.
void write_optimizer_shard(const std::string& staging, const TrainingState& state, int64_t total,
                           int rank, int world) {
  const dist::Range part = dist::shard_range(total, rank, world);
  const int64_t have_end = state.moments_begin + static_cast<int64_t>(state.adam_m.size());
  KD_CHECK(state.moments_begin <= part.begin && part.end <= have_end, "checkpoint: rank ", rank,
           " holds moments [", state.moments_begin, ", ", have_end, ") but must write [", part.begin,
           ", ", part.end, ")");
  const int64_t n = part.size(), skip = part.begin - state.moments_begin;
  require_finite(state.adam_m, "the optimizer's first moment", staging);
  require_finite(state.adam_v, "the optimizer's second moment", staging);
  io::SafetensorsWriter optimizer;
  optimizer.add_f32("exp_avg", {n}, state.adam_m.data() + skip);
  optimizer.add_f32("exp_avg_sq", {n}, state.adam_v.data() + skip);
  optimizer.set_metadata("optimizer", "adamw");
  optimizer.set_metadata("steps", std::to_string(state.step));
  optimizer.set_metadata("begin", std::to_string(part.begin));
  optimizer.set_metadata("end", std::to_string(part.end));
  optimizer.set_metadata("total", std::to_string(total));
  optimizer.set_metadata("world_size", std::to_string(world));
  const std::string name = world == 1 ? kOptimizerFile : shard_file_name(rank, world);
  optimizer.write((fs::path(staging) / name).string());
}

}  // namespace

std::string save_training_checkpoint(const std::string& run_dir, const Config& config, Model& model,
                                     const TrainingState& state, int64_t keep,
                                     dist::Communicator& comm) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const fs::path final_dir = root / io::checkpoint_dir_name(state.step);
  const int rank = comm.rank(), world = comm.world();
  std::unique_ptr<io::StagedDir> stage;
  std::string staging, error;
  if (rank == 0) {
    try {
      stage = stage_checkpoint(root, final_dir, config, model, state, world);
      staging = stage->staging_path();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Other ranks learn where to write (the staging name carries rank 0's pid).
  staging = dist::broadcast_string(comm, staging, 0);
  if (staging.empty()) {
    if (rank == 0) fail(error);
    fail("checkpoint ", final_dir.string(), ": rank 0 could not create it (see its error)");
  }
  try {
    write_optimizer_shard(staging, state, model.layout().total, rank, world);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // All ranks agree that every file is written before the directory goes live.
  if (comm.any(!error.empty())) {
    if (!error.empty()) fail(error);
    fail("checkpoint ", final_dir.string(), ": another rank failed to write its optimizer shard "
         "(see its error); the checkpoint was discarded");
  }
  if (rank == 0) {
    try {
      // Checksums of every file, written before the directory goes live...
      io::write_checksums(stage->staging_path());
      const int64_t previous = latest_step(root);
      KD_CHECK(state.step > previous, "checkpoint ", final_dir.string(), ": `latest` names step ", previous,
               ", not older than this one; it only moves forward");
      stage->commit();
      // ...and `latest` moves only to a checkpoint that verifies against them.
      io::verify_checksums(final_dir.string());
      write_text_atomically((root / kLatest).string(), final_dir.filename().string() + "\n");
      const auto all = io::list_checkpoints(root);
      const size_t keep_n = static_cast<size_t>(std::max<int64_t>(keep, 1));
      for (size_t i = 0; i + keep_n < all.size(); ++i)
        if (all[i].second != final_dir) io::remove_dir_atomically(all[i].second.string());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (comm.any(!error.empty())) {
    if (!error.empty()) fail(error);
    fail("checkpoint ", final_dir.string(), ": rank 0 failed to commit it (see its error)");
  }
  return final_dir.string();
}

namespace {

// One optimizer file of a checkpoint and the arena range it covers.
struct MomentFile {
  std::string path;
  int64_t begin = 0, end = 0;
};

int64_t metadata_int(const io::SafetensorsFile& file, const char* key) {
  const auto& meta = file.metadata();
  const auto it = meta.find(key);
  KD_CHECK(it != meta.end(), file.path(), ": metadata key '", key, "' is missing");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    fail(file.path(), ": metadata '", key, "' is not an integer: '", it->second, "'");
  }
}

// The optimizer files of `dir`, sorted by range, checked to tile [0, total).
std::vector<MomentFile> list_moment_files(const fs::path& dir, int64_t total) {
  std::vector<MomentFile> files;
  if (fs::exists(dir / kOptimizerFile)) {
    files.push_back({(dir / kOptimizerFile).string(), 0, total});  // single process: the whole arena
    return files;
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("optimizer.rank", 0) != 0 || entry.path().extension() != ".safetensors") continue;
    const io::SafetensorsFile file(entry.path().string());
    KD_CHECK(metadata_int(file, "total") == total, file.path(), ": optimizer state for ",
             metadata_int(file, "total"), " parameters, the model has ", total);
    files.push_back({file.path(), metadata_int(file, "begin"), metadata_int(file, "end")});
  }
  KD_CHECK(!files.empty(), dir.string(), ": no optimizer state (", kOptimizerFile,
           " or optimizer.rank<r>-of-<W>.safetensors)");
  std::sort(files.begin(), files.end(),
            [](const MomentFile& a, const MomentFile& b) { return a.begin < b.begin; });
  int64_t covered = 0;
  for (const MomentFile& f : files) {
    KD_CHECK(f.begin == covered, dir.string(), ": optimizer shards do not tile the parameter arena: ",
             f.path, " starts at ", f.begin, " but the shards before it end at ", covered,
             " (a shard file is missing or from another run)");
    covered = f.end;
  }
  KD_CHECK(covered == total, dir.string(), ": optimizer shards cover [0, ", covered, ") of ", total,
           " parameters (a shard file is missing)");
  return files;
}

// One optimizer file's moments: of this step, of the size of its range, finite.
void check_moment_file(const io::SafetensorsFile& file, const MomentFile& f, int64_t step) {
  if (file.metadata().count("steps"))
    KD_CHECK(metadata_int(file, "steps") == step, f.path, ": optimizer state of step ",
             metadata_int(file, "steps"), " in a checkpoint of step ", step, " (a file from another checkpoint)");
  for (const char* name : {"exp_avg", "exp_avg_sq"}) {
    const io::TensorView& t = file.tensor(name);
    KD_CHECK(t.numel() == f.end - f.begin, f.path, ": tensor '", name, "' holds ", t.numel(),
             " values for the range [", f.begin, ", ", f.end, ")");
    file.require_finite(name);
  }
}

// Moments for arena range `want`, assembled from the overlapping files.
void read_moments(const fs::path& dir, int64_t total, dist::Range want, TrainingState& state) {
  state.moments_begin = want.begin;
  state.adam_m.assign(static_cast<size_t>(want.size()), 0.f);
  state.adam_v.assign(static_cast<size_t>(want.size()), 0.f);
  for (const MomentFile& f : list_moment_files(dir, total)) {
    const int64_t b = std::max(f.begin, want.begin), e = std::min(f.end, want.end);
    if (b >= e) continue;
    io::verify_checksums(dir.string(), {fs::path(f.path).filename().string()});
    const io::SafetensorsFile file(f.path);
    check_moment_file(file, f, state.step);
    const std::vector<float> m = file.read_f32("exp_avg"), v = file.read_f32("exp_avg_sq");
    std::copy(m.begin() + (b - f.begin), m.begin() + (e - f.begin), state.adam_m.begin() + (b - want.begin));
    std::copy(v.begin() + (b - f.begin), v.begin() + (e - f.begin), state.adam_v.begin() + (b - want.begin));
  }
}

}  // namespace

void verify_moments(const std::string& dir, int64_t total, int64_t step) {
  for (const MomentFile& f : list_moment_files(dir, total)) check_moment_file(io::SafetensorsFile(f.path), f, step);
}

TrainingState load_training_checkpoint(const std::string& path, const Config& config, Model& model,
                                       dist::Range moments) {
  const fs::path dir = resolve_checkpoint(path);
  // Every file is checked against checksums.json before it is read (the weights by
  // load_model_dir, the optimizer files by read_moments): nothing corrupt or swapped in is read.
  io::verify_checksums(dir.string(), {kStateFile, kRunConfigFile});
  TrainingState state;
  state.directory = dir.string();
  const std::string state_path = (dir / kStateFile).string();
  parse_trainer_state(read_json_file(state_path), state_path, &state);
  int64_t dir_step = 0;
  KD_CHECK(parse_step_name(dir.filename().string(), &dir_step) && dir_step == state.step, state_path,
           ": step ", state.step, " does not match its checkpoint directory ", dir.filename().string());
  const LoadedModel loaded = load_model_dir(dir.string());
  model.set_params(params_for(loaded, model, dir.string()));

  const int64_t total = model.layout().total;
  if (moments.end < 0) moments = {0, total};
  KD_CHECK(0 <= moments.begin && moments.begin <= moments.end && moments.end <= total,
           "load_training_checkpoint: range [", moments.begin, ", ", moments.end,
           ") outside the parameter arena");
  read_moments(dir, total, moments, state);
  (void)config;
  return state;
}

std::string newest_checkpoint_name(const std::string& run_dir) {
  const auto all = io::list_checkpoints(fs::path(run_dir) / kCheckpointsDir);
  return all.empty() ? "" : all.back().second.filename().string();
}

int64_t run_head_step(const std::string& run_dir) {
  const auto all = io::list_checkpoints(fs::path(run_dir) / kCheckpointsDir);
  return std::max(latest_named_step(run_dir), all.empty() ? int64_t{0} : all.back().first);
}

std::string run_dir_of(const std::string& resume_path) {
  const fs::path p(normal_path(resume_path));
  if (io::dir_content(p.string()) == io::DirContent::training_checkpoint) {
    const fs::path run = p.parent_path().parent_path();
    return run.empty() ? "." : run.string();
  }
  return p.string();
}

void write_resolved_config(const Config& config, const std::string& run_dir) {
  fs::create_directories(run_dir);
  write_text_atomically((fs::path(run_dir) / "config.json").string(), to_json(config).dump(2) + "\n");
}

}  // namespace kdtrain
