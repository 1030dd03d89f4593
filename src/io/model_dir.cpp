#include "io/model_dir.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "config/limits.h"
#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"

namespace kdtrain {

namespace fs = std::filesystem;

LoadedModel load_model_dir(const std::string& dir) {
  LoadedModel loaded;
  io::read_hf_config((fs::path(dir) / "config.json").string(), &loaded.model, &loaded.attention);
  const ParamLayout layout = make_param_layout(loaded.model, loaded.attention);
  // The sizes config.json claims are checked against the tensors the files hold
  // (their headers, nothing read) before the arena is reserved: a config claiming
  // a model far larger than its weights is refused, not an out-of-memory kill.
  io::check_model_weights(dir, layout);
  loaded.params = allocate_or_name(
      "the parameters of " + dir, 4.0 * double(layout.total), model_size_keys(loaded.model),
      [&] { return std::vector<float>(static_cast<size_t>(layout.total), 0.f); });
  io::load_model_weights(dir, layout, loaded.params.data());
  return loaded;
}

std::vector<float> params_for(const LoadedModel& loaded, const Model& target,
                              const std::string& source) {
  check_same_architecture(loaded.model, loaded.attention, target.config(), target.attention(), source);
  return loaded.params;
}

bool parse_step_name(const std::string& name, int64_t* step) {
  const std::string digits = name.rfind("step_", 0) == 0 ? name.substr(5) : "";
  if (digits.size() < 8 || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *step = std::stoll(digits);
  return true;
}

namespace {

// The step_<N> name `latest` holds: a checkpoint of this run, nothing else (no path, no link out).
std::string latest_name(const fs::path& checkpoints) {
  const fs::path latest = checkpoints / kLatestCheckpointFile;
  std::string name = read_text_file(latest.string(), 4096);
  name.erase(std::remove_if(name.begin(), name.end(),
                            [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
             name.end());
  int64_t step = 0;
  KD_CHECK(parse_step_name(name, &step), latest.string(), " names '", name,
           "', which is not a checkpoint of this run (it must hold the name of a step_<N> directory in ",
           checkpoints.string(), ")");
  return name;
}

}  // namespace

int64_t latest_named_step(const std::string& run_dir) {
  const fs::path checkpoints = fs::path(run_dir) / kCheckpointsDir;
  if (!fs::exists(checkpoints / kLatestCheckpointFile)) return 0;
  int64_t step = 0;
  parse_step_name(latest_name(checkpoints), &step);
  return step;
}

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path checkpoints = fs::path(run_dir) / "checkpoints";
  const fs::path latest = checkpoints / kLatestCheckpointFile;
  KD_CHECK(fs::exists(latest), run_dir, ": not a run directory (no checkpoints/", kLatestCheckpointFile, ")");
  const std::string name = latest_name(checkpoints);
  const fs::path dir = checkpoints / name;
  KD_CHECK(!fs::is_symlink(dir) && fs::is_directory(dir), latest.string(), " names ", name,
           ", which is not a checkpoint directory in ", checkpoints.string());
  KD_CHECK(fs::exists(dir / "model.safetensors"), latest.string(), " names ", name,
           ", which holds no model.safetensors");
  return dir.string();
}

void check_same_architecture(const ModelConfig& a, const AttentionConfig& aa, const ModelConfig& b,
                             const AttentionConfig& ba, const std::string& source) {
  KD_CHECK(a.vocab_size == b.vocab_size, source, ": vocab_size ", a.vocab_size,
           " differs from the configured ", b.vocab_size);
  const nlohmann::json ja = io::hf_config_json(a, aa), jb = io::hf_config_json(b, ba);
  for (auto it = ja.begin(); it != ja.end(); ++it) {
    if (it.key() == "alpha_momentum" || it.key() == "initializer_range" || it.key() == "affine_inference_n" ||
        it.key() == "affine_train_length")
      continue;  // not architecture
    if (it.key() == "affine_bias_divisor" && !features_of(aa.variant).affine) continue;  // unused
    const nlohmann::json other = jb.contains(it.key()) ? jb[it.key()] : nlohmann::json();
    KD_CHECK(it.value() == other, source, ": architecture key '", it.key(), "' is ", it.value().dump(),
             " in the checkpoint but ", other.dump(), " in the config");
  }
}

}  // namespace kdtrain
