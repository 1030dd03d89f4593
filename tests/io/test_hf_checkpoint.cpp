// Hugging Face checkpoints in, Hugging Face directories out (io/hf_checkpoint.h,
// io/hf_export.h). The directories here are written by hand in the layout
// transformers' save_pretrained produces; scripts/tests/test_hf_parity.py checks
// the same paths against transformers itself.
#include <cmath>
#include <cstring>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/hf_checkpoint.h"
#include "io/hf_export.h"
#include "io/hf_modeling_sources.h"
#include "io/safetensors.h"
#include "model/param_layout.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::io;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// config.json as transformers 4.57 writes it for a small GQA LLaMA with llama3
// rope scaling (older "type" key) and no head_dim (so hidden / heads = 4).
json llama_hf_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"hidden_act", "silu"},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 32},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 500000.0},
          {"rope_scaling",
           {{"type", "llama3"},
            {"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 16}}},
          {"tie_word_embeddings", true},
          {"dtype", "bfloat16"},
          {"transformers_version", "4.57.3"}};
}

void write_json(const std::string& path, const json& doc) {
  std::ofstream out(path);
  out << doc.dump(2);
}

std::vector<float> arena_for(const ParamLayout& layout) {
  std::vector<float> arena(static_cast<size_t>(layout.total));
  for (size_t i = 0; i < arena.size(); ++i) arena[i] = 0.37f * std::sin(0.731f * static_cast<float>(i));
  return arena;
}

// Writes `config` and the layout's tensors (fp32, or bf16) into dir, in
// `shards` files with an HF index when shards > 1. `drop` omits a tensor,
// `extra` adds tensors.
void write_hf_dir(const std::string& dir, const json& config, const ParamLayout& layout,
                  const std::vector<float>& arena, int shards, bool bf16,
                  const std::string& drop = "", const std::vector<TensorRef>& extra = {}) {
  fs::create_directories(dir);
  write_json(dir + "/config.json", config);
  std::vector<TensorRef> refs;
  for (const TensorRef& t : layout_tensors(layout, arena.data()))
    if (t.name != drop) refs.push_back(t);
  refs.insert(refs.end(), extra.begin(), extra.end());
  std::vector<SafetensorsWriter> writers(static_cast<size_t>(shards));
  json weight_map = json::object();
  for (size_t i = 0; i < refs.size(); ++i) {
    const size_t s = i % static_cast<size_t>(shards);
    if (bf16) writers[s].add_f32_as_bf16(refs[i].name, refs[i].shape, refs[i].data);
    else writers[s].add_f32(refs[i].name, refs[i].shape, refs[i].data);
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", s + 1, shards);
    weight_map[refs[i].name] = shards == 1 ? "model.safetensors" : name;
  }
  for (size_t s = 0; s < writers.size(); ++s) {
    writers[s].set_metadata("format", "pt");
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", s + 1, shards);
    writers[s].write(dir + "/" + (shards == 1 ? std::string("model.safetensors") : name));
  }
  if (shards > 1)
    write_json(dir + "/model.safetensors.index.json",
               {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("hf import: a transformers-style LLaMA directory loads (sharded, bf16)", "[hf]") {
  testing::TempDir tmp("hf");
  ModelConfig m;
  AttentionConfig a;
  parse_hf_config(llama_hf_config(), "config.json", &m, &a);
  REQUIRE(m.family == ModelFamily::llama);
  REQUIRE(m.head_dim == 4);  // hidden / heads
  REQUIRE(m.rope_scaling.type == RopeScalingType::llama3);
  REQUIRE(m.rope_scaling.original_max_position_embeddings == 16);
  REQUIRE(a.variant == AttentionVariant::baseline);
  const ParamLayout layout = make_param_layout(m, a);
  const std::vector<float> arena = arena_for(layout);

  // A tied model that also stores lm_head.weight (equal to the embedding) and an
  // old-style rotary buffer: both are accepted and ignored.
  const ParamSpec* embed = layout.find("model.embed_tokens.weight");
  std::vector<float> inv_freq = {1.f, 0.5f};
  const std::vector<TensorRef> extra = {
      {"lm_head.weight", embed->shape, arena.data() + embed->offset},
      {"model.layers.0.self_attn.rotary_emb.inv_freq", {2}, inv_freq.data()}};
  const std::string dir = tmp.file("llama");
  write_hf_dir(dir, llama_hf_config(), layout, arena, 3, /*bf16=*/true, "", extra);

  const WeightsSummary summary = check_model_weights(dir, layout);
  REQUIRE(summary.files.size() == 3);
  REQUIRE(summary.dtype_counts.at("BF16") == static_cast<int64_t>(layout.specs.size()));
  REQUIRE(summary.tied_head_in_file);
  REQUIRE(summary.ignored == std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});

  std::vector<float> loaded(arena.size());
  load_model_weights(dir, layout, loaded.data());
  for (size_t i = 0; i < arena.size(); ++i)
    REQUIRE(loaded[i] == bf16_to_float(float_to_bf16(arena[i])));
}

TEST_CASE("hf import: Qwen2 config implies q/k/v bias; tie defaults to false", "[hf]") {
  json q = llama_hf_config();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q["model_type"] = "qwen2";
  q.erase("attention_bias");
  q.erase("mlp_bias");
  q.erase("tie_word_embeddings");
  q["rope_scaling"] = nullptr;
  q["use_sliding_window"] = false;
  q["layer_types"] = {"full_attention", "full_attention"};
  ModelConfig m;
  AttentionConfig a;
  parse_hf_config(q, "q/config.json", &m, &a);
  REQUIRE(m.family == ModelFamily::qwen2);
  REQUIRE(m.attention_bias);
  REQUIRE_FALSE(m.tie_word_embeddings);
  REQUIRE(m.rope_scaling.type == RopeScalingType::none);
}

TEST_CASE("hf import: unsupported configs are refused naming the key and file", "[hf]") {
  ModelConfig m;
  AttentionConfig a;
  const std::string src = "hf/config.json";
  auto refused = [&](const json& doc) { parse_hf_config(doc, src, &m, &a); };

  json arch = llama_hf_config();
  arch["architectures"] = {"MistralForCausalLM"};
  REQUIRE_THROWS_WITH(refused(arch), Contains(src) && Contains("'architectures'") &&
                                         Contains("MistralForCausalLM"));
  json type = llama_hf_config();
  type["model_type"] = "mistral";
  REQUIRE_THROWS_WITH(refused(type), Contains(src) && Contains("'model_type'") && Contains("mistral"));
  json yarn = llama_hf_config();
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  REQUIRE_THROWS_WITH(refused(yarn),
                      Contains(src) && Contains("'rope_scaling.rope_type'") && Contains("yarn"));
  yarn["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  REQUIRE_THROWS_WITH(refused(yarn), Contains(src) && Contains("'rope_scaling.type'") && Contains("linear"));
  json act = llama_hf_config();
  act["hidden_act"] = "gelu";
  REQUIRE_THROWS_WITH(refused(act), Contains(src) && Contains("'hidden_act'"));
  json mlp_bias = llama_hf_config();
  mlp_bias["mlp_bias"] = true;
  REQUIRE_THROWS_WITH(refused(mlp_bias), Contains(src) && Contains("'mlp_bias'"));
  json o_bias = llama_hf_config();
  o_bias["attention_bias"] = true;
  REQUIRE_THROWS_WITH(refused(o_bias), Contains(src) && Contains("'attention_bias'") && Contains("o_proj"));
  json window = llama_hf_config();
  window["model_type"] = "qwen2";
  window["architectures"] = {"Qwen2ForCausalLM"};
  window["use_sliding_window"] = true;
  REQUIRE_THROWS_WITH(refused(window), Contains(src) && Contains("'use_sliding_window'"));
  json kv = llama_hf_config();
  kv["num_key_value_heads"] = 3;
  REQUIRE_THROWS_WITH(refused(kv), Contains(src) && Contains("'num_key_value_heads'"));
}

TEST_CASE("hf import: missing tensors and shape mismatches are refused naming tensor and file", "[hf]") {
  testing::TempDir tmp("hf");
  ModelConfig m;
  AttentionConfig a;
  parse_hf_config(llama_hf_config(), "config.json", &m, &a);
  const ParamLayout layout = make_param_layout(m, a);
  const std::vector<float> arena = arena_for(layout);
  std::vector<float> out(arena.size());

  SECTION("missing tensor, single file") {
    const std::string dir = tmp.file("missing");
    write_hf_dir(dir, llama_hf_config(), layout, arena, 1, true, "model.layers.1.mlp.up_proj.weight");
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains(dir + "/model.safetensors") &&
                            Contains("missing tensor 'model.layers.1.mlp.up_proj.weight'"));
  }
  SECTION("missing tensor, sharded") {
    const std::string dir = tmp.file("missing_sharded");
    write_hf_dir(dir, llama_hf_config(), layout, arena, 2, true, "model.norm.weight");
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains(dir) && Contains("missing tensor 'model.norm.weight'"));
  }
  SECTION("shape mismatch: the config's sizes disagree with the file") {
    const std::string dir = tmp.file("shape");
    write_hf_dir(dir, llama_hf_config(), layout, arena, 1, false);
    json wrong = llama_hf_config();
    wrong["intermediate_size"] = 20;
    write_json(dir + "/config.json", wrong);
    ModelConfig m2;
    AttentionConfig a2;
    read_hf_config(dir + "/config.json", &m2, &a2);
    const ParamLayout layout2 = make_param_layout(m2, a2);
    std::vector<float> out2(static_cast<size_t>(layout2.total));
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout2, out2.data()),
                        Contains(dir + "/model.safetensors") &&
                            Contains("'model.layers.0.mlp.gate_proj.weight' has shape (24, 16)") &&
                            Contains("expected (20, 16)"));
  }
  SECTION("LLaMA o_proj bias tensor") {
    const std::string dir = tmp.file("obias");
    std::vector<float> bias(16, 0.f);
    write_hf_dir(dir, llama_hf_config(), layout, arena, 1, false, "",
                 {{"model.layers.0.self_attn.o_proj.bias", {16}, bias.data()}});
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains("unexpected tensor 'model.layers.0.self_attn.o_proj.bias'") &&
                            Contains("o_proj bias"));
  }
  SECTION("no safetensors at all") {
    const std::string dir = tmp.file("bin");
    fs::create_directories(dir);
    write_json(dir + "/config.json", llama_hf_config());
    std::ofstream(dir + "/pytorch_model.bin") << "not read";
    REQUIRE_THROWS_WITH(load_model_weights(dir, layout, out.data()),
                        Contains(dir) && Contains("model.safetensors") && Contains("safe_serialization"));
  }
}

TEST_CASE("hf export: config.json per variant and family", "[hf]") {
  ModelConfig m;
  AttentionConfig a;
  parse_hf_config(llama_hf_config(), "config.json", &m, &a);

  json base = hf_export_config(m, a, ExportDtype::bf16);
  REQUIRE(base["architectures"] == json{"LlamaForCausalLM"});
  REQUIRE(base["model_type"] == "llama");
  REQUIRE(base["attention_bias"] == false);
  REQUIRE(base["mlp_bias"] == false);
  REQUIRE(base["torch_dtype"] == "bfloat16");
  REQUIRE(base["rope_scaling"]["rope_type"] == "llama3");
  REQUIRE_FALSE(base.contains("attention_variant"));
  REQUIRE_FALSE(base.contains("auto_map"));

  m.attention_bias = true;  // llama family with q/k/v bias: Qwen2 computes it exactly
  REQUIRE(hf_export_architecture(m, a) == "Qwen2ForCausalLM");
  m.attention_bias = false;

  a.variant = AttentionVariant::affine_gated;
  a.alpha_activation = AlphaActivation::sigmoid;
  json variant = hf_export_config(m, a, ExportDtype::f32);
  REQUIRE(variant["architectures"] == json{"KdtrainForCausalLM"});
  REQUIRE(variant["model_type"] == "kdtrain");
  REQUIRE(variant["base_model_type"] == "llama");
  REQUIRE(variant["attention_variant"] == "affine-gated");
  REQUIRE(variant["alpha_activation"] == "sigmoid");
  REQUIRE(variant["auto_map"]["AutoConfig"] == "configuration_kdtrain.KdtrainConfig");
  REQUIRE(variant["auto_map"]["AutoModelForCausalLM"] == "modeling_kdtrain.KdtrainForCausalLM");
  // kdtrain reads its own exports back.
  ModelConfig m2;
  AttentionConfig a2;
  parse_hf_config(variant, "export/config.json", &m2, &a2);
  REQUIRE(a2.variant == AttentionVariant::affine_gated);
  REQUIRE(a2.alpha_activation == AlphaActivation::sigmoid);
  REQUIRE(m2.family == ModelFamily::llama);
  REQUIRE(m2.head_dim == m.head_dim);
}

TEST_CASE("hf export: writes the directory, bf16 by round to nearest even, reloads exactly", "[hf]") {
  testing::TempDir tmp("hf");
  ModelConfig m;
  AttentionConfig a;
  parse_hf_config(llama_hf_config(), "config.json", &m, &a);
  m.family = ModelFamily::qwen2;
  m.attention_bias = true;
  m.tie_word_embeddings = false;
  a.variant = AttentionVariant::sink;
  const ParamLayout layout = make_param_layout(m, a);
  const std::vector<float> arena = arena_for(layout);
  const std::string src = tmp.file("ckpt");
  write_model_checkpoint(src, m, a, layout, arena.data());
  const std::string tok = tmp.file("tok");
  fs::create_directories(tok);
  write_json(tok + "/tokenizer_config.json", {{"eos_token", "</s>"}});
  write_json(tok + "/vocab.json", {{"a", 0}, {"b", 31}});

  ExportOptions o;
  o.checkpoint = src;
  o.out = tmp.file("hf");
  o.tokenizer = tok;
  o.dtype = ExportDtype::bf16;
  const ExportSummary s = export_hf_checkpoint(o);
  REQUIRE(s.architecture == "KdtrainForCausalLM");
  for (const char* f : {"config.json", "model.safetensors", "configuration_kdtrain.py",
                        "modeling_kdtrain.py", "variants.py", "tokenizer_config.json", "vocab.json"})
    REQUIRE(fs::exists(fs::path(o.out) / f));
  REQUIRE(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 3);

  const SafetensorsFile file(o.out + "/model.safetensors");
  for (const ParamSpec& spec : layout.specs) {
    const TensorView& view = file.tensor(spec.name);
    REQUIRE(view.dtype == Dtype::BF16);
    REQUIRE(view.shape == spec.shape);
    for (int64_t i = 0; i < spec.numel(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, view.data + 2 * i, 2);
      REQUIRE(bits == float_to_bf16(arena[spec.offset + i]));
    }
  }
  // The export loads back into kdtrain; exporting that again is bit-identical.
  ExportOptions again = o;
  again.checkpoint = o.out;
  again.out = tmp.file("hf2");
  again.tokenizer.clear();
  export_hf_checkpoint(again);
  REQUIRE(read_file(o.out + "/model.safetensors") == read_file(again.out + "/model.safetensors"));
  REQUIRE(read_file(o.out + "/config.json") == read_file(again.out + "/config.json"));

  SECTION("refuses a non-empty --out without --force, and the source itself") {
    REQUIRE_THROWS_WITH(export_hf_checkpoint(o), Contains(o.out) && Contains("--force"));
    ExportOptions self = o;
    self.out = src;
    self.force = true;
    REQUIRE_THROWS_WITH(export_hf_checkpoint(self), Contains("is the checkpoint being exported"));
    o.force = true;
    REQUIRE_NOTHROW(export_hf_checkpoint(o));
  }
  SECTION("refuses a tokenizer with ids beyond the vocabulary") {
    write_json(tok + "/vocab.json", {{"a", 0}, {"b", 32}});
    ExportOptions bad = o;
    bad.out = tmp.file("hf3");
    REQUIRE_THROWS_WITH(export_hf_checkpoint(bad), Contains("vocab.json") && Contains("32"));
    REQUIRE_FALSE(fs::exists(bad.out));
  }
}

#ifdef KDTRAIN_SOURCE_DIR
TEST_CASE("hf import: the real Qwen2-1.5B-Instruct config.json in shared/data", "[hf]") {
  const std::string path =
      std::string(KDTRAIN_SOURCE_DIR) + "/../shared/data/tokenizers/qwen2/config.json";
  if (!fs::exists(path)) {
    WARN("skipped: " << path << " not present");
    return;
  }
  ModelConfig m;
  AttentionConfig a;
  read_hf_config(path, &m, &a);
  REQUIRE(m.family == ModelFamily::qwen2);
  REQUIRE(m.hidden_size == 1536);
  REQUIRE(m.num_hidden_layers == 28);
  REQUIRE(m.num_key_value_heads == 2);
  REQUIRE(m.head_dim == 128);  // no head_dim key: 1536 / 12
  REQUIRE(m.attention_bias);   // implied by Qwen2
  REQUIRE(m.tie_word_embeddings);
  REQUIRE(m.rope_theta == 1e6);
  REQUIRE(a.variant == AttentionVariant::baseline);
  // Qwen2-1.5B's published size: 1,543,714,304 parameters (tied head counted once).
  REQUIRE(count_params(make_param_layout(m, a)).total == 1543714304);
}

TEST_CASE("hf export: embedded modeling files match scripts/kdtrain_hf", "[hf]") {
  // The build regenerates the embedded copy (cmake/embed_hf_sources.cmake) from these files.
  REQUIRE(hf_modeling_files().size() == 3);
  for (const EmbeddedFile& f : hf_modeling_files()) {
    INFO(f.name);
    const std::string path = std::string(KDTRAIN_SOURCE_DIR) + "/scripts/kdtrain_hf/" + f.name;
    REQUIRE(fs::exists(path));
    REQUIRE(read_file(path) == std::string(f.text));
  }
}
#endif
