// Checkpoint directories. The config.json round trip spells the attention
// variant through to_string/parse_attention_variant (src/config/choices.h).
#include <filesystem>
#include <fstream>

#include "config/presets.h"
#include "core/error.h"
#include "io/checkpoint_format.h"
#include "model/param_layout.h"
#include "support/temp_dir.h"
#include "support/test_common.h"

using namespace kdtrain;
using namespace kdtrain::io;

namespace {

using kdtrain::testing::TempDir;

ModelConfig tiny_model() {
  return make_model({ModelFamily::llama, /*vocab=*/32, /*max_pos=*/64, 1e-6, /*theta=*/500000.0, {RopeScalingType::llama3, 32.0},
                     /*tied=*/true, /*bias=*/false},
                    {16, 24, 2, 4, 2, 4});
}

std::vector<float> arena_for(const ParamLayout& layout) {
  std::vector<float> arena(static_cast<size_t>(layout.total));
  for (size_t i = 0; i < arena.size(); ++i) arena[i] = 0.001f * static_cast<float>(i) - 1.0f;
  return arena;
}

}  // namespace

TEST_CASE("checkpoint: config.json and weights round trip", "[checkpoint]") {
  TempDir tmp;
  ModelConfig m = tiny_model();
  AttentionConfig a;
  a.variant = AttentionVariant::affine;
  a.alpha_activation = AlphaActivation::sigmoid;
  a.alpha_momentum = 0.8;
  ParamLayout layout = make_param_layout(m, a);
  std::vector<float> arena = arena_for(layout);
  const std::string dir = tmp.file("ckpt");
  write_model_checkpoint(dir, m, a, layout, arena.data());

  ModelCheckpoint c = read_model_checkpoint(dir);
  REQUIRE(c.model.family == ModelFamily::llama);
  REQUIRE(c.model.hidden_size == 16);
  REQUIRE(c.model.num_key_value_heads == 2);
  REQUIRE(c.model.head_dim == 4);
  REQUIRE(c.model.rope_theta == 500000.0);
  REQUIRE(c.model.rope_scaling.type == RopeScalingType::llama3);
  REQUIRE(c.model.rope_scaling.factor == 32.0);
  REQUIRE(c.model.tie_word_embeddings);
  REQUIRE_FALSE(c.model.attention_bias);
  REQUIRE(c.attention.variant == AttentionVariant::affine);
  REQUIRE(c.attention.alpha_activation == AlphaActivation::sigmoid);
  REQUIRE(c.attention.alpha_momentum == 0.8);
  REQUIRE(c.tensors.size() == layout.specs.size());
  for (const ParamSpec& s : layout.specs) {
    const LoadedTensor& t = c.tensors.at(s.name);
    REQUIRE(t.shape == s.shape);
    REQUIRE(std::equal(t.values.begin(), t.values.end(), arena.begin() + s.offset));
  }
  std::vector<float> loaded(arena.size(), 0.0f);
  load_model_weights(dir, layout, loaded.data());
  REQUIRE(loaded == arena);

  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  // A variant is not a stock LLaMA: transformers must refuse it without trust_remote_code,
  // and with it find the modeling code beside the weights.
  REQUIRE(config["architectures"] == nlohmann::json::array({"KdtrainForCausalLM"}));
  REQUIRE(config["model_type"] == "kdtrain");
  REQUIRE(config["base_model_type"] == "llama");
  REQUIRE(config["auto_map"]["AutoModelForCausalLM"] == "modeling_kdtrain.KdtrainForCausalLM");
  REQUIRE(fs::exists(fs::path(dir) / "modeling_kdtrain.py"));
  REQUIRE(fs::exists(fs::path(dir) / "configuration_kdtrain.py"));
  REQUIRE(config["rope_scaling"]["rope_type"] == "llama3");
  REQUIRE(config["attention_variant"] == "affine");

  // Rewriting replaces the directory and leaves no staging copies.
  m.family = ModelFamily::qwen2;
  m.rope_scaling.type = RopeScalingType::none;
  a.variant = AttentionVariant::baseline;
  write_model_checkpoint(dir, m, a, make_param_layout(m, a), arena.data());
  config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  REQUIRE(config["architectures"] == nlohmann::json::array({"Qwen2ForCausalLM"}));
  REQUIRE(config["model_type"] == "qwen2");
  REQUIRE_FALSE(config.contains("auto_map"));
  REQUIRE_FALSE(fs::exists(fs::path(dir) / "modeling_kdtrain.py"));
  REQUIRE(config["rope_scaling"].is_null());
  REQUIRE(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 1);
}

TEST_CASE("checkpoint: the affine bias divisor is recorded; an older config.json reads as visible",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig m = tiny_model();
  for (AffineBiasDivisor d : {AffineBiasDivisor::sequence, AffineBiasDivisor::visible}) {
    AttentionConfig a;
    a.variant = AttentionVariant::affine_gated;
    a.affine_bias_divisor = d;
    const ParamLayout layout = make_param_layout(m, a);
    const std::vector<float> arena = arena_for(layout);
    const std::string dir = tmp.file(std::string("ckpt_") + to_string(d));
    write_model_checkpoint(dir, m, a, layout, arena.data());
    REQUIRE(nlohmann::json::parse(std::ifstream(dir + "/config.json"))["affine_bias_divisor"] == to_string(d));
    REQUIRE(read_model_checkpoint(dir).attention.affine_bias_divisor == d);
  }
  // A checkpoint from before the key: kdtrain divided by the visible keys then.
  AttentionConfig a;
  a.variant = AttentionVariant::affine;
  nlohmann::json doc = hf_config_json(m, a);
  doc.erase("affine_bias_divisor");
  ModelConfig got_m;
  AttentionConfig got_a;
  parse_hf_config(doc, "old/config.json", &got_m, &got_a);
  CHECK(got_a.affine_bias_divisor == AffineBiasDivisor::visible);
  // A bad value names the choices.
  doc["affine_bias_divisor"] = "keys";
  CHECK_THROWS_WITH(parse_hf_config(doc, "bad/config.json", &got_m, &got_a),
                    Contains("affine bias divisor") && Contains("sequence") && Contains("visible"));
}

TEST_CASE("checkpoint: loader names the tensor and file on mismatches", "[checkpoint]") {
  TempDir tmp;
  ModelConfig m = tiny_model();
  AttentionConfig a;
  ParamLayout layout = make_param_layout(m, a);
  std::vector<float> arena = arena_for(layout);
  std::vector<float> out(arena.size());
  std::vector<TensorRef> refs = layout_tensors(layout, arena.data());
  const std::string dir = tmp.file("bad");

  SECTION("missing tensor") {
    refs.erase(refs.begin() + 1);
    const std::string missing = layout.specs[1].name;
    write_model_checkpoint(dir, m, a, refs);
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains("model.safetensors") && Contains("missing tensor '" + missing + "'"));
  }
  SECTION("wrong shape") {
    refs[0].shape = {refs[0].shape[1], refs[0].shape[0]};
    write_model_checkpoint(dir, m, a, refs);
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains("model.safetensors") && Contains(refs[0].name) && Contains("expected"));
  }
  SECTION("unexpected tensor") {
    float extra[2] = {1, 2};
    refs.push_back(TensorRef{"lm_head.weight.extra", {2}, extra});
    write_model_checkpoint(dir, m, a, refs);
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains("model.safetensors") && Contains("unexpected tensor 'lm_head.weight.extra'"));
  }
  SECTION("no weights at all") {
    REQUIRE_THROWS_WITH(load_model_weights(tmp.path.string(), layout, out.data()),
                        Contains(tmp.path.string()) && Contains("model.safetensors"));
  }
}

TEST_CASE("checkpoint: config.json errors and Hugging Face defaults", "[checkpoint]") {
  ModelConfig m;
  AttentionConfig a;
  nlohmann::json qwen = {{"model_type", "qwen2"},       {"hidden_size", 32},
                         {"intermediate_size", 64},     {"num_hidden_layers", 2},
                         {"num_attention_heads", 4},    {"vocab_size", 100},
                         {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1000000}};
  parse_hf_config(qwen, "q/config.json", &m, &a);
  REQUIRE(m.family == ModelFamily::qwen2);
  REQUIRE(m.head_dim == 8);               // hidden / heads
  REQUIRE(m.num_key_value_heads == 4);    // = heads
  REQUIRE(m.attention_bias);              // Qwen2 always has q/k/v bias
  REQUIRE_FALSE(m.tie_word_embeddings);   // transformers' default
  REQUIRE(m.rope_scaling.type == RopeScalingType::none);
  REQUIRE(a.variant == AttentionVariant::baseline);

  nlohmann::json missing = qwen;
  missing.erase("vocab_size");
  REQUIRE_THROWS_WITH(parse_hf_config(missing, "q/config.json", &m, &a),
                      Contains("q/config.json") && Contains("'vocab_size'"));
  nlohmann::json wrong = qwen;
  wrong["num_hidden_layers"] = "two";
  REQUIRE_THROWS_WITH(parse_hf_config(wrong, "q/config.json", &m, &a),
                      Contains("q/config.json") && Contains("'num_hidden_layers'"));
  nlohmann::json family = qwen;
  family["model_type"] = "gpt2";
  REQUIRE_THROWS_WITH(parse_hf_config(family, "q/config.json", &m, &a), Contains("gpt2"));
  nlohmann::json rope = qwen;
  rope["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  REQUIRE_THROWS_WITH(parse_hf_config(rope, "q/config.json", &m, &a),
                      Contains("q/config.json") && Contains("low_freq_factor"));
  rope["rope_scaling"] = {{"type", "yarn"}};
  REQUIRE_THROWS_WITH(parse_hf_config(rope, "q/config.json", &m, &a), Contains("yarn"));
}
