// Fresh initialisation of every tensor of the parameter table (docs/model.md):
//   embeddings and every projection (q/k/v/o, gate/up/down, lm_head, alpha_proj,
//   gate_proj) ~ N(0, initializer_range), as Hugging Face LLaMA/Qwen2 do;
//   q/k/v biases = 0; RMSNorm gains = 1; sinks ~ N(0, attention.sink_init_std),
//   as Hugging Face's GPT-OSS does; alpha_ma = 0 (docs/model.md).
// Each tensor draws from its own stream seeded by (seed, name), so variants
// with the same seed share every common tensor bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "model/param_layout.h"

namespace kdtrain {

std::vector<float> init_params(const ParamLayout& layout, const ModelConfig& model,
                               const AttentionConfig& attention, uint64_t seed);

}  // namespace kdtrain
