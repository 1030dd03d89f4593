#include "train/resume_checks.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/file_util.h"
#include "io/model_dir.h"

namespace kdtrain {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Keys a resume may change freely: how often things are logged or saved, where
// the work runs, and paths whose content is checked by fingerprint instead.
const std::set<std::string> kOperationalKeys = {
    "checkpoint.interval", "checkpoint.keep", "log.interval", "eval.interval", "eval.batches",
    "data.train",  // content: the data fingerprint
    "data.val", "train.threads", "train.micro_batch", "train.on_nonfinite", "train.max_consecutive_skips",
    "dist.timeout_s", "dist.zero1",
    "kd.teacher", "kd.teacher_cache",  // content: the teacher fingerprint
    "kd.chunk_tokens", "model.init", "model.preset",
    // Extending a finished run is how a run goes on (docs/training.md): the --set
    // asks for it, and the schedule is recomputed for the new length.
    "train.steps",
};

// Keys that cannot change the trajectory of a run that goes on from a
// checkpoint of `c`: used only to initialise weights (which the checkpoint
// replaces), only by a variant `c` does not use, or only to trade memory for
// recomputation with bit-identical results (docs/reliability.md, "Resume is
// the same run, or refused").
std::set<std::string> keys_without_effect(const Config& c) {
  std::set<std::string> keys = {"model.initializer_range", "attention.sink_init_std", "train.recompute",
                                "train.recompute_layers"};
  if (!features_of(c.attention).affine)
    for (const char* k : {"attention.alpha_activation", "attention.affine_bias_divisor", "attention.alpha_momentum"})
      keys.insert(k);
  return keys;
}

// A checkpoint's run_config.json. An affine run written before
// attention.affine_bias_divisor existed divided by the visible keys, as its
// model's config.json reads (docs/model.md): so does its run config.
Config checkpoint_run_config(const std::string& path) {
  const json doc = read_json_file(path);
  Config c;
  apply_json(c, doc, path);
  const bool has_divisor = doc.contains("attention") && doc["attention"].is_object() &&
                           doc["attention"].contains("affine_bias_divisor");
  if (!has_divisor) c.attention.affine_bias_divisor = AffineBiasDivisor::visible;
  return c;
}

std::string checkpoint_name(const std::string& dir) { return fs::path(dir).filename().string(); }

// Rewinding: the run's newer checkpoints are dropped and `latest` names the
// resumed one (or, when that lives in another run, names nothing until the next save).
void rewind_to(const fs::path& checkpoints, const std::string& checkpoint_dir, int64_t step) {
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    int64_t s = 0;
    if (parse_step_name(entry.path().filename().string(), &s) && s > step)
      io::remove_dir_atomically(entry.path().string());
  }
  const std::string name = checkpoint_name(checkpoint_dir);
  if (!fs::exists(checkpoints / name)) {
    fs::remove(checkpoints / "latest");
    return;
  }
  io::AtomicFileWriter latest((checkpoints / "latest").string());
  const std::string text = name + "\n";
  latest.write(text.data(), text.size());
  latest.commit();
}

}  // namespace

void flatten_json(const json& value, const std::string& path, std::map<std::string, json>* out) {
  if (!value.is_object()) {
    (*out)[path] = value;
    return;
  }
  for (auto it = value.begin(); it != value.end(); ++it)
    flatten_json(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
}

void rewind_run(const std::string& run_dir, const std::string& checkpoint_dir, int64_t step) {
  spdlog::warn("--rewind: deleting the checkpoints of {} after step {}", run_dir, step);
  rewind_to(fs::path(run_dir) / kCheckpointsDir, checkpoint_dir, step);
}

std::vector<std::string> trajectory_changes(const Config& before, const Config& now) {
  std::map<std::string, json> a, b;
  flatten_json(to_json(before), "", &a);
  flatten_json(to_json(now), "", &b);
  const std::set<std::string> inert = keys_without_effect(now), inert_before = keys_without_effect(before);
  std::vector<std::string> changes;
  for (const auto& [key, value] : b) {
    if (kOperationalKeys.count(key) || (inert.count(key) && inert_before.count(key))) continue;
    const auto it = a.find(key);
    const json old = it == a.end() ? json() : it->second;
    if (old != value) changes.push_back(key + ": " + old.dump() + " -> " + value.dump());
  }
  return changes;
}

bool check_resume(const Config& now, const TrainingState& state, const ResumeContext& ctx) {
  const std::string where = "--resume " + ctx.checkpoint_dir;
  const fs::path run_config = fs::path(ctx.checkpoint_dir) / "run_config.json";
  const Config before = checkpoint_run_config(run_config.string());

  // The sampler has drawn exactly step x global_batch windows of this data.
  const json& s = state.sampler;
  for (const char* key : {"epoch", "index", "num_windows"})
    KD_CHECK(s.contains(key) && s[key].is_number_integer() && s[key].get<int64_t>() >= 0, where,
             ": trainer_state.json: sampler key '", key, "' missing or not a non-negative integer");
  const int64_t n = s["num_windows"].get<int64_t>(), epoch = s["epoch"].get<int64_t>(),
                index = s["index"].get<int64_t>();
  KD_CHECK(n == ctx.num_windows, where, ": trainer_state.json: the sampler ran over ", n,
           " windows but data.train now has ", ctx.num_windows);
  KD_CHECK(index <= n && epoch <= state.step * before.train.global_batch / n + 1 &&
               epoch * n + index == state.step * before.train.global_batch,
           where, ": trainer_state.json: the sampler has drawn ", epoch, " epochs + ", index,
           " windows, but step ", state.step, " x train.global_batch ", before.train.global_batch,
           " means ", state.step * before.train.global_batch, " windows; the state does not belong to this checkpoint");

  std::vector<std::string> changes = trajectory_changes(before, now);
  if (state.teacher_fingerprint != ctx.teacher_fingerprint)
    changes.push_back("the teacher (fingerprint " + (state.teacher_fingerprint.empty() ? "none" : state.teacher_fingerprint) +
                      " -> " + (ctx.teacher_fingerprint.empty() ? "none" : ctx.teacher_fingerprint) + ")");
  if (!changes.empty()) {
    std::string list;
    for (const std::string& c : changes) list += "\n  " + c;
    KD_CHECK(ctx.allow_config_change, where, ": the resumed run would not continue the same trajectory; "
             "changed since the checkpoint (", run_config.string(), "):", list,
             "\nPass --allow-config-change to resume with these changes on purpose.");
    spdlog::warn("{}: resuming with changes (--allow-config-change):{}", where, list);
  }
  KD_CHECK(state.step <= now.train.steps, where, ": the checkpoint is at step ", state.step,
           ", beyond train.steps = ", now.train.steps);

  // A checkpoint older than where the run directory got (what `latest` names,
  // even a checkpoint that vanished since, or a newer step_<N> that `latest`
  // never named) would rewind the run.
  if (!ctx.owns_run_dir) return false;
  const int64_t head = run_head_step(ctx.run_dir);
  if (head <= state.step) return false;
  char head_name[40];
  std::snprintf(head_name, sizeof head_name, "step_%08lld", static_cast<long long>(head));
  KD_CHECK(ctx.rewind, where, ": ", ctx.run_dir, " has a newer checkpoint (", head_name,
           ", named by checkpoints/latest or on disk); resuming step ", state.step, " there would rewind the run, deleting the checkpoints and metrics "
           "after it. Pass --rewind to do that, or --run-dir NEW to branch into a new run directory.");
  return true;
}

}  // namespace kdtrain
