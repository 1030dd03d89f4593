#include "io/hf_checkpoint.h"

#include "core/error.h"

namespace kdtrain::io {

using nlohmann::json;

namespace {

struct Architecture {
  const char* model_type;
  const char* class_name;
};
constexpr Architecture kArchitectures[] = {
    {"llama", kLlamaClass},
    {"qwen2", kQwen2Class},
    {"kdtrain", kKdtrainClass},
};

const char* class_for(const std::string& model_type) {
  for (const Architecture& a : kArchitectures)
    if (model_type == a.model_type) return a.class_name;
  return nullptr;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ModelFamily hf_family_of(const json& doc, const std::string& model_type, const std::string& source) {
  const char* expected = class_for(model_type);
  KD_CHECK(expected != nullptr, source, ": key 'model_type' is '", model_type,
           "'; supported: llama (LlamaForCausalLM), qwen2 (Qwen2ForCausalLM), kdtrain (kdtrain export)");
  if (doc.contains("architectures") && !doc["architectures"].is_null()) {
    const json& archs = doc["architectures"];
    KD_CHECK(archs.is_array() && !archs.empty(), source,
             ": key 'architectures' must be a non-empty list of class names, got ", archs.dump());
    for (const json& a : archs) {
      KD_CHECK(a.is_string(), source, ": key 'architectures' must list class names, got ", a.dump());
      const std::string name = a.get<std::string>();
      KD_CHECK(name == expected, source, ": key 'architectures' lists '", name,
               "', which kdtrain does not support for model_type '", model_type, "' (expected ",
               expected, "; supported: LlamaForCausalLM, Qwen2ForCausalLM, KdtrainForCausalLM)");
    }
  }
  if (model_type != "kdtrain") return parse_choice<ModelFamily>(model_type);
  if (!doc.contains("base_model_type") || doc["base_model_type"].is_null()) return ModelFamily::llama;
  const json& base = doc["base_model_type"];
  KD_CHECK(base.is_string() && (base == "llama" || base == "qwen2"), source,
           ": key 'base_model_type' must be \"llama\" or \"qwen2\", got ", base.dump());
  return parse_choice<ModelFamily>(base.get<std::string>());
}

void check_hf_supported(const json& doc, const ModelConfig& m, const std::string& source) {
  auto present = [&](const char* key) { return doc.contains(key) && !doc[key].is_null(); };
  if (present("hidden_act"))
    KD_CHECK(doc["hidden_act"] == "silu", source, ": key 'hidden_act' is ", doc["hidden_act"].dump(),
             "; kdtrain's MLP is SwiGLU (silu) only");
  if (present("mlp_bias"))
    KD_CHECK(doc["mlp_bias"] == false, source, ": key 'mlp_bias' is ", doc["mlp_bias"].dump(),
             "; kdtrain's MLP has no biases");
  // A LLaMA config from transformers with attention_bias also biases o_proj.
  // kdtrain's own llama-family checkpoints (they carry attention_variant) mean
  // q/k/v bias only, as their layout says.
  const bool from_transformers = !doc.contains("attention_variant");
  if (m.family == ModelFamily::llama && from_transformers && doc.value("model_type", "") == "llama")
    KD_CHECK(!m.attention_bias, source,
             ": key 'attention_bias' is true; a LlamaForCausalLM with attention_bias also has an "
             "o_proj bias, which kdtrain does not support (Qwen2-style q/k/v bias is supported)");
  if (present("use_sliding_window"))
    KD_CHECK(doc["use_sliding_window"] == false, source, ": key 'use_sliding_window' is ",
             doc["use_sliding_window"].dump(), "; kdtrain supports full causal attention only");
  if (present("layer_types") && doc["layer_types"].is_array())
    for (const json& t : doc["layer_types"])
      KD_CHECK(t == "full_attention", source, ": key 'layer_types' contains ", t.dump(),
               "; kdtrain supports full causal attention only");
  KD_CHECK(m.num_key_value_heads > 0 && m.num_attention_heads % m.num_key_value_heads == 0, source,
           ": key 'num_key_value_heads' (", m.num_key_value_heads,
           ") must divide num_attention_heads (", m.num_attention_heads, ")");
  KD_CHECK(m.head_dim > 0 && m.head_dim % 2 == 0, source, ": key 'head_dim' (", m.head_dim,
           ") must be positive and even for rotary embeddings");
}

bool hf_ignored_tensor(const std::string& name) { return ends_with(name, ".rotary_emb.inv_freq"); }

std::string hf_unexpected_tensor_hint(const std::string& name) {
  if (ends_with(name, ".o_proj.bias")) return "kdtrain has no o_proj bias";
  if (ends_with(name, "_proj.bias")) return "check attention_bias";
  if (name == "lm_head.weight") return "check tie_word_embeddings";
  if (ends_with(name, ".sinks") || ends_with(name, ".alpha_proj.weight") ||
      ends_with(name, ".alpha_ma") || ends_with(name, "self_attn.gate_proj.weight"))
    return "check attention_variant";
  return "check the architecture keys of config.json";
}

std::string hf_config_dtype(const json& doc) {
  for (const char* key : {"torch_dtype", "dtype"})
    if (doc.contains(key) && doc[key].is_string()) return doc[key].get<std::string>();
  return "";
}

}  // namespace kdtrain::io
