// Hugging Face checkpoints as kdtrain reads them (docs/export.md).
//
// A directory that transformers' save_pretrained wrote for LlamaForCausalLM or
// Qwen2ForCausalLM loads wherever a kdtrain checkpoint does (kd.teacher,
// model.init, dump, info): config.json without kdtrain's keys is the baseline
// variant, weights may be sharded and bf16 / f16 / f32. These helpers hold the
// HF-specific rules that io/checkpoint_format.cpp applies:
//   accepted   architectures LlamaForCausalLM (model_type llama), Qwen2ForCausalLM
//              (qwen2), KdtrainForCausalLM (kdtrain, what `kdtrain export` writes
//              for non-baseline variants); rope_scaling null, default or llama3
//              (key "rope_type" or the older "type"); missing head_dim =
//              hidden/heads; Qwen2 implies q/k/v bias; a tied model may also store
//              lm_head.weight (ignored, as transformers does); rotary inv_freq
//              buffers of old LLaMA checkpoints are skipped.
//   refused    any other architecture or model_type, hidden_act other than silu,
//              mlp_bias, LLaMA attention_bias (it adds an o_proj bias kdtrain does
//              not have), Qwen2 sliding-window attention, other rope types, and
//              (in checkpoint_format.cpp) missing tensors and shape mismatches.
// Every refusal names the file and the key or tensor.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"

namespace kdtrain::io {

// The transformers classes a config.json's `architectures` names: the stock
// LLaMA and Qwen2 ones, and kdtrain's own (trust_remote_code) for every variant
// but the baseline.
constexpr const char* kLlamaClass = "LlamaForCausalLM";
constexpr const char* kQwen2Class = "Qwen2ForCausalLM";
constexpr const char* kKdtrainClass = "KdtrainForCausalLM";

// The family of a config.json, checking model_type against `architectures`
// (when present) and, for model_type "kdtrain", reading base_model_type.
ModelFamily hf_family_of(const nlohmann::json& doc, const std::string& model_type,
                         const std::string& source);

// Refuses configs whose model kdtrain would compute differently (see above).
void check_hf_supported(const nlohmann::json& doc, const ModelConfig& model, const std::string& source);

// Tensors of HF checkpoints that carry no parameters (rotary inv_freq buffers).
bool hf_ignored_tensor(const std::string& name);

// A hint for an unexpected tensor: which config key would have made it expected.
std::string hf_unexpected_tensor_hint(const std::string& name);

// config.json's "torch_dtype" (or "dtype", as transformers >= 4.56 writes it);
// "" when absent.
std::string hf_config_dtype(const nlohmann::json& doc);

}  // namespace kdtrain::io
