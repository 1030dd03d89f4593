#include "io/hf_export.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"
#include "io/hf_checkpoint.h"
#include "io/hf_modeling_sources.h"
#include "io/output_dir.h"
#include "io/safetensors.h"
#include "model/param_layout.h"

namespace kdtrain::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Files a Hugging Face tokenizer directory may hold; the ones present are copied.
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json",       "merges.txt",            "tokenizer.model",         "tokenizer.txt",
};

void write_text(const std::string& path, const std::string& text) {
  AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

// Largest token id a tokenizer file defines, or -1 when it defines none we know of.
int64_t max_token_id(const fs::path& file) {
  const std::string name = file.filename().string();
  auto max_of_values = [](const json& obj) {
    int64_t m = -1;
    if (obj.is_object())
      for (auto it = obj.begin(); it != obj.end(); ++it)
        if (it.value().is_number_integer()) m = std::max(m, it.value().get<int64_t>());
    return m;
  };
  if (name == "vocab.json" || name == "added_tokens.json") return max_of_values(read_json_file(file.string()));
  if (name != "tokenizer.json") return -1;
  const json doc = read_json_file(file.string());
  int64_t m = -1;
  if (doc.contains("model") && doc["model"].contains("vocab")) m = max_of_values(doc["model"]["vocab"]);
  if (doc.contains("added_tokens") && doc["added_tokens"].is_array())
    for (const json& t : doc["added_tokens"])
      if (t.contains("id") && t["id"].is_number_integer()) m = std::max(m, t["id"].get<int64_t>());
  return m;
}

// Tokenizer files to copy, after checking every id fits the model's vocabulary.
std::vector<fs::path> tokenizer_files(const std::string& source, int64_t vocab_size) {
  std::vector<fs::path> files;
  const fs::path p(source);
  if (fs::is_regular_file(p)) {
    files.push_back(p);
  } else {
    KD_CHECK(fs::is_directory(p), "--tokenizer ", source, ": no such file or directory");
    for (const char* name : kTokenizerFiles)
      if (fs::is_regular_file(p / name)) files.push_back(p / name);
    KD_CHECK(!files.empty(), "--tokenizer ", source,
             ": holds no tokenizer file (tokenizer.json, tokenizer_config.json, vocab.json, ...)");
  }
  for (const fs::path& f : files) {
    const int64_t max_id = max_token_id(f);
    KD_CHECK(max_id < vocab_size, f.string(), ": defines token id ", max_id,
             ", outside the model's vocabulary (vocab_size ", vocab_size,
             "); the tokenizer does not belong to this model");
  }
  return files;
}

// Refuses anything but a new or empty directory or, with --force, an earlier
// export's output (io/output_dir.h), and never the checkpoint being read.
void check_output_dir(const ExportOptions& o) {
  const fs::path out(o.out);
  KD_CHECK(!o.out.empty(), "--out: no directory given");
  KD_CHECK(!fs::is_directory(out) || !fs::equivalent(out, fs::path(o.checkpoint)), "--out ", o.out,
           ": is the checkpoint being exported; choose another directory");
  claim_output_dir(o.out, {"--out", {}, o.force, "export"});
}

// What N the exported `sequence` model divides its bias by (docs/export.md).
std::string affine_n_note(const AttentionConfig& a) {
  if (a.affine_inference_n == AffineInferenceN::keys)
    return "affine N = the keys of each call (affine_inference_n keys): a row depends on the call's length, "
           "lm-eval must score one request at a time, and cached generation differs from a full forward";
  if (a.affine_train_length > 0)
    return "affine N = " + std::to_string(a.affine_train_length) +
           ", the training length (affine_inference_n train_length): a row depends only on its prefix";
  return "affine_inference_n is train_length but the checkpoint records no training length "
         "(affine_train_length, run_config.json): the export divides by the keys of each call";
}

}  // namespace

ExportDtype parse_export_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32" || name == "f32") return ExportDtype::f32;
  if (name == "bf16" || name == "bfloat16") return ExportDtype::bf16;
  fail("--dtype: '", name, "' is not one of bf16, fp32");
}

std::string hf_export_architecture(const ModelConfig& m, const AttentionConfig& a) {
  if (a.variant != AttentionVariant::baseline) return kKdtrainClass;
  // Stock LLaMA with attention_bias would also bias o_proj; Qwen2 biases q/k/v only.
  if (m.family == ModelFamily::qwen2 || m.attention_bias) return kQwen2Class;
  return kLlamaClass;
}

json hf_export_config(const ModelConfig& m, const AttentionConfig& a, ExportDtype dtype) {
  const std::string arch = hf_export_architecture(m, a);
  // The checkpoint's own config.json, adjusted to what each architecture's loader expects.
  json c = hf_config_json(m, a);
  c["architectures"] = {arch};
  c["attention_dropout"] = 0.0;
  c["torch_dtype"] = dtype == ExportDtype::bf16 ? "bfloat16" : "float32";
  c["use_cache"] = arch != kKdtrainClass;
  if (arch != kKdtrainClass)
    for (const char* key : {"attention_variant", "alpha_activation", "alpha_momentum", "affine_bias_divisor",
                            "affine_inference_n", "affine_train_length"})
      c.erase(key);
  if (arch == kLlamaClass) {
    c["model_type"] = "llama";
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
  } else if (arch == kQwen2Class) {
    c["model_type"] = "qwen2";
    c.erase("attention_bias");
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = m.num_hidden_layers;
  } else {
    c["mlp_bias"] = false;  // model_type, base_model_type and auto_map: hf_config_json
  }
  return c;
}

ExportSummary export_hf_checkpoint(const ExportOptions& o) {
  KD_CHECK(fs::is_directory(o.checkpoint), "--checkpoint ", o.checkpoint, ": not a directory");
  check_output_dir(o);
  ModelConfig m;
  AttentionConfig a;
  read_hf_config((fs::path(o.checkpoint) / "config.json").string(), &m, &a);
  if (o.affine_n) a.affine_inference_n = *o.affine_n;
  const ParamLayout layout = make_param_layout(m, a);
  std::vector<float> arena(static_cast<size_t>(layout.total));
  load_model_weights(o.checkpoint, layout, arena.data());
  const std::vector<fs::path> tokenizer =
      o.tokenizer.empty() ? std::vector<fs::path>{} : tokenizer_files(o.tokenizer, m.vocab_size);

  ExportSummary summary;
  summary.architecture = hf_export_architecture(m, a);
  summary.parameters = layout.trainable_count();
  if (m.family == ModelFamily::llama && summary.architecture == kQwen2Class)
    summary.notes.push_back("a llama-family model with q/k/v bias exports as Qwen2ForCausalLM "
                            "(stock LlamaForCausalLM's attention_bias also adds an o_proj bias)");

  if (features_of(a.variant).affine && a.affine_bias_divisor == AffineBiasDivisor::sequence)
    summary.notes.push_back(affine_n_note(a));
  std::vector<TensorRef> tensors = layout_tensors(layout, arena.data());
  // Stock Qwen2 always has q/k/v biases: a model without them gets zeros (one
  // shared zero buffer, as long as the largest of them).
  std::vector<float> zeros;
  if (summary.architecture == kQwen2Class && !m.attention_bias) {
    const int64_t D = m.head_dim, H = m.num_attention_heads, Hkv = m.num_key_value_heads;
    zeros.assign(static_cast<size_t>(std::max(H, Hkv) * D), 0.f);
    for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      tensors.push_back({p + "q_proj.bias", {H * D}, zeros.data()});
      tensors.push_back({p + "k_proj.bias", {Hkv * D}, zeros.data()});
      tensors.push_back({p + "v_proj.bias", {Hkv * D}, zeros.data()});
    }
    summary.notes.push_back("Qwen2ForCausalLM always has q/k/v biases; this model has none, so they "
                            "are exported as zeros");
  }
  summary.tensors = static_cast<int64_t>(tensors.size());

  StagedDir stage(o.out);
  SafetensorsWriter writer;
  for (const TensorRef& t : tensors) {
    if (o.dtype == ExportDtype::bf16) writer.add_f32_as_bf16(t.name, t.shape, t.data);
    else writer.add_f32(t.name, t.shape, t.data);
  }
  writer.set_metadata("format", "pt");  // transformers refuses safetensors without it
  writer.set_metadata("exported_by", "kdtrain export");
  writer.write(stage.file("model.safetensors"));
  summary.files.push_back("model.safetensors");
  write_text(stage.file("config.json"), hf_export_config(m, a, o.dtype).dump(2) + "\n");
  summary.files.push_back("config.json");
  if (summary.architecture == kKdtrainClass) {
    for (const EmbeddedFile& f : hf_modeling_files()) {
      write_text(stage.file(f.name), f.text);
      summary.files.push_back(f.name);
    }
  }
  for (const fs::path& f : tokenizer) {
    const std::string name = f.filename().string();
    std::error_code ec;
    fs::copy_file(f, stage.file(name), fs::copy_options::overwrite_existing, ec);
    KD_CHECK(!ec, f.string(), ": cannot copy into ", o.out, ": ", ec.message());
    summary.files.push_back(name);
  }
  write_output_manifest(stage.staging_path(), "export");
  stage.commit();
  return summary;
}

}  // namespace kdtrain::io
