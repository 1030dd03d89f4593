#include "model/activations.h"

#include <algorithm>

namespace kdtrain {

namespace {

// Rounds byte counts up so every buffer starts 256-byte aligned (vector loads on GPU).
size_t align_up(size_t bytes) { return (bytes + 255) & ~static_cast<size_t>(255); }

// Hands out consecutive aligned pieces of `base` (or only counts them when base is
// null), recording each request in the plan when one is given.
class Carver {
 public:
  Carver(char* base, ActivationPlan* plan) : base_(base), plan_(plan) {}
  template <typename T>
  void take(T*& ptr, size_t bytes, const std::string& name) {
    ptr = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += align_up(bytes);
    if (!plan_) return;
    for (ActivationPlan::Buffer& b : plan_->buffers) {
      if (b.name != name) continue;
      b.count += 1;
      b.bytes += align_up(bytes);
      return;
    }
    plan_->buffers.push_back({name, 1, align_up(bytes), in_layer_});
  }
  void set_in_layer(bool in_layer) { in_layer_ = in_layer; }
  size_t used() const { return used_; }

 private:
  char* base_;
  ActivationPlan* plan_;
  size_t used_ = 0;
  bool in_layer_ = false;
};

}  // namespace

size_t lay_out_activations(Activations& x, char* base, const ModelConfig& m,
                           AttentionFeatures f, DType act, ModelUse use,
                           const RecomputePlan& recompute, ActivationPlan* plan) {
  const int64_t B = x.B, T = x.T, L = m.num_hidden_layers, C = m.hidden_size,
                H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim,
                F = m.intermediate_size;
  const int64_t N = B * T, QKV = (H + 2 * Hkv) * D;
  const size_t a = dtype_size(act), fp = sizeof(float);
  // A teacher's forward reads layer l's activations only within layer l and
  // updates the residual stream in place, so every layer shares layer 0's buffers.
  const bool streaming = use == ModelUse::teacher;
  const RecomputePlan r = use == ModelUse::train ? recompute : RecomputePlan{};
  const int64_t whole = std::min(r.whole_layers, L);
  if (plan) *plan = ActivationPlan{};
  Carver c(base, plan);
  for (auto* v : {&x.resid, &x.resid_mid, &x.ln1, &x.ln2, &x.qkv, &x.att, &x.alpha_z, &x.alpha,
                  &x.gate_z, &x.att_gated, &x.gate_up, &x.swiglu})
    v->assign(L, nullptr);
  x.resid.assign(L + 1, nullptr);
  for (auto* v : {&x.ln1_rstd, &x.ln2_rstd, &x.lse}) v->assign(L, nullptr);

  // Layer l's buffers but resid[l]; those `drop` recomputes stay null, to be
  // pointed at the shared ones. `tag` prefixes the plan's names.
  auto carve_layer = [&](int64_t l, const RecomputePlan& drop, const std::string& tag) {
    auto name = [&](const char* n) { return tag + n; };
    if (streaming) {
      x.resid_mid[l] = x.resid[l];
    } else {
      c.take(x.resid_mid[l], N * C * a, name("resid_mid"));
    }
    if (!drop.drops_norms()) c.take(x.ln1[l], N * C * a, name("ln1"));
    c.take(x.ln1_rstd[l], N * fp, name("ln1_rstd"));
    if (streaming) {
      x.ln2[l] = x.ln1[l];
      x.ln2_rstd[l] = x.ln1_rstd[l];
    } else {
      if (!drop.drops_norms()) c.take(x.ln2[l], N * C * a, name("ln2"));
      c.take(x.ln2_rstd[l], N * fp, name("ln2_rstd"));
    }
    c.take(x.qkv[l], N * QKV * a, name("qkv"));
    c.take(x.lse[l], B * H * T * fp, name("lse"));
    c.take(x.att[l], N * H * D * a, name("att"));
    if (f.affine) {
      c.take(x.alpha_z[l], N * H * a, name("alpha_z"));
      c.take(x.alpha[l], N * H * a, name("alpha"));
    }
    if (f.gate) {
      c.take(x.gate_z[l], N * H * D * a, name("gate_z"));
      c.take(x.att_gated[l], N * H * D * a, name("att_gated"));
    }
    if (!drop.drops_gate_up()) c.take(x.gate_up[l], N * 2 * F * a, name("gate_up"));
    if (!drop.drops_swiglu()) c.take(x.swiglu[l], N * F * a, name("swiglu"));
  };

  c.set_in_layer(true);
  size_t layer_bytes = 0;  // the last layer's: a kept layer unless every layer is whole
  for (int64_t l = 0; l < (streaming ? std::min<int64_t>(L, 1) : L); ++l) {
    const size_t before = c.used();
    c.take(x.resid[l], N * C * a, "resid");
    if (!r.whole(l)) carve_layer(l, r, "");
    layer_bytes = c.used() - before;
  }
  c.set_in_layer(false);
  // The buffers the recomputation refills, one of each shared by every layer.
  if (whole > 0) {
    carve_layer(0, RecomputePlan{}, "recompute_layer.");
    for (int64_t l = 1; l < whole; ++l) {
      for (auto* v : {&x.resid_mid, &x.ln1, &x.ln2, &x.qkv, &x.att, &x.alpha_z, &x.alpha,
                      &x.gate_z, &x.att_gated, &x.gate_up, &x.swiglu})
        (*v)[l] = (*v)[0];
      for (auto* v : {&x.ln1_rstd, &x.ln2_rstd, &x.lse}) (*v)[l] = (*v)[0];
    }
  }
  if (whole < L) {
    auto share = [&](std::vector<void*>& per_layer, size_t bytes, const char* name) {
      void* shared = nullptr;
      c.take(shared, bytes, name);
      for (int64_t l = whole; l < L; ++l) per_layer[l] = shared;
    };
    if (r.drops_norms()) {
      // ln1 and ln2 of a layer are never needed at once, in the forward or the backward.
      share(x.ln1, N * C * a, "recompute_ln");
      for (int64_t l = whole; l < L; ++l) x.ln2[l] = x.ln1[l];
    }
    if (r.drops_gate_up()) share(x.gate_up, N * 2 * F * a, "recompute_gate_up");
    if (r.drops_swiglu()) share(x.swiglu, N * F * a, "recompute_swiglu");
  }
  if (streaming) {
    for (int64_t l = 1; l < L; ++l) {
      for (auto* v : {&x.resid, &x.resid_mid, &x.ln1, &x.ln2, &x.qkv, &x.att, &x.alpha_z,
                      &x.alpha, &x.gate_z, &x.att_gated, &x.gate_up, &x.swiglu})
        (*v)[l] = (*v)[0];
      for (auto* v : {&x.ln1_rstd, &x.ln2_rstd, &x.lse}) (*v)[l] = (*v)[0];
    }
    x.resid[L] = x.resid[0];
  } else {
    c.take(x.resid[L], N * C * a, "resid_final");
  }
  c.take(x.tokens, N * sizeof(int32_t), "tokens");
  c.take(x.rope_cos, T * (D / 2) * fp, "rope_cos");
  c.take(x.rope_sin, T * (D / 2) * fp, "rope_sin");
  c.take(x.final_norm, N * C * a, "final_norm");
  c.take(x.final_rstd, N * fp, "final_rstd");
  c.take(x.proj_out, N * C * a, "proj_out");
  if (use == ModelUse::train) {
    c.take(x.d_final, N * C * a, "d_final");
    c.take(x.d_resid, N * C * a, "d_resid");
    c.take(x.d_ln, N * C * a, "d_ln");
    c.take(x.d_y, N * H * D * a, "d_y");
    if (f.gate) {
      c.take(x.d_att, N * H * D * a, "d_att");
      c.take(x.d_gate_z, N * H * D * a, "d_gate_z");
    }
    if (f.affine) {
      c.take(x.d_alpha, N * H * a, "d_alpha");
      c.take(x.d_alpha_z, N * H * a, "d_alpha_z");
    }
    c.take(x.d_qkv, N * QKV * a, "d_qkv");
    c.take(x.d_swiglu, N * F * a, "d_swiglu");
    c.take(x.d_gate_up, N * 2 * F * a, "d_gate_up");
  }
  if (plan) {
    plan->total_bytes = c.used();
    plan->per_layer_bytes = layer_bytes;
  }
  return c.used();
}

RecomputePlan recompute_plan(const TrainConfig& train) {
  RecomputePlan r;
  r.kept = train.recompute;
  r.whole_layers = train.recompute_layers;
  return r;
}

double recompute_flops_per_token(const ModelConfig& m, AttentionFeatures f,
                                 const RecomputePlan& recompute, int64_t T) {
  const double L = double(m.num_hidden_layers), C = double(m.hidden_size),
               H = double(m.num_attention_heads), Hkv = double(m.num_key_value_heads),
               D = double(m.head_dim), F = double(m.intermediate_size);
  const double whole = std::min(double(recompute.whole_layers), L);
  const double gate_up = 2.0 * C * 2.0 * F;
  // A layer's forward up to the SwiGLU output (the down product is not rerun):
  // its products (2 FLOPs per weight) and attention at the bench's convention
  // (4*H*D*T per token, full T: bench/bench.cpp).
  const double products = 2.0 * C * ((H + 2 * Hkv) * D + H * D + (f.affine ? H : 0.0) +
                                     (f.gate ? H * D : 0.0) + 2.0 * F);
  const double layer = products + 4.0 * H * D * double(T);
  return whole * layer + (recompute.drops_gate_up() ? (L - whole) * gate_up : 0.0);
}

ActivationPlan plan_activations(const ModelConfig& model, AttentionFeatures features, DType act,
                                ModelUse use, int64_t B, int64_t T,
                                const RecomputePlan& recompute) {
  Activations sizing;
  sizing.B = B;
  sizing.T = T;
  ActivationPlan plan;
  lay_out_activations(sizing, nullptr, model, features, act, use, recompute, &plan);
  return plan;
}

}  // namespace kdtrain
