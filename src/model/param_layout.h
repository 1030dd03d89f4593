// The parameter table: every tensor of the model, its Hugging Face name, shape
// (out_features, in_features as PyTorch stores it), role and offset in the one
// parameter arena. Gradients use the same offsets in a second arena of the same
// size, so one memset zeroes them and one collective reduces them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace kdtrain {

enum class ParamRole {
  embedding,  // model.embed_tokens.weight
  matrix,     // projections and lm_head: weight-decayed
  norm,       // RMSNorm gains: no decay
  bias,       // q/k/v biases: no decay
  sink,       // per-head sink logits: no decay
  buffer,     // alpha_ma: saved, never trained
};

// The part of the model a tensor belongs to, for the counts `kdtrain info` prints.
enum class ParamComponent {
  embedding,  // token embedding
  attention,  // q/k/v/o weights and biases
  variant,    // what the attention variant adds: sinks, alpha_proj (+ alpha_ma), gate_proj
  mlp,        // gate/up/down projections
  norm,       // RMSNorm gains
  lm_head,    // untied output head
};

struct ParamSpec {
  std::string name;            // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // PyTorch order
  ParamRole role;
  ParamComponent component;
  int64_t layer = -1;          // decoder layer, -1 for embedding / final norm / head
  int64_t offset = 0;          // in elements from the arena start
  int64_t numel() const;
  bool trainable() const { return role != ParamRole::buffer; }
  bool decayed() const { return role == ParamRole::matrix || role == ParamRole::embedding; }
};

// Offsets of one decoder layer's tensors in the arena (-1 when the variant lacks it).
// q, k, v weights (and biases) are adjacent so they act as one fused
// ((H + 2*Hkv)*D, C) matrix.
struct LayerOffsets {
  int64_t begin = 0, end = 0;     // the layer's tensors fill arena elements [begin, end)
  int64_t input_norm = -1;        // (C)
  int64_t qkv_weight = -1;        // ((H+2Hkv)*D, C): q_proj, k_proj, v_proj
  int64_t qkv_bias = -1;          // ((H+2Hkv)*D)
  int64_t o_weight = -1;          // (C, H*D)
  int64_t sinks = -1;             // (H)
  int64_t alpha_weight = -1;      // (H, C)
  int64_t alpha_ma = -1;          // (H) buffer
  int64_t gate_weight = -1;       // (H*D, C)
  int64_t post_norm = -1;         // (C)
  int64_t mlp_gate_weight = -1;   // (F, C), adjacent to up: a fused (2F, C) matrix
  int64_t mlp_up_weight = -1;     // (F, C)
  int64_t mlp_down_weight = -1;   // (C, F)
};

struct ParamLayout {
  std::vector<ParamSpec> specs;
  std::vector<LayerOffsets> layers;
  int64_t embed = -1;       // (V, C)
  int64_t final_norm = -1;  // (C)
  int64_t lm_head = -1;     // (V, C); equals `embed` when tied
  int64_t total = 0;        // arena size in elements

  const ParamSpec* find(const std::string& name) const;  // nullptr if absent
  // Counts exclude buffers (alpha_ma); tied lm_head counts once.
  int64_t trainable_count() const;
};

ParamLayout make_param_layout(const ModelConfig& model, const AttentionConfig& attention);

// Parameter counts per component (ParamSpec::component), as `kdtrain info` prints them.
struct ParamBreakdown {
  int64_t embedding = 0;
  int64_t attention = 0;   // q/k/v/o weights and biases
  int64_t variant = 0;     // sinks, alpha_proj, gate_proj
  int64_t mlp = 0;
  int64_t norms = 0;
  int64_t lm_head = 0;     // 0 when tied
  int64_t total = 0;
};
ParamBreakdown count_params(const ParamLayout& layout);

}  // namespace kdtrain
