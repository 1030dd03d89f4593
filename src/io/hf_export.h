// `kdtrain export`: a kdtrain (or Hugging Face) checkpoint directory -> a
// Hugging Face model directory (docs/export.md):
//   config.json        baseline: a stock LlamaForCausalLM config (family llama) or
//                      Qwen2ForCausalLM (family qwen2, or llama with q/k/v bias,
//                      which stock LLaMA cannot express); other variants:
//                      KdtrainForCausalLM with auto_map to the two files below
//   model.safetensors  HF tensor names, fp32 or bf16 (round to nearest even);
//                      tied models store embed_tokens only, as transformers does;
//                      a Qwen2 export of a model without q/k/v bias stores zero
//                      biases, which computes the same function
//   configuration_kdtrain.py, modeling_kdtrain.py, variants.py   non-baseline only
//                      (embedded in the binary, io/hf_modeling_sources.h)
//   tokenizer files    copied from --tokenizer (tokenizer.json, tokenizer_config.json,
//                      special_tokens_map.json, vocab.json, merges.txt, ...)
// The directory is staged and renamed into place: a failed export leaves nothing.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace kdtrain::io {

enum class ExportDtype { f32, bf16 };
// "fp32" / "float32" / "f32" or "bf16" / "bfloat16"; throws naming --dtype.
ExportDtype parse_export_dtype(const std::string& name);

struct ExportOptions {
  std::string checkpoint;  // source directory (config.json + weights)
  std::string out;         // directory to create
  std::string tokenizer;   // "" or a directory (or a tokenizer.json file) to copy
  ExportDtype dtype = ExportDtype::f32;
  bool force = false;      // replace a non-empty `out`
  std::optional<AffineInferenceN> affine_n;  // replaces the checkpoint's affine_inference_n
};

struct ExportSummary {
  std::string architecture;        // "LlamaForCausalLM", "Qwen2ForCausalLM", "KdtrainForCausalLM"
  std::vector<std::string> files;  // names written into `out`
  int64_t tensors = 0;
  int64_t parameters = 0;          // trainable, tied head counted once
  std::vector<std::string> notes;  // choices the user should know about
};

// The HF class an exported model gets (see the file comment).
std::string hf_export_architecture(const ModelConfig& model, const AttentionConfig& attention);
// config.json of an export.
nlohmann::json hf_export_config(const ModelConfig& model, const AttentionConfig& attention,
                                ExportDtype dtype);

ExportSummary export_hf_checkpoint(const ExportOptions& options);

}  // namespace kdtrain::io
