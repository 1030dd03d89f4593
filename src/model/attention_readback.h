// Reading a model's attention back to the host after a forward: one layer's
// post-RoPE q/k and softmax statistics as fp32 (LayerView), and the mean
// |scale * q_i.k_j| (paper Fig. 2) the trainer logs as a probe and the analysis
// (eval/attention_analysis.h) reports. Pure readers of Model's activation views.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace kdtrain {

// One layer's inputs to the attention core, on the host in fp32.
struct LayerView {
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0;
  float scale = 0.f;
  std::vector<float> qkv;       // (B, T, H + 2Hkv, D)
  std::vector<float> lse;       // (B, H, T)
  std::vector<float> alpha;     // (B, T, H) or empty
  std::vector<float> sinks;     // (H) or empty
  std::vector<float> alpha_ma;  // (H) or empty

  const float* q(int64_t b, int64_t t, int64_t h) const {
    return qkv.data() + ((b * T + t) * (H + 2 * Hkv) + h) * D;
  }
  const float* k(int64_t b, int64_t t, int64_t g) const {
    return qkv.data() + ((b * T + t) * (H + 2 * Hkv) + H + g) * D;
  }
  int64_t kv_head(int64_t h) const { return h / (H / Hkv); }
  float logit(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const float* a = q(b, i, h);
    const float* c = k(b, j, kv_head(h));
    float s = 0.f;
    for (int64_t d = 0; d < D; ++d) s += a[d] * c[d];
    return scale * s;
  }
};

// q/k only (with_stats false) may be restricted to the first `sequences` sequences
// and `positions` tokens; statistics need whole rows of the last forward.
LayerView read_layer(Model& model, int64_t l, bool with_stats, int64_t sequences = 0,
                     int64_t positions = 0);

// Sum of |logit| over every causal pair of the view; *pairs receives their count.
double abs_logit_sum(const LayerView& v, int64_t* pairs);

// The mean of |scale * q_i.k_j| over every layer, head, sequence and causal pair
// j <= i, after a forward of `tokens` (B, T) — paper Fig. 2. Runs a forward pass on
// `model` (overwriting its activations: call between training steps, with
// accumulate_alpha off so alpha_ma is untouched).
double mean_abs_attention_logit(Model& model, const int32_t* tokens, int64_t B, int64_t T);

// The same quantity per layer for the activations already in `model`, over its
// first `sequences` sequences and first `positions` tokens (<= 0: all): the logits
// of those positions in the forward that ran. Positions < P depend only on tokens
// < P except under the affine `sequence` divisor, where from layer 2 on they also
// depend on T (N = T), so there a prefix is not a forward of the prefix.
std::vector<double> abs_attention_logit_per_layer(Model& model, int64_t sequences = 0,
                                                  int64_t positions = 0);

// The training-time probe (Fig. 2), with no extra forward: the mean |QK^T/sqrt(d)|
// over every layer and head on the first `positions` tokens of the first `sequences`
// sequences of the model's last forward (the last micro-batch of a step; <= 0: all).
// Copies only that prefix of q/k to the host, so the training kernels stay fused and
// untouched.
double probe_mean_abs_attention_logit(Model& model, int64_t positions = 128, int64_t sequences = 1);

}  // namespace kdtrain
