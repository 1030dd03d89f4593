// Small hand-built model configs and helpers shared by the model-level tests,
// independent of the presets so a preset change cannot hide a model bug.
#pragma once
#include <cstdint>
#include <vector>

#include "config/config.h"
#include "core/rng.h"

namespace kdtrain::testing {

// GQA, tied head, llama3 RoPE scaling with a short original context so the
// scaling changes frequencies, no bias; sizes deliberately not multiples of 8.
inline ModelConfig llama_like() {
  ModelConfig m;
  m.family = "llama";
  m.hidden_size = 36;
  m.intermediate_size = 52;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 6;
  m.num_key_value_heads = 2;
  m.head_dim = 6;
  m.vocab_size = 61;
  m.max_position_embeddings = 64;
  m.rms_norm_eps = 1e-5;
  m.rope_theta = 500.0;
  m.rope_scaling.type = "llama3";
  m.rope_scaling.factor = 4.0;
  m.rope_scaling.original_max_position_embeddings = 16;
  m.tie_word_embeddings = true;
  m.attention_bias = false;
  return m;
}

// MHA, q/k/v bias, untied head.
inline ModelConfig qwen_like() {
  ModelConfig m;
  m.family = "qwen2";
  m.hidden_size = 30;
  m.intermediate_size = 44;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 3;
  m.num_key_value_heads = 3;
  m.head_dim = 10;
  m.vocab_size = 53;
  m.max_position_embeddings = 64;
  m.rms_norm_eps = 1e-6;
  m.rope_theta = 1e6;
  m.tie_word_embeddings = false;
  m.attention_bias = true;
  return m;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));
  return t;
}

inline constexpr auto kAllVariants = all_attention_variants();

}  // namespace kdtrain::testing
