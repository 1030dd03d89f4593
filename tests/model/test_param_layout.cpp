#include <catch2/catch.hpp>

#include "config/presets.h"
#include "model/param_layout.h"

using namespace kdtrain;

namespace {
ModelConfig small_model() {
  const ModelConfig d;  // family, context, norms and RoPE at their defaults
  return make_model({d.family, /*vocab=*/50, d.max_position_embeddings, d.rms_norm_eps, d.rope_theta, d.rope_scaling,
                     /*tied=*/true, /*bias=*/false},
                    {24, 40, 2, 6, 2, 4});
}
}  // namespace

TEST_CASE("param layout: offsets are contiguous and q/k/v are adjacent", "[layout]") {
  ModelConfig m = small_model();
  m.attention_bias = true;
  AttentionConfig a;
  a.variant = AttentionVariant::affine_gated;
  ParamLayout layout = make_param_layout(m, a);
  int64_t expected = 0;
  for (const ParamSpec& s : layout.specs) {
    REQUIRE(s.offset == expected);
    expected += s.numel();
  }
  REQUIRE(layout.total == expected);
  const ParamSpec* q = layout.find("model.layers.1.self_attn.q_proj.weight");
  const ParamSpec* k = layout.find("model.layers.1.self_attn.k_proj.weight");
  const ParamSpec* v = layout.find("model.layers.1.self_attn.v_proj.weight");
  REQUIRE(q != nullptr);
  REQUIRE(k->offset == q->offset + q->numel());
  REQUIRE(v->offset == k->offset + k->numel());
  REQUIRE(layout.layers[1].qkv_weight == q->offset);
  const ParamSpec* up = layout.find("model.layers.0.mlp.up_proj.weight");
  REQUIRE(layout.layers[0].mlp_up_weight == up->offset);
  REQUIRE(layout.layers[0].mlp_up_weight == layout.layers[0].mlp_gate_weight + 40 * 24);
  REQUIRE(layout.lm_head == layout.embed);
  REQUIRE(layout.find("lm_head.weight") == nullptr);
  REQUIRE(layout.find("model.layers.0.self_attn.alpha_ma")->role == ParamRole::buffer);
}

TEST_CASE("param layout: variant tensors exist only for their variant", "[layout]") {
  ModelConfig m = small_model();
  for (AttentionVariant variant : all_attention_variants()) {
    AttentionConfig a;
    a.variant = variant;
    ParamLayout layout = make_param_layout(m, a);
    CHECK((layout.find("model.layers.0.self_attn.sinks") != nullptr) == features_of(variant).sink);
    CHECK((layout.find("model.layers.0.self_attn.alpha_proj.weight") != nullptr) == features_of(variant).affine);
    CHECK((layout.find("model.layers.0.self_attn.alpha_ma") != nullptr) == features_of(variant).affine);
    CHECK((layout.find("model.layers.0.self_attn.gate_proj.weight") != nullptr) == features_of(variant).gate);
    ParamBreakdown base = count_params(make_param_layout(m, AttentionConfig{}));
    ParamBreakdown with = count_params(layout);
    const int64_t L = 2, H = 6, C = 24, D = 4;
    int64_t delta = 0;
    if (features_of(variant).sink) delta += L * H;
    if (features_of(variant).affine) delta += L * H * C;
    if (features_of(variant).gate) delta += L * H * D * C;
    CHECK(with.total - base.total == delta);
  }
}
