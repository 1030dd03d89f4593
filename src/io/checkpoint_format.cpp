#include "io/checkpoint_format.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/limits.h"
#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/checksums.h"
#include "io/output_manifest.h"
#include "io/file_util.h"
#include "io/hf_checkpoint.h"
#include "io/hf_modeling_sources.h"
#include "io/run_layout.h"
#include "io/safetensors.h"
#include "model/param_layout.h"

namespace kdtrain::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kWeightsIndex = "model.safetensors.index.json";
// config.json's transformers_version: the 4.57 line whose config format this is
// (requirements.txt pins 4.57.3, which reads it). Left out, or set to 4.57.3
// itself, transformers 4.57.3 takes any tokenizer of over 100k tokens beside the
// config for a Mistral one and warns of an "incorrect regex pattern" (its
// _patch_mistral_regex); a version up to 4.57.2 skips that check.
constexpr const char* kTransformersVersion = "4.57.1";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ")";
  return out.str();
}

// Typed lookups of the keys config.json does not share with ModelConfig.
const json& require(const json& doc, const char* key, const std::string& source) {
  KD_CHECK(doc.contains(key), source, ": missing key '", key, "'");
  return doc[key];
}

int64_t get_int(const json& v, const char* key, const std::string& source) {
  KD_CHECK(v.is_number_integer(), source, ": key '", key, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

double get_number(const json& v, const char* key, const std::string& source) {
  KD_CHECK(v.is_number(), source, ": key '", key, "' must be a number, got ", v.dump());
  return v.get<double>();
}

std::string get_string(const json& v, const char* key, const std::string& source) {
  KD_CHECK(v.is_string(), source, ": key '", key, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

// Files holding the weights of a checkpoint directory: model.safetensors, or
// the shards an HF index lists.
std::vector<std::string> weight_files(const std::string& dir) {
  const fs::path single = fs::path(dir) / kWeightsFile;
  if (fs::exists(single)) return {single.string()};
  const fs::path index = fs::path(dir) / kWeightsIndex;
  const bool pytorch_bin = fs::exists(fs::path(dir) / "pytorch_model.bin") ||
                           fs::exists(fs::path(dir) / "pytorch_model.bin.index.json");
  KD_CHECK(fs::exists(index), dir, ": no ", kWeightsFile, " or ", kWeightsIndex, " in the directory",
           pytorch_bin ? " (PyTorch .bin weights are not read: re-save them with "
                         "save_pretrained(dir, safe_serialization=True))"
                       : "");
  const json doc = read_json_file(index.string());
  KD_CHECK(doc.is_object(), index.string(), ": not a valid JSON object");
  const json& map = require(doc, "weight_map", index.string());
  KD_CHECK(map.is_object(), index.string(), ": 'weight_map' must be an object");
  std::vector<std::string> files;
  for (auto it = map.begin(); it != map.end(); ++it) {
    KD_CHECK(it.value().is_string(), index.string(), ": weight_map entry '", it.key(),
             "' must be a file name");
    const std::string name = it.value().get<std::string>();
    // Shards live next to the index: a path could make a checkpoint read any file.
    KD_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                 name.find('\\') == std::string::npos,
             index.string(), ": weight_map entry '", it.key(), "' names '", name,
             "', which is not a file name in the checkpoint directory (no paths allowed)");
    files.push_back((fs::path(dir) / name).string());
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

// All weight files opened, with a name -> file lookup that refuses duplicates.
struct WeightSet {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> owner;

  explicit WeightSet(const std::string& dir) {
    const std::vector<std::string> paths = weight_files(dir);
    // A kdtrain checkpoint lists its files' checksums: verify what is read here.
    if (has_checksums(dir)) {
      std::vector<std::string> names = {kConfigFile};
      for (const std::string& path : paths) names.push_back(fs::path(path).filename().string());
      if (fs::exists(fs::path(dir) / kWeightsIndex)) names.push_back(kWeightsIndex);
      verify_checksums(dir, names);
    }
    for (const std::string& path : paths) {
      files.push_back(std::make_unique<SafetensorsFile>(path));
      const SafetensorsFile* f = files.back().get();
      for (const std::string& name : f->names()) {
        auto [it, inserted] = owner.emplace(name, f);
        KD_CHECK(inserted, path, ": tensor '", name, "' also appears in ", it->second->path());
      }
    }
  }
};

}  // namespace

json hf_config_json(const ModelConfig& m, const AttentionConfig& a) {
  json rope = nullptr;
  if (m.rope_scaling.type == RopeScalingType::llama3)
    rope = {{"rope_type", "llama3"},
            {"factor", m.rope_scaling.factor},
            {"low_freq_factor", m.rope_scaling.low_freq_factor},
            {"high_freq_factor", m.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings}};
  const bool qwen = m.family == ModelFamily::qwen2;
  json doc = model_keys_json(m);  // hidden_size ... initializer_range, as ModelConfig spells them
  doc["architectures"] = {qwen ? kQwen2Class : kLlamaClass};
  doc["model_type"] = to_string(m.family);
  doc["rope_scaling"] = rope;
  doc["hidden_act"] = "silu";
  doc["torch_dtype"] = "float32";
  doc["attention_variant"] = to_string(a.variant);
  doc["alpha_activation"] = to_string(a.alpha_activation);
  doc["alpha_momentum"] = a.alpha_momentum;
  doc["affine_bias_divisor"] = to_string(a.affine_bias_divisor);
  if (features_of(a.variant).affine) {
    doc["affine_inference_n"] = to_string(a.affine_inference_n);
    if (a.affine_train_length > 0) doc["affine_train_length"] = a.affine_train_length;
  }
  doc["transformers_version"] = kTransformersVersion;
  if (a.variant != AttentionVariant::baseline) {
    // A variant is not a stock LLaMA / Qwen2: named as one, transformers would load
    // it silently without its extra tensors (sinks, alpha_proj, gate_proj). Its own
    // class loads only with trust_remote_code, from the files write_model_files
    // puts beside it.
    doc["architectures"] = {kKdtrainClass};
    doc["model_type"] = "kdtrain";
    doc["base_model_type"] = to_string(m.family);
    doc["auto_map"] = {{"AutoConfig", "configuration_kdtrain.KdtrainConfig"},
                       {"AutoModelForCausalLM", std::string("modeling_kdtrain.") + kKdtrainClass}};
  }
  return doc;
}

void parse_hf_config(const json& doc, const std::string& source, ModelConfig* model,
                     AttentionConfig* attention) {
  KD_CHECK(doc.is_object(), source, ": config must be a JSON object");
  // A run directory's config.json is kdtrain's run config, not a model's.
  KD_CHECK(doc.contains("model_type") || !(doc.contains("model") && doc.contains("train")), source,
           ": this is the run configuration of a training run directory, not a model checkpoint's "
           "config.json; pass one of its checkpoints (RUN/checkpoints/step_<N>, or the one "
           "RUN/checkpoints/latest names)");
  ModelConfig m;
  AttentionConfig a;
  // model_type "kdtrain" is what `kdtrain export` writes for non-baseline variants;
  // its base_model_type names the family. Architecture checks: io/hf_checkpoint.h.
  const std::string model_type = get_string(require(doc, "model_type", source), "model_type", source);
  m.family = hf_family_of(doc, model_type, source);
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "vocab_size", "max_position_embeddings", "rms_norm_eps"})
    require(doc, key, source);
  auto optional = [&](const char* key) -> const json* {
    return doc.contains(key) && !doc[key].is_null() ? &doc[key] : nullptr;
  };
  // Keys HF configs may omit get the defaults transformers applies (below);
  // apply_model_keys reads every shared key present, with the config's checks.
  apply_model_keys(m, doc, source);
  // transformers >= 5 nests rope_theta and the scaling in rope_parameters.
  const json* rope_parameters = optional("rope_parameters");
  if (!optional("rope_theta")) {
    KD_CHECK(rope_parameters && rope_parameters->is_object() && rope_parameters->contains("rope_theta"),
             source, ": missing key 'rope_theta'");
    m.rope_theta = get_number((*rope_parameters)["rope_theta"], "rope_parameters.rope_theta", source);
  }
  if (!optional("num_key_value_heads")) m.num_key_value_heads = m.num_attention_heads;
  if (!optional("head_dim")) m.head_dim = m.hidden_size / m.num_attention_heads;
  if (!optional("tie_word_embeddings")) m.tie_word_embeddings = false;
  // Qwen2 always has q/k/v biases (its HF config has no key for it).
  if (!optional("attention_bias")) m.attention_bias = m.family == ModelFamily::qwen2;
  const json* rope = optional("rope_scaling");
  const char* rope_key = "rope_scaling";
  if (!rope && rope_parameters) {
    rope = rope_parameters;
    rope_key = "rope_parameters";
  }
  if (rope) {
    KD_CHECK(rope->is_object(), source, ": key '", rope_key, "' must be null or an object");
    // Older HF configs spell rope_type as "type".
    const char* type_key = rope->contains("rope_type") ? "rope_type" : "type";
    const std::string type_path = std::string(rope_key) + "." + type_key;
    const std::string where = source + " " + rope_key;
    const std::string type = get_string(require(*rope, type_key, where), type_path.c_str(), source);
    if (type == "llama3") {
      m.rope_scaling.type = RopeScalingType::llama3;
      m.rope_scaling.factor = get_number(require(*rope, "factor", where), "rope_scaling.factor", source);
      m.rope_scaling.low_freq_factor = get_number(require(*rope, "low_freq_factor", where),
                                                  "rope_scaling.low_freq_factor", source);
      m.rope_scaling.high_freq_factor = get_number(require(*rope, "high_freq_factor", where),
                                                   "rope_scaling.high_freq_factor", source);
      m.rope_scaling.original_max_position_embeddings =
          get_int(require(*rope, "original_max_position_embeddings", where),
                  "rope_scaling.original_max_position_embeddings", source);
    } else {
      KD_CHECK(type == "default", source, ": key '", type_path, "' is '", type,
               "': rope scaling type not supported (expected default or llama3)");
    }
  }
  if (optional("attention_variant"))
    a.variant = parse_attention_variant(get_string(doc["attention_variant"], "attention_variant", source));
  if (optional("alpha_activation"))
    a.alpha_activation =
        parse_alpha_activation(get_string(doc["alpha_activation"], "alpha_activation", source));
  if (optional("alpha_momentum"))
    a.alpha_momentum = get_number(doc["alpha_momentum"], "alpha_momentum", source);
  // An affine checkpoint written before the key existed divided by the visible keys.
  if (optional("affine_bias_divisor"))
    a.affine_bias_divisor = parse_affine_bias_divisor(
        get_string(doc["affine_bias_divisor"], "affine_bias_divisor", source));
  else if (features_of(a.variant).affine)
    a.affine_bias_divisor = AffineBiasDivisor::visible;
  if (optional("affine_inference_n"))
    a.affine_inference_n = parse_choice<AffineInferenceN>(
        get_string(doc["affine_inference_n"], "affine_inference_n", source));
  if (optional("affine_train_length")) {
    a.affine_train_length = get_int(doc["affine_train_length"], "affine_train_length", source);
    KD_CHECK(a.affine_train_length >= 1, source, ": affine_train_length must be at least 1, got ",
             a.affine_train_length);
  }
  check_model_limits(m, source, "");
  check_hf_supported(doc, m, source);
  *model = m;
  *attention = a;
}

// The train.seq_len of the run that wrote checkpoint `dir` (its run_config.json), or 0.
static int64_t trained_seq_len(const fs::path& dir) {
  const fs::path run_config = dir / kRunConfigFile;
  if (!fs::is_regular_file(run_config)) return 0;
  const json doc = read_json_file(run_config.string());
  const json* t = doc.is_object() && doc.contains("train") ? &doc["train"] : nullptr;
  if (!t || !t->contains("seq_len") || !(*t)["seq_len"].is_number_integer()) return 0;
  return std::max<int64_t>(0, (*t)["seq_len"].get<int64_t>());
}

void read_hf_config(const std::string& config_path, ModelConfig* model, AttentionConfig* attention) {
  const fs::path dir = fs::path(config_path).parent_path();
  if (fs::is_regular_file(dir / "checkpoints" / "latest")) {
    std::string latest = read_text_file((dir / "checkpoints" / "latest").string(), 4096);
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back()))) latest.pop_back();
    fail(dir.string(), ": is a training run directory, not a model checkpoint; pass one of its "
         "checkpoints, e.g. the latest: ", (dir / "checkpoints" / latest).string());
  }
  parse_hf_config(read_json_file(config_path), config_path, model, attention);
  if (attention->affine_train_length == 0) attention->affine_train_length = trained_seq_len(dir);
}

void write_model_files(const std::string& dir, const ModelConfig& model,
                       const AttentionConfig& attention, const std::vector<TensorRef>& tensors) {
  SafetensorsWriter writer;
  for (const TensorRef& t : tensors) writer.add_f32(t.name, t.shape, t.data);
  // transformers refuses safetensors files without format metadata.
  writer.set_metadata("format", "pt");
  writer.write((fs::path(dir) / kWeightsFile).string());

  const std::string text = hf_config_json(model, attention).dump(2) + "\n";
  AtomicFileWriter config((fs::path(dir) / kConfigFile).string());
  config.write(text.data(), text.size());
  config.commit();
  if (attention.variant != AttentionVariant::baseline) {
    for (const EmbeddedFile& f : hf_modeling_files()) {
      AtomicFileWriter source((fs::path(dir) / f.name).string());
      source.write(f.text, std::strlen(f.text));
      source.commit();
    }
  }
}

void write_model_checkpoint(const std::string& dir, const ModelConfig& model,
                            const AttentionConfig& attention, const std::vector<TensorRef>& tensors,
                            const std::string& output_command) {
  StagedDir stage(dir);
  write_model_files(stage.staging_path(), model, attention, tensors);
  if (!output_command.empty()) write_output_manifest(stage.staging_path(), output_command, {kChecksumsFile});
  write_checksums(stage.staging_path());
  stage.commit();
}

std::vector<TensorRef> layout_tensors(const ParamLayout& layout, const float* arena) {
  std::vector<TensorRef> refs;
  refs.reserve(layout.specs.size());
  for (const ParamSpec& s : layout.specs) refs.push_back(TensorRef{s.name, s.shape, arena + s.offset});
  return refs;
}

void write_model_checkpoint(const std::string& dir, const ModelConfig& model,
                            const AttentionConfig& attention, const ParamLayout& layout,
                            const float* arena, const std::string& output_command) {
  write_model_checkpoint(dir, model, attention, layout_tensors(layout, arena), output_command);
}

ModelCheckpoint read_model_checkpoint(const std::string& dir) {
  ModelCheckpoint ckpt;
  read_hf_config((fs::path(dir) / kConfigFile).string(), &ckpt.model, &ckpt.attention);
  WeightSet weights(dir);
  for (const auto& [name, file] : weights.owner) {
    file->require_finite(name);
    LoadedTensor& t = ckpt.tensors[name];
    t.shape = file->tensor(name).shape;
    t.values = file->read_f32(name);
  }
  return ckpt;
}

namespace {

// Checks every tensor of `weights` against the layout, without reading data:
// each spec present with its exact shape, nothing unexpected except what HF
// checkpoints may carry harmlessly (see hf_ignored_tensor and the tied lm_head).
WeightsSummary check_weights(const WeightSet& weights, const std::string& dir,
                             const ParamLayout& layout) {
  WeightsSummary summary;
  for (const auto& f : weights.files) summary.files.push_back(f->path());
  const std::string where = weights.files.size() == 1 ? weights.files[0]->path() : dir;
  for (const ParamSpec& s : layout.specs) {
    auto it = weights.owner.find(s.name);
    KD_CHECK(it != weights.owner.end(), where, ": missing tensor '", s.name, "' of shape ",
             shape_text(s.shape),
             s.name == "lm_head.weight" ? " (config.json has tie_word_embeddings false)" : "");
    const TensorView& view = it->second->tensor(s.name);
    KD_CHECK(view.shape == s.shape, it->second->path(), ": tensor '", s.name, "' has shape ",
             shape_text(view.shape), ", expected ", shape_text(s.shape));
    summary.dtype_counts[dtype_name(view.dtype)] += 1;
  }
  const bool tied = layout.lm_head == layout.embed;
  for (const auto& [name, file] : weights.owner) {
    if (layout.find(name) != nullptr) continue;
    if (hf_ignored_tensor(name)) {
      summary.ignored.push_back(name);
      continue;
    }
    if (tied && name == "lm_head.weight") {
      const TensorView& view = file->tensor(name);
      const ParamSpec* embed = layout.find("model.embed_tokens.weight");
      KD_CHECK(view.shape == embed->shape, file->path(), ": tensor 'lm_head.weight' has shape ",
               shape_text(view.shape), ", expected ", shape_text(embed->shape),
               " (tie_word_embeddings is true)");
      summary.tied_head_in_file = true;
      continue;
    }
    fail(file->path(), ": unexpected tensor '", name, "' (not a parameter of the configured model; ",
         hf_unexpected_tensor_hint(name), ")");
  }
  return summary;
}

}  // namespace

WeightsSummary check_model_weights(const std::string& dir, const ParamLayout& layout) {
  WeightSet weights(dir);
  return check_weights(weights, dir, layout);
}

WeightsSummary stream_model_weights(const std::string& dir, const ParamLayout& layout,
                                    const WeightSink& sink,
                                    const std::function<void()>& before_unmap) {
  WeightSet weights(dir);
  struct Finally {  // destroyed before `weights`
    const std::function<void()>& run;
    ~Finally() {
      if (run) run();
    }
  } finally{before_unmap};
  const WeightsSummary summary = check_weights(weights, dir, layout);
  // The disk reads the next tensor while this one is scanned and handed over.
  if (!layout.specs.empty()) weights.owner.at(layout.specs[0].name)->prefetch(layout.specs[0].name);
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const ParamSpec& s = layout.specs[i];
    if (i + 1 < layout.specs.size())
      weights.owner.at(layout.specs[i + 1].name)->prefetch(layout.specs[i + 1].name);
    const SafetensorsFile* file = weights.owner.at(s.name);
    file->require_finite(s.name);
    const TensorView& view = file->tensor(s.name);
    if (view.dtype == Dtype::BF16) {
      sink(s, view.data, true);
    } else {
      const std::vector<float> values = file->read_f32(s.name);
      sink(s, values.data(), false);
    }
  }
  return summary;
}

void load_model_weights(const std::string& dir, const ParamLayout& layout, float* arena) {
  WeightSet weights(dir);
  const WeightsSummary summary = check_weights(weights, dir, layout);
  for (const ParamSpec& s : layout.specs) {
    const SafetensorsFile* file = weights.owner.at(s.name);
    file->require_finite(s.name);
    std::vector<float> values = file->read_f32(s.name);
    std::copy(values.begin(), values.end(), arena + s.offset);
  }
  if (summary.tied_head_in_file) {
    // transformers ties lm_head to embed_tokens after loading, so a stored copy
    // never matters; say so when it differs.
    const SafetensorsFile* file = weights.owner.at("lm_head.weight");
    const std::vector<float> head = file->read_f32("lm_head.weight");
    const float* embed = arena + layout.embed;
    if (!std::equal(head.begin(), head.end(), embed))
      spdlog::warn("{}: tie_word_embeddings is true, so 'lm_head.weight' (which differs from "
                   "'model.embed_tokens.weight') is ignored, as transformers ignores it",
                   file->path());
  }
}

}  // namespace kdtrain::io
