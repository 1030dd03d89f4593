// Presets against the Hugging Face config.json values (see src/config/presets.cpp
// for where each was checked) and the paper's ΔParams column (docs/model.md), computed
// from the parameter table.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

#include "config/config.h"
#include "config/presets.h"
#include "core/error.h"
#include "model/param_layout.h"

using namespace kdtrain;

namespace {

struct Expected {
  const char* name;
  const char* family;
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_pos;
  double rms_eps, theta;
  const char* rope_type;
  double rope_factor;
  bool tied, bias;
};

const Expected kPresets[] = {
    {"qwen1.5-0.5b", "qwen2", 1024, 2816, 24, 16, 16, 64, 151936, 32768, 1e-6, 1e6, "default", 0, true, true},
    {"qwen1.5-1.8b", "qwen2", 2048, 5504, 24, 16, 16, 128, 151936, 32768, 1e-6, 1e6, "default", 0, false, true},
    {"llama3.2-1b", "llama", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 1e-5, 5e5, "llama3", 32, true, false},
    {"llama3.2-3b", "llama", 3072, 8192, 28, 24, 8, 128, 128256, 131072, 1e-5, 5e5, "llama3", 32, true, false},
    {"llama3.1-8b", "llama", 4096, 14336, 32, 32, 8, 128, 128256, 131072, 1e-5, 5e5, "llama3", 8, false, false},
};

int64_t total_params(const std::string& preset, AttentionVariant variant) {
  AttentionConfig a;
  a.variant = variant;
  return count_params(make_param_layout(model_preset(preset), a)).total;
}

std::string delta_m(const std::string& preset, AttentionVariant variant) {
  const int64_t delta = total_params(preset, variant) - total_params(preset, AttentionVariant::baseline);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", double(delta) / 1e6);
  return buf;
}

}  // namespace

TEST_CASE("presets: values match the Hugging Face configs", "[presets]") {
  for (const Expected& e : kPresets) {
    INFO(e.name);
    const ModelConfig m = model_preset(e.name);
    CHECK(m.preset == e.name);
    CHECK(std::string(to_string(m.family)) == e.family);
    CHECK(m.hidden_size == e.hidden);
    CHECK(m.intermediate_size == e.intermediate);
    CHECK(m.num_hidden_layers == e.layers);
    CHECK(m.num_attention_heads == e.heads);
    CHECK(m.num_key_value_heads == e.kv_heads);
    CHECK(m.head_dim == e.head_dim);
    CHECK(m.vocab_size == e.vocab);
    CHECK(m.max_position_embeddings == e.max_pos);
    CHECK(m.rms_norm_eps == e.rms_eps);
    CHECK(m.rope_theta == e.theta);
    CHECK(std::string(to_string(m.rope_scaling.type)) == e.rope_type);
    if (std::string(e.rope_type) == "llama3") {
      CHECK(m.rope_scaling.factor == e.rope_factor);
      CHECK(m.rope_scaling.low_freq_factor == 1.0);
      CHECK(m.rope_scaling.high_freq_factor == 4.0);
      CHECK(m.rope_scaling.original_max_position_embeddings == 8192);
    }
    CHECK(m.tie_word_embeddings == e.tied);
    CHECK(m.attention_bias == e.bias);
  }
}

TEST_CASE("presets: total parameter counts (Llama: the published exact counts; Qwen1.5: 464M and 1.84B as published)", "[presets]") {
  CHECK(total_params("llama3.2-1b", AttentionVariant::baseline) == 1235814400);
  CHECK(total_params("llama3.2-3b", AttentionVariant::baseline) == 3212749824);
  CHECK(total_params("llama3.1-8b", AttentionVariant::baseline) == 8030261248);
  CHECK(total_params("qwen1.5-0.5b", AttentionVariant::baseline) == 463987712);
  CHECK(total_params("qwen1.5-1.8b", AttentionVariant::baseline) == 1836828672);
}

TEST_CASE("presets: ΔParams over baseline match the paper's table", "[presets]") {
  CHECK(delta_m("qwen1.5-0.5b", AttentionVariant::sink) == "0.0");
  CHECK(delta_m("llama3.2-1b", AttentionVariant::sink) == "0.0");
  CHECK(delta_m("llama3.2-3b", AttentionVariant::sink) == "0.0");
  CHECK(delta_m("qwen1.5-0.5b", AttentionVariant::affine) == "0.4");
  CHECK(delta_m("llama3.2-1b", AttentionVariant::affine) == "1.0");
  CHECK(delta_m("llama3.2-3b", AttentionVariant::affine) == "2.1");
  CHECK(delta_m("llama3.2-1b", AttentionVariant::gated) == "67.1");
  CHECK(delta_m("llama3.2-3b", AttentionVariant::gated) == "264.2");
  CHECK(delta_m("llama3.2-1b", AttentionVariant::affine_gated) == "68.2");
  CHECK(delta_m("llama3.2-3b", AttentionVariant::affine_gated) == "266.3");
  for (const std::string& name : preset_names()) CHECK(delta_m(name, AttentionVariant::baseline) == "0.0");
}

TEST_CASE("presets: tiny presets are small, vocab 256, and exercise their features", "[presets]") {
  for (const char* name : {"tiny-llama", "tiny-qwen"}) {
    INFO(name);
    const ModelConfig m = model_preset(name);
    CHECK(m.vocab_size == 256);
    for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::affine_gated})
      CHECK(total_params(name, v) < 1000000);
    Config c;
    c.model = m;
    CHECK_NOTHROW(validate(c));
  }
  const ModelConfig llama = model_preset("tiny-llama");
  CHECK(llama.num_key_value_heads < llama.num_attention_heads);  // GQA
  CHECK(llama.tie_word_embeddings);
  CHECK_FALSE(llama.attention_bias);
  CHECK(llama.rope_scaling.type == RopeScalingType::llama3);
  // Scaling must change some frequencies: the longest rotary wavelength
  // 2*pi*theta^((D-2)/D) exceeds original_max / low_freq_factor.
  CHECK(llama.rope_scaling.original_max_position_embeddings < 100);
  CHECK(llama.intermediate_size % 32 != 0);
  const ModelConfig qwen = model_preset("tiny-qwen");
  CHECK(qwen.num_key_value_heads == qwen.num_attention_heads);  // MHA
  CHECK(qwen.attention_bias);
  CHECK_FALSE(qwen.tie_word_embeddings);
  CHECK(qwen.rope_theta == 1e6);
  CHECK(qwen.family == ModelFamily::qwen2);
  CHECK(qwen.hidden_size % 32 != 0);
}

TEST_CASE("presets: unknown name lists the known ones", "[presets]") {
  try {
    model_preset("llama-9000");
    FAIL("no error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("llama-9000") != std::string::npos);
    for (const std::string& name : preset_names()) CHECK(msg.find(name) != std::string::npos);
  }
}

TEST_CASE("presets: a misspelled name suggests the nearest preset", "[presets]") {
  CHECK_THROWS_WITH(model_preset("llama3.2-1B"), Catch::Matchers::Contains("did you mean 'llama3.2-1b'?"));
  CHECK_THROWS_WITH(model_preset("llama-9000"), !Catch::Matchers::Contains("did you mean"));
}

TEST_CASE("presets: the table names each preset once, and each builds a valid model", "[presets]") {
  std::vector<std::string> names;
  for (const Preset& p : presets()) {
    INFO(p.name);
    CHECK(!p.about.empty());
    CHECK(std::find(names.begin(), names.end(), p.name) == names.end());
    names.push_back(p.name);
    Config c;
    c.model = model_preset(p.name);
    CHECK(c.model.preset == p.name);
    CHECK_NOTHROW(validate(c));
  }
  CHECK(names == preset_names());
}
