#include "model/param_layout.h"

#include <string>

#include "config/limits.h"
#include "core/error.h"

namespace kdtrain {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  for (const ParamSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

int64_t ParamLayout::trainable_count() const {
  int64_t n = 0;
  for (const ParamSpec& s : specs)
    if (s.trainable()) n += s.numel();
  return n;
}

namespace {

class LayoutBuilder {
 public:
  explicit LayoutBuilder(ParamLayout& layout) : layout_(layout) {}
  int64_t add(std::string name, std::vector<int64_t> shape, ParamRole role,
              ParamComponent component, int64_t layer) {
    // Checked, though the size limits keep every real layout far below int64: a
    // wrapped count would size a small arena that is then written past its end.
    int64_t numel = 1;
    for (int64_t d : shape)
      KD_CHECK(!__builtin_mul_overflow(numel, d, &numel), "model: tensor '", name,
               "' has more elements than int64 holds");
    const int64_t offset = layout_.total;
    KD_CHECK(!__builtin_add_overflow(offset, numel, &layout_.total),
             "model: the parameter count overflows int64 at tensor '", name, "'");
    ParamSpec spec{std::move(name), std::move(shape), role, component, layer, offset};
    layout_.specs.push_back(std::move(spec));
    return layout_.specs.back().offset;
  }

 private:
  ParamLayout& layout_;
};

}  // namespace

ParamLayout make_param_layout(const ModelConfig& m, const AttentionConfig& attention) {
  KD_CHECK(m.hidden_size > 0 && m.num_hidden_layers > 0 && m.num_attention_heads > 0 &&
               m.num_key_value_heads > 0 && m.head_dim > 0 && m.vocab_size > 0 &&
               m.intermediate_size > 0,
           "model: every size must be positive");
  check_model_limits(m, "", "model.");
  const int64_t C = m.hidden_size, H = m.num_attention_heads, Hkv = m.num_key_value_heads,
                D = m.head_dim, F = m.intermediate_size, V = m.vocab_size;
  const AttentionFeatures f = features_of(attention.variant);
  using R = ParamRole;
  using P = ParamComponent;

  ParamLayout layout;
  LayoutBuilder b(layout);
  layout.embed = b.add("model.embed_tokens.weight", {V, C}, R::embedding, P::embedding, -1);
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerOffsets o;
    o.begin = layout.total;
    o.input_norm = b.add(p + "input_layernorm.weight", {C}, R::norm, P::norm, l);
    o.qkv_weight = b.add(p + "self_attn.q_proj.weight", {H * D, C}, R::matrix, P::attention, l);
    b.add(p + "self_attn.k_proj.weight", {Hkv * D, C}, R::matrix, P::attention, l);
    b.add(p + "self_attn.v_proj.weight", {Hkv * D, C}, R::matrix, P::attention, l);
    if (m.attention_bias) {
      o.qkv_bias = b.add(p + "self_attn.q_proj.bias", {H * D}, R::bias, P::attention, l);
      b.add(p + "self_attn.k_proj.bias", {Hkv * D}, R::bias, P::attention, l);
      b.add(p + "self_attn.v_proj.bias", {Hkv * D}, R::bias, P::attention, l);
    }
    o.o_weight = b.add(p + "self_attn.o_proj.weight", {C, H * D}, R::matrix, P::attention, l);
    if (f.sink) o.sinks = b.add(p + "self_attn.sinks", {H}, R::sink, P::variant, l);
    if (f.affine) {
      o.alpha_weight = b.add(p + "self_attn.alpha_proj.weight", {H, C}, R::matrix, P::variant, l);
      o.alpha_ma = b.add(p + "self_attn.alpha_ma", {H}, R::buffer, P::variant, l);
    }
    if (f.gate)
      o.gate_weight = b.add(p + "self_attn.gate_proj.weight", {H * D, C}, R::matrix, P::variant, l);
    o.post_norm = b.add(p + "post_attention_layernorm.weight", {C}, R::norm, P::norm, l);
    o.mlp_gate_weight = b.add(p + "mlp.gate_proj.weight", {F, C}, R::matrix, P::mlp, l);
    o.mlp_up_weight = b.add(p + "mlp.up_proj.weight", {F, C}, R::matrix, P::mlp, l);
    o.mlp_down_weight = b.add(p + "mlp.down_proj.weight", {C, F}, R::matrix, P::mlp, l);
    o.end = layout.total;
    layout.layers.push_back(o);
  }
  layout.final_norm = b.add("model.norm.weight", {C}, R::norm, P::norm, -1);
  layout.lm_head = m.tie_word_embeddings
                       ? layout.embed
                       : b.add("lm_head.weight", {V, C}, R::matrix, P::lm_head, -1);
  return layout;
}

ParamBreakdown count_params(const ParamLayout& layout) {
  ParamBreakdown c;
  for (const ParamSpec& s : layout.specs) {
    if (!s.trainable()) continue;
    const int64_t n = s.numel();
    switch (s.component) {
      case ParamComponent::embedding: c.embedding += n; break;
      case ParamComponent::attention: c.attention += n; break;
      case ParamComponent::variant: c.variant += n; break;
      case ParamComponent::mlp: c.mlp += n; break;
      case ParamComponent::norm: c.norms += n; break;
      case ParamComponent::lm_head: c.lm_head += n; break;
    }
    c.total += n;
  }
  return c;
}

}  // namespace kdtrain
