// The attention variants (docs/model.md) and the features each one switches on.
//
// A variant is the name a user picks; the code below the config reads its
// features, resolved once with features_of(). Every variant is one row of
// kAttentionVariants, so adding a variant means adding an enum value and a row
// here, not a case at every call site. Header-only and constexpr so the backends
// can turn features into template flags at compile time.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

namespace kdtrain {

enum class AttentionVariant { baseline, sink, affine, gated, affine_gated };

// N of the affine bias beta_i = (alpha_ma - alpha_i) / N (docs/model.md, paper Eq. 8;
// `attention.affine_bias_divisor`). The bias sits on the visible keys either way.
enum class AffineBiasDivisor {
  sequence,  // N = the keys of the call (T in training; past + current with a KV cache): the paper's
  visible,   // N_i = i + 1, the keys query i sees: each query's total weight is exactly alpha_ma
};

// The affine bias divisor of query row i (0-based) in a call with `keys` keys.
constexpr double affine_bias_count(AffineBiasDivisor d, int64_t i, int64_t keys) {
  return d == AffineBiasDivisor::visible ? static_cast<double>(i + 1) : static_cast<double>(keys);
}

// What N `sequence` uses outside training (`attention.affine_inference_n`). Training always
// runs T = train.seq_len keys, so the weights cannot tell the two apart; a shorter call can
// (docs/model.md, "The affine divisor at inference").
enum class AffineInferenceN {
  train_length,  // N = the train.seq_len the weights trained at: a row depends only on its prefix
  keys,          // N = the keys of the call, as in training
};

// What a variant adds to causal softmax attention (docs/model.md), and how: the
// variant's table row gives sink/affine/gate, the config the affine divisor
// (features_of(const AttentionConfig&), config/config.h).
struct AttentionFeatures {
  bool sink = false;    // a learned logit per head joins the softmax denominator (self_attn.sinks)
  bool affine = false;  // out = alpha*PV + beta*prefix(V); alpha from alpha_proj, alpha_ma a buffer
  bool gate = false;    // out *= sigmoid(gate_proj(x)) before o_proj, a separate op
  AffineBiasDivisor bias_divisor = AffineBiasDivisor::sequence;  // N of beta [affine]
  int64_t bias_keys = 0;  // `sequence`: N fixed at this many keys (the training length); 0 = the call's
  constexpr bool operator==(const AttentionFeatures& o) const {
    return sink == o.sink && affine == o.affine && gate == o.gate && bias_divisor == o.bias_divisor &&
           bias_keys == o.bias_keys;
  }
  constexpr bool operator!=(const AttentionFeatures& o) const { return !(*this == o); }
};

// N of query row i in a call with `keys` keys, under the features' divisor and fixed N.
constexpr double affine_bias_count(const AttentionFeatures& f, int64_t i, int64_t keys) {
  return affine_bias_count(f.bias_divisor, i, f.bias_keys > 0 ? f.bias_keys : keys);
}

// The features' names, in field order: logs and reports spell a set of
// features as their names joined by '+' ("sink", "affine+gate"), or "softmax".
inline constexpr struct {
  const char* name;
  bool AttentionFeatures::*field;
} kFeatureNames[] = {{"sink", &AttentionFeatures::sink}, {"affine", &AttentionFeatures::affine},
                     {"gate", &AttentionFeatures::gate}};

inline std::string features_label(const AttentionFeatures& f) {
  std::string label;
  for (const auto& n : kFeatureNames)
    if (f.*n.field) label += (label.empty() ? "" : "+") + std::string(n.name);
  return label.empty() ? "softmax" : label;
}

// The inverse of features_label; unknown names are ignored (a report's reader).
inline AttentionFeatures features_from_label(const std::string& label) {
  AttentionFeatures f;
  for (const auto& n : kFeatureNames) {
    const std::string name = n.name;
    for (size_t at = label.find(name); at != std::string::npos; at = label.find(name, at + 1))
      if ((at == 0 || label[at - 1] == '+') && (at + name.size() == label.size() || label[at + name.size()] == '+'))
        f.*n.field = true;
  }
  return f;
}

struct AttentionVariantInfo {
  AttentionVariant variant;
  const char* name;  // CLI / JSON / checkpoint spelling
  AttentionFeatures features;
};

// The one table of variants; to_string, parse_attention_variant, features_of and
// `kdtrain info --variants` read it.
inline constexpr AttentionVariantInfo kAttentionVariants[] = {
    {AttentionVariant::baseline, "baseline", {false, false, false}},
    {AttentionVariant::sink, "sink", {true, false, false}},
    {AttentionVariant::affine, "affine", {false, true, false}},
    {AttentionVariant::gated, "gated", {false, false, true}},
    {AttentionVariant::affine_gated, "affine-gated", {false, true, true}},
};

constexpr const AttentionVariantInfo& variant_info(AttentionVariant v) {
  for (const AttentionVariantInfo& info : kAttentionVariants)
    if (info.variant == v) return info;
  return kAttentionVariants[0];  // unreachable for a valid enum value
}
constexpr AttentionFeatures features_of(AttentionVariant v) { return variant_info(v).features; }
constexpr AttentionFeatures features_of(AttentionVariant v, AffineBiasDivisor d) {
  AttentionFeatures f = variant_info(v).features;
  f.bias_divisor = d;
  return f;
}

// Every variant, in table order (for loops over variants in tests and tools).
constexpr std::array<AttentionVariant, std::size(kAttentionVariants)> all_attention_variants() {
  std::array<AttentionVariant, std::size(kAttentionVariants)> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = kAttentionVariants[i].variant;
  return out;
}

// No variant both adds a sink and rescales by alpha: the flash kernels rely on it.
constexpr bool no_variant_has_sink_and_affine() {
  for (const AttentionVariantInfo& info : kAttentionVariants)
    if (info.features.sink && info.features.affine) return false;
  return true;
}
static_assert(no_variant_has_sink_and_affine(), "a variant with sink and affine needs kernel support");

}  // namespace kdtrain
