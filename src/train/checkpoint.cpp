#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"
#include "io/safetensors.h"

namespace kdtrain {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kRunConfigFile = "run_config.json";

void write_text_atomically(const std::string& path, const std::string& text) {
  io::AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KD_CHECK(in.good(), path, ": cannot read: ", io::errno_text());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Checkpoint directories under <run>/checkpoints, oldest first; staging leftovers
// ("*.tmp.<pid>") of a killed writer are not checkpoints.
std::vector<fs::path> list_checkpoints(const fs::path& root) {
  std::vector<fs::path> dirs;
  if (!fs::exists(root)) return dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step_", 0) == 0 && name.find(".tmp.") == std::string::npos)
      dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

void remove_stale_staging(const fs::path& root) {
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos)
      fs::remove_all(entry.path());
}

fs::path resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::exists(p / kStateFile)) return p;
  const fs::path latest = p / "checkpoints" / kLatest;
  KD_CHECK(fs::exists(latest), "--resume ", path,
           ": neither a checkpoint directory (no ", kStateFile, ") nor a run directory (no checkpoints/",
           kLatest, ")");
  std::string name = read_text(latest.string());
  name.erase(std::remove_if(name.begin(), name.end(), [](char c) { return c == '\n' || c == '\r'; }),
             name.end());
  const fs::path dir = p / "checkpoints" / name;
  KD_CHECK(fs::exists(dir / kStateFile), latest.string(), " names ", name,
           ", which is not a complete checkpoint");
  return dir;
}

// Compares the architecture keys of two configs; names the first difference.
void check_same_architecture(const ModelConfig& a, const AttentionConfig& aa, const ModelConfig& b,
                             const AttentionConfig& ba, const std::string& source) {
  KD_CHECK(a.vocab_size == b.vocab_size, source, ": vocab_size ", a.vocab_size,
           " differs from the configured ", b.vocab_size);
  const nlohmann::json ja = io::hf_config_json(a, aa), jb = io::hf_config_json(b, ba);
  for (auto it = ja.begin(); it != ja.end(); ++it) {
    if (it.key() == "alpha_momentum" || it.key() == "initializer_range") continue;  // not architecture
    const nlohmann::json other = jb.contains(it.key()) ? jb[it.key()] : nlohmann::json();
    KD_CHECK(it.value() == other, source, ": architecture key '", it.key(), "' is ", it.value().dump(),
             " in the checkpoint but ", other.dump(), " in the config");
  }
}

}  // namespace

LoadedModel load_model_dir(const std::string& dir) {
  LoadedModel loaded;
  io::read_hf_config((fs::path(dir) / "config.json").string(), &loaded.model, &loaded.attention);
  const ParamLayout layout = make_param_layout(loaded.model, loaded.attention);
  loaded.params.assign(layout.total, 0.f);
  io::load_model_weights(dir, layout, loaded.params.data());
  return loaded;
}

std::vector<float> params_for(const LoadedModel& loaded, const Model& target,
                              const std::string& source) {
  check_same_architecture(loaded.model, loaded.attention, target.config(), target.attention(), source);
  return loaded.params;
}

std::string save_training_checkpoint(const std::string& run_dir, const Config& config, Model& model,
                                     const TrainingState& state, int64_t keep) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  fs::create_directories(root);
  remove_stale_staging(root);
  const fs::path final_dir = root / step_name(state.step);
  {
    io::StagedDir stage(final_dir.string());
    const std::vector<float> params = model.get_params();
    io::write_model_files(stage.staging_path(), model.config(), model.attention(),
                          io::layout_tensors(model.layout(), params.data()));
    io::SafetensorsWriter optimizer;
    const int64_t n = static_cast<int64_t>(state.adam_m.size());
    optimizer.add_f32("exp_avg", {n}, state.adam_m.data());
    optimizer.add_f32("exp_avg_sq", {n}, state.adam_v.data());
    optimizer.set_metadata("optimizer", "adamw");
    optimizer.set_metadata("steps", std::to_string(state.step));
    optimizer.write(stage.file(kOptimizerFile));
    nlohmann::json trainer;
    trainer["step"] = state.step;
    trainer["skipped_steps"] = state.skipped_steps;
    trainer["sampler"] = state.sampler;
    trainer["data_fingerprint"] = std::to_string(state.data_fingerprint);
    write_text_atomically(stage.file(kStateFile), trainer.dump(2) + "\n");
    write_text_atomically(stage.file(kRunConfigFile), to_json(config).dump(2) + "\n");
    stage.commit();
  }
  write_text_atomically((root / kLatest).string(), final_dir.filename().string() + "\n");
  std::vector<fs::path> all = list_checkpoints(root);
  const size_t keep_n = static_cast<size_t>(std::max<int64_t>(keep, 1));
  for (size_t i = 0; i + keep_n < all.size(); ++i)
    if (all[i] != final_dir) fs::remove_all(all[i]);
  return final_dir.string();
}

TrainingState load_training_checkpoint(const std::string& path, const Config& config, Model& model) {
  const fs::path dir = resolve_checkpoint(path);
  TrainingState state;
  state.directory = dir.string();
  const LoadedModel loaded = load_model_dir(dir.string());
  model.set_params(params_for(loaded, model, dir.string()));

  const std::string state_path = (dir / kStateFile).string();
  nlohmann::json trainer = nlohmann::json::parse(read_text(state_path), nullptr, false);
  KD_CHECK(!trainer.is_discarded() && trainer.is_object(), state_path, ": not valid JSON");
  for (const char* key : {"step", "skipped_steps", "sampler", "data_fingerprint"})
    KD_CHECK(trainer.contains(key), state_path, ": missing key '", key, "'");
  state.step = trainer["step"].get<int64_t>();
  state.skipped_steps = trainer["skipped_steps"].get<int64_t>();
  state.sampler = trainer["sampler"];
  state.data_fingerprint = std::stoull(trainer["data_fingerprint"].get<std::string>());

  const io::SafetensorsFile optimizer((dir / kOptimizerFile).string());
  state.adam_m = optimizer.read_f32("exp_avg");
  state.adam_v = optimizer.read_f32("exp_avg_sq");
  const size_t n = static_cast<size_t>(model.layout().total);
  KD_CHECK(state.adam_m.size() == n && state.adam_v.size() == n, optimizer.path(),
           ": optimizer moments hold ", state.adam_m.size(), " values, the model has ", n);
  (void)config;
  return state;
}

std::string run_dir_of(const std::string& resume_path) {
  const fs::path p(resume_path);
  if (fs::exists(p / kStateFile)) return p.parent_path().parent_path().string();
  return p.string();
}

void write_resolved_config(const Config& config, const std::string& run_dir) {
  fs::create_directories(run_dir);
  write_text_atomically((fs::path(run_dir) / "config.json").string(), to_json(config).dump(2) + "\n");
}

}  // namespace kdtrain
