// Named architectures as one table (presets.cpp): preset_names(), model_preset(),
// the "did you mean" of an unknown name and `kdtrain info --presets` all read it.
// A model is written as its layer shape plus its family's traits, so a test
// fixture spells a whole small model in two lines, as a preset row does.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace kdtrain {

// The sizes that set one model of a family apart from another.
struct LayerShape {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim;
};

// What the rest of a model card fixes: tokenizer, context, norms, RoPE, tying, bias.
struct ModelTraits {
  ModelFamily family;
  int64_t vocab, max_position_embeddings;
  double rms_norm_eps, rope_theta;
  RopeScaling rope_scaling;
  bool tie_word_embeddings, attention_bias;
};

ModelConfig make_model(const ModelTraits& traits, const LayerShape& shape);

struct Preset {
  std::string name;
  std::string about;  // where it comes from, or what it is for
  LayerShape shape;
  ModelTraits traits;
};

// Every preset, in the order `kdtrain info --presets` lists them.
const std::vector<Preset>& presets();

}  // namespace kdtrain
