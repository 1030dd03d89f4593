// Model checkpoint directories, in Hugging Face layout so other tools read them:
//   <dir>/config.json        HF keys plus kdtrain's attention_variant, alpha_activation,
//                            alpha_momentum, affine_bias_divisor (absent in an affine
//                            checkpoint: `visible`, what kdtrain did before), and for
//                            affine variants affine_inference_n and affine_train_length (absent:
//                            the train.seq_len of run_config.json beside it, if any); the baseline is a LlamaForCausalLM /
//                            Qwen2ForCausalLM, every other variant a KdtrainForCausalLM
//                            (model_type "kdtrain", base_model_type the family, auto_map),
//                            which stock transformers loads only with trust_remote_code
//   <dir>/model.safetensors  fp32 tensors under their HF names (alpha_ma buffers included)
//   <dir>/configuration_kdtrain.py, modeling_kdtrain.py   non-baseline variants: the
//                            modeling code trust_remote_code runs (io/hf_modeling_sources.h)
// Readers also accept Hugging Face checkpoints as transformers saves them:
// LlamaForCausalLM / Qwen2ForCausalLM configs (no kdtrain keys: baseline),
// sharded weights (model.safetensors.index.json + shards) and bf16/f16 weights,
// converted to fp32; io/hf_checkpoint.h lists what is refused. docs/export.md
// has the details.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace kdtrain {
struct ParamLayout;
struct ParamSpec;
}

namespace kdtrain::io {

// A tensor to write, borrowed from the caller.
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct ModelCheckpoint {
  ModelConfig model;
  AttentionConfig attention;
  std::map<std::string, LoadedTensor> tensors;
};

// config.json <-> configs. parse_hf_config names `source` and the key on errors;
// keys Hugging Face itself treats as optional get HF's defaults (docs/formats.md).
nlohmann::json hf_config_json(const ModelConfig& model, const AttentionConfig& attention);
void parse_hf_config(const nlohmann::json& doc, const std::string& source, ModelConfig* model,
                     AttentionConfig* attention);
void read_hf_config(const std::string& config_path, ModelConfig* model, AttentionConfig* attention);

// Writes config.json and model.safetensors into an existing directory, e.g. a
// StagedDir that also receives optimizer state. Not atomic by itself.
void write_model_files(const std::string& dir, const ModelConfig& model,
                       const AttentionConfig& attention, const std::vector<TensorRef>& tensors);

// Atomic: stages "<dir>.tmp.<pid>", fsyncs, renames to dir (replacing it).
// `output_command` ("init"): the command whose output manifest
// (io/output_dir.h) the directory gets, listed in its checksums; "" for none.
void write_model_checkpoint(const std::string& dir, const ModelConfig& model,
                            const AttentionConfig& attention, const std::vector<TensorRef>& tensors,
                            const std::string& output_command = "");
void write_model_checkpoint(const std::string& dir, const ModelConfig& model,
                            const AttentionConfig& attention, const ParamLayout& layout,
                            const float* arena, const std::string& output_command = "");

// Every tensor of a layout as a TensorRef into the arena.
std::vector<TensorRef> layout_tensors(const ParamLayout& layout, const float* arena);

ModelCheckpoint read_model_checkpoint(const std::string& dir);

// What check_model_weights found in a checkpoint's weight files.
struct WeightsSummary {
  std::vector<std::string> files;              // model.safetensors or the shards
  std::map<std::string, int64_t> dtype_counts;  // "BF16" -> tensors of the layout stored so
  std::vector<std::string> ignored;            // tensors skipped (HF rotary inv_freq buffers)
  bool tied_head_in_file = false;              // tied model whose file also holds lm_head.weight
};

// Checks dir's weight files against the layout from their headers alone (no data
// is read): every spec present with its exact shape, no other tensor except HF
// rotary `inv_freq` buffers and, for a tied model, a stored lm_head.weight of the
// embedding's shape (transformers ignores it; so do we). Errors name the tensor
// and the file.
WeightsSummary check_model_weights(const std::string& dir, const ParamLayout& layout);

// check_model_weights, then fills arena (layout.total floats) from the files,
// converting BF16 / F16 / F64 to fp32. A tied model's stored lm_head.weight is
// ignored, with a warning when it differs from the embedding.
void load_model_weights(const std::string& dir, const ParamLayout& layout, float* arena);

// check_model_weights, then hands every parameter tensor to `sink` in layout
// order, each checked finite, straight from the mapped files: a BF16 tensor as
// its n bytes-pairs (bf16 = true; any alignment), any other dtype converted to
// fp32 (bf16 = false). Returns what load_model_weights warns about: whether a
// tied checkpoint also stores an lm_head (ignored). `before_unmap` runs last,
// on success or on an error, while the files are still mapped (a consumer still
// reading a tensor on another thread stops there).
using WeightSink = std::function<void(const ParamSpec& spec, const void* values, bool bf16)>;
WeightsSummary stream_model_weights(const std::string& dir, const ParamLayout& layout,
                                    const WeightSink& sink,
                                    const std::function<void()>& before_unmap = {});

}  // namespace kdtrain::io
