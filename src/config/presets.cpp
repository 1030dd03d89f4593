// Named architectures (docs/model.md), one table: a row per preset, its layer shape
// plus its family's traits. Every number mirrors the model's Hugging Face
// config.json; where each was checked is noted on its row. The tiny presets
// exist for tests and the CPU quick start; tiny-llama3 / tiny-qwen2 carry the
// real vocabularies, for tiny students of real teachers.
#include "config/presets.h"

#include "core/error.h"
#include "core/nearest.h"

namespace kdtrain {

namespace {

// Llama 3: 128,256-id vocabulary, 128k context, llama3 RoPE scaling from an
// original 8k context, no attention bias.
ModelTraits llama3(double rope_factor, bool tied) {
  return {ModelFamily::llama, 128256, 131072, 1e-5, 500000.0, {RopeScalingType::llama3, rope_factor, 1.0, 4.0, 8192},
          tied, false};
}

// Qwen1.5 ships as Qwen2ForCausalLM: multi-head attention with q/k/v bias,
// 32k context, no RoPE scaling.
ModelTraits qwen15(bool tied) { return {ModelFamily::qwen2, 151936, 32768, 1e-6, 1000000.0, RopeScaling{}, tied, true}; }

// The tiny test presets read bytes: vocabulary 256, context 512.
ModelTraits byte_level(ModelTraits t) {
  t.vocab = 256;
  t.max_position_embeddings = 512;
  return t;
}

// tiny-llama's RoPE: theta 1e4 with llama3 scaling from an original context of
// 64, so with head_dim 16 the rotary wavelengths (6 .. 2e4 tokens) fall in all
// three bands: unscaled (< 16), smoothed (16 .. 64) and scaled (> 64).
ModelTraits tiny_llama_traits() {
  ModelTraits t = byte_level(llama3(4.0, /*tied=*/true));
  t.rope_theta = 10000.0;
  t.rope_scaling.original_max_position_embeddings = 64;
  return t;
}

// GQA (4 query heads over 2 kv heads); ~109k parameters at vocabulary 256.
constexpr LayerShape kTinyLlama{64, 176, 2, 4, 2, 16};
// Multi-head attention; ~80k parameters at vocabulary 256.
constexpr LayerShape kTinyQwen{48, 128, 2, 3, 3, 16};

std::vector<Preset> make_table() {
  return {
      // Qwen/Qwen1.5-0.5B config.json: hidden 1024, intermediate 2816, 24 layers, 16 heads,
      // 16 kv heads, vocab 151936, tied. Checked against public copies of the config (e.g.
      // the Qwen2 test fixture with hidden 1024 / intermediate 2816 / vocab 151936 / tied)
      // and docs/model.md; head_dim = 1024 / 16 = 64.
      {"qwen1.5-0.5b", "Qwen/Qwen1.5-0.5B", {1024, 2816, 24, 16, 16, 64}, qwen15(/*tied=*/true)},
      // Qwen/Qwen1.5-1.8B config.json: hidden 2048, intermediate 5504, 24 layers, 16 heads
      // (MHA), vocab 151936, untied head; head_dim = 2048 / 16 = 128. Checked against a
      // public qwen-1.8b table (24 / 2048 / 5504 / 16 / 151936) and docs/model.md.
      {"qwen1.5-1.8b", "Qwen/Qwen1.5-1.8B", {2048, 5504, 24, 16, 16, 128}, qwen15(/*tied=*/false)},
      // meta-llama/Llama-3.2-1B config.json (copied verbatim in public repos, e.g.
      // kevinstephano/thunder_model_blocks hf_llama/llama_config.py): hidden 2048,
      // intermediate 8192, 16 layers, 32 heads, 8 kv heads, head_dim 64, vocab 128256,
      // max_pos 131072, rms 1e-5, theta 5e5, rope_scaling llama3 factor 32 / low 1 /
      // high 4 / original 8192, tied, no attention bias.
      {"llama3.2-1b", "meta-llama/Llama-3.2-1B", {2048, 8192, 16, 32, 8, 64}, llama3(32.0, /*tied=*/true)},
      // meta-llama/Llama-3.2-3B config.json: hidden 3072, intermediate 8192, 28 layers,
      // 24 heads, 8 kv heads, head_dim 128, tied, rope factor 32 (checked in llm-foundry's
      // llama config comment and NeMo's Llama3.2-3B recipe: scale_factor 32,
      // old_context_len 8192).
      {"llama3.2-3b", "meta-llama/Llama-3.2-3B", {3072, 8192, 28, 24, 8, 128}, llama3(32.0, /*tied=*/true)},
      // meta-llama/Llama-3.1-8B config.json: hidden 4096, intermediate 14336, 32 layers,
      // 32 heads, 8 kv heads, head_dim 128, untied, rope factor 8 (checked in oumi's
      // llama3_1 recipe table and slime's llama3.1-8B args: --rotary-scaling-factor 8.0,
      // --untie-embeddings-and-output-weights).
      {"llama3.1-8b", "meta-llama/Llama-3.1-8B", {4096, 14336, 32, 32, 8, 128}, llama3(8.0, /*tied=*/false)},
      {"tiny-llama", "tests and the CPU quick start: GQA, tied, llama3 RoPE in all three bands", kTinyLlama,
       tiny_llama_traits()},
      {"tiny-qwen", "tests and the CPU quick start: MHA, q/k/v bias, untied, theta 1e6", kTinyQwen,
       byte_level(qwen15(/*tied=*/false))},
      // tiny-llama's shape on Llama 3.2's vocabulary (128,256 ids, the Llama-3 tokenizer's
      // 128,000 BPE tokens and 256 special tokens) and RoPE, so a student distils from a
      // real Llama-3 teacher as it is. ~8.3M parameters, nearly all the tied embedding.
      {"tiny-llama3", "tiny-llama's shape on Llama 3.2's vocabulary and RoPE", kTinyLlama,
       llama3(32.0, /*tied=*/true)},
      // tiny-qwen's shape on the Qwen1.5 / Qwen2 vocabulary (151,936 ids: the tokenizer's
      // 151,646 tokens padded, as Qwen's own config.json says) and RoPE, tied as
      // Qwen1.5-0.5B. ~7.4M parameters, nearly all the embedding.
      {"tiny-qwen2", "tiny-qwen's shape on the Qwen1.5 / Qwen2 vocabulary and RoPE, tied", kTinyQwen,
       qwen15(/*tied=*/true)},
  };
}

}  // namespace

ModelConfig make_model(const ModelTraits& traits, const LayerShape& shape) {
  ModelConfig m;
  m.family = traits.family;
  m.hidden_size = shape.hidden;
  m.intermediate_size = shape.intermediate;
  m.num_hidden_layers = shape.layers;
  m.num_attention_heads = shape.heads;
  m.num_key_value_heads = shape.kv_heads;
  m.head_dim = shape.head_dim;
  m.vocab_size = traits.vocab;
  m.max_position_embeddings = traits.max_position_embeddings;
  m.rms_norm_eps = traits.rms_norm_eps;
  m.rope_theta = traits.rope_theta;
  m.rope_scaling = traits.rope_scaling;
  m.tie_word_embeddings = traits.tie_word_embeddings;
  m.attention_bias = traits.attention_bias;
  return m;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = make_table();
  return table;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const Preset& p : presets()) {
    if (p.name != name) continue;
    ModelConfig m = make_model(p.traits, p.shape);
    m.preset = name;
    return m;
  }
  const std::vector<std::string> names = preset_names();
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  fail("unknown model preset '", name, "'", did_you_mean(name, names), " (known: ", known, ")");
}

}  // namespace kdtrain
