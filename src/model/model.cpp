#include "model/model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/activations.h"
#include "model/rope.h"

namespace kdtrain {

Model::Model(const ModelConfig& model, const AttentionConfig& attention, Backend& backend,
             bool trainable)
    : model_(model), attention_(attention), features_(features_of(attention.variant)),
      backend_(backend),
      layout_(make_param_layout(model, attention)) {
  const size_t n = static_cast<size_t>(layout_.total);
  master_ = static_cast<float*>(backend_.alloc(n * sizeof(float)));
  if (trainable) grads_ = static_cast<float*>(backend_.alloc(n * sizeof(float)));
  if (backend_.act_dtype() == DType::f32) {
    weights_ = master_;
  } else {
    weights_ = backend_.alloc(n * dtype_size(backend_.act_dtype()));
  }
  const int64_t LH = model_.num_hidden_layers * model_.num_attention_heads;
  alpha_sums_ = static_cast<float*>(backend_.alloc(LH * sizeof(float)));
}

Model::~Model() {
  if (arena_) backend_.release(arena_);
  if (weights_ != master_) backend_.release(weights_);
  backend_.release(master_);
  if (grads_) backend_.release(grads_);
  backend_.release(alpha_sums_);
}

void Model::set_params(const std::vector<float>& host) {
  KD_CHECK(static_cast<int64_t>(host.size()) == layout_.total, "set_params: expected ",
           layout_.total, " values, got ", host.size());
  backend_.to_device(master_, host.data(), host.size() * sizeof(float));
  refresh_compute_weights();
}

std::vector<float> Model::get_params() {
  std::vector<float> host(layout_.total);
  backend_.to_host(host.data(), master_, host.size() * sizeof(float));
  return host;
}

std::vector<float> Model::get_grads() {
  KD_CHECK(grads_ != nullptr, "get_grads: model was built without gradients");
  std::vector<float> host(layout_.total);
  backend_.to_host(host.data(), grads_, host.size() * sizeof(float));
  return host;
}

void Model::refresh_compute_weights() {
  if (weights_ != master_) backend_.convert_from_f32(weights_, master_, layout_.total);
}

void Model::zero_grads() {
  KD_CHECK(grads_ != nullptr, "zero_grads: model was built without gradients");
  backend_.zero(grads_, layout_.total * sizeof(float));
}

void* Model::weight(int64_t offset) const {
  if (offset < 0) return nullptr;
  return static_cast<char*>(weights_) + offset * dtype_size(backend_.act_dtype());
}

void Model::ensure_activations(int64_t B, int64_t T) {
  if (arena_ && acts_.B == B && acts_.T == T) return;
  if (arena_) backend_.release(arena_);
  arena_ = nullptr;
  acts_ = Activations{};
  acts_.B = B;
  acts_.T = T;
  arena_bytes_ = lay_out_activations(acts_, nullptr, model_, features_, backend_.act_dtype());
  arena_ = backend_.alloc(arena_bytes_);
  lay_out_activations(acts_, static_cast<char*>(arena_), model_, features_, backend_.act_dtype());

  std::vector<float> cos, sin;
  rope_tables(model_, T, cos, sin);
  backend_.to_device(acts_.rope_cos, cos.data(), cos.size() * sizeof(float));
  backend_.to_device(acts_.rope_sin, sin.data(), sin.size() * sizeof(float));
}

const void* Model::final_hidden() const {
  KD_CHECK(arena_ != nullptr, "final_hidden: forward has not run");
  return acts_.final_norm;
}

void Model::forward(const int32_t* tokens, int64_t B, int64_t T, bool accumulate_alpha) {
  KD_CHECK(B > 0 && T > 0, "forward: empty batch (B=", B, ", T=", T, ")");
  KD_CHECK(T <= model_.max_position_embeddings || model_.max_position_embeddings <= 0,
           "train.seq_len ", T, " exceeds model.max_position_embeddings ",
           model_.max_position_embeddings);
  ensure_activations(B, T);
  B_ = B;
  T_ = T;
  Activations& x = acts_;
  const int64_t N = B * T, C = model_.hidden_size;
  for (int64_t i = 0; i < N; ++i)
    KD_CHECK(tokens[i] >= 0 && tokens[i] < model_.vocab_size, "token id ", tokens[i],
             " at position ", i, " is outside the vocabulary (", model_.vocab_size, ")");
  backend_.to_device(x.tokens, tokens, N * sizeof(int32_t));
  backend_.embedding_forward(x.resid[0], x.tokens, weight(layout_.embed), N, C);
  for (int64_t l = 0; l < model_.num_hidden_layers; ++l) forward_layer(l, accumulate_alpha);
  backend_.rmsnorm_forward(x.final_norm, x.final_rstd, x.resid[model_.num_hidden_layers],
                           weight(layout_.final_norm), N, C,
                           static_cast<float>(model_.rms_norm_eps));
  if (accumulate_alpha) alpha_tokens_ += N;
}

// The inputs forward and backward share: shape, variant, q/k/v and the variant's
// sinks / alpha / alpha_ma of layer l (sinks and alpha_ma read from the fp32 master).
template <typename Args>
void Model::fill_attention_inputs(Args& args, int64_t l) const {
  const LayerOffsets& o = layout_.layers[l];
  const int64_t D = model_.head_dim;
  args.shape = {B_, T_, model_.num_attention_heads, model_.num_key_value_heads, D};
  args.variant = attention_.variant;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  args.qkv = acts_.qkv[l];
  args.sinks = features_.sink ? master_ + o.sinks : nullptr;
  args.alpha = features_.affine ? acts_.alpha[l] : nullptr;
  args.alpha_ma = features_.affine ? master_ + o.alpha_ma : nullptr;
}

void Model::forward_layer(int64_t l, bool accumulate_alpha) {
  Activations& x = acts_;
  const LayerOffsets& o = layout_.layers[l];
  const ModelConfig& m = model_;
  const int64_t B = B_, T = T_, N = B * T, C = m.hidden_size, H = m.num_attention_heads,
                Hkv = m.num_key_value_heads, D = m.head_dim, F = m.intermediate_size;
  const int64_t QKV = (H + 2 * Hkv) * D;
  const AttentionFeatures f = features_;
  const float eps = static_cast<float>(m.rms_norm_eps);

  backend_.rmsnorm_forward(x.ln1[l], x.ln1_rstd[l], x.resid[l], weight(o.input_norm), N, C, eps);
  backend_.matmul_forward(x.qkv[l], x.ln1[l], weight(o.qkv_weight), weight(o.qkv_bias), N, C, QKV);
  backend_.rope_forward(x.qkv[l], x.rope_cos, x.rope_sin, B, T, H + 2 * Hkv, H + Hkv, D);
  if (f.affine) {
    backend_.matmul_forward(x.alpha_z[l], x.ln1[l], weight(o.alpha_weight), nullptr, N, C, H);
    backend_.alpha_activation_forward(x.alpha[l], x.alpha_z[l], N * H, attention_.alpha_activation);
    if (accumulate_alpha) backend_.column_sum_accumulate(alpha_sums_ + l * H, x.alpha[l], N, H);
  }
  AttentionForwardArgs args;
  fill_attention_inputs(args, l);
  args.out = x.att[l];
  args.lse = x.lse[l];
  backend_.attention_forward(args);

  void* y = x.att[l];
  if (f.gate) {
    backend_.matmul_forward(x.gate_z[l], x.ln1[l], weight(o.gate_weight), nullptr, N, C, H * D);
    backend_.sigmoid_gate_forward(x.att_gated[l], x.att[l], x.gate_z[l], N * H * D);
    y = x.att_gated[l];
  }
  backend_.matmul_forward(x.proj_out, y, weight(o.o_weight), nullptr, N, H * D, C);
  backend_.add(x.resid_mid[l], x.resid[l], x.proj_out, N * C);

  backend_.rmsnorm_forward(x.ln2[l], x.ln2_rstd[l], x.resid_mid[l], weight(o.post_norm), N, C, eps);
  backend_.matmul_forward(x.gate_up[l], x.ln2[l], weight(o.mlp_gate_weight), nullptr, N, C, 2 * F);
  backend_.swiglu_forward(x.swiglu[l], x.gate_up[l], N, F);
  backend_.matmul_forward(x.proj_out, x.swiglu[l], weight(o.mlp_down_weight), nullptr, N, F, C);
  backend_.add(x.resid[l + 1], x.resid_mid[l], x.proj_out, N * C);
}

void Model::head_logits(void* logits, int64_t start, int64_t n) {
  KD_CHECK(arena_ && start >= 0 && start + n <= B_ * T_, "head_logits: rows out of range");
  const int64_t C = model_.hidden_size;
  const size_t a = dtype_size(backend_.act_dtype());
  const char* h = static_cast<const char*>(acts_.final_norm) + start * C * a;
  backend_.matmul_forward(logits, h, weight(layout_.lm_head), nullptr, n, C, model_.vocab_size);
}

void Model::head_backward(const void* dlogits, int64_t start, int64_t n) {
  const int64_t C = model_.hidden_size;
  const size_t a = dtype_size(backend_.act_dtype());
  const char* h = static_cast<const char*>(acts_.final_norm) + start * C * a;
  char* dh = static_cast<char*>(acts_.d_final) + start * C * a;
  backend_.matmul_backward(dh, grads_ + layout_.lm_head, nullptr, dlogits, h,
                           weight(layout_.lm_head), n, C, model_.vocab_size, false);
}

void Model::backward() {
  KD_CHECK(arena_ != nullptr, "backward: forward has not run");
  KD_CHECK(grads_ != nullptr, "backward: model was built without gradients");
  Activations& x = acts_;
  const int64_t N = B_ * T_, C = model_.hidden_size, L = model_.num_hidden_layers;
  backend_.zero(x.d_resid, N * C * dtype_size(backend_.act_dtype()));
  backend_.rmsnorm_backward(x.d_resid, grads_ + layout_.final_norm, x.d_final, x.resid[L],
                            weight(layout_.final_norm), x.final_rstd, N, C);
  for (int64_t l = L - 1; l >= 0; --l) backward_layer(l);
  backend_.embedding_backward(grads_ + layout_.embed, x.d_resid, x.tokens, N, C,
                              model_.vocab_size);
}

// On entry d_resid holds d resid[l+1]; on exit it holds d resid[l].
void Model::backward_layer(int64_t l) {
  Activations& x = acts_;
  const LayerOffsets& o = layout_.layers[l];
  const ModelConfig& m = model_;
  const int64_t B = B_, T = T_, N = B * T, C = m.hidden_size, H = m.num_attention_heads,
                Hkv = m.num_key_value_heads, D = m.head_dim, F = m.intermediate_size;
  const int64_t QKV = (H + 2 * Hkv) * D;
  const AttentionFeatures f = features_;

  // MLP block: resid[l+1] = resid_mid + down(swiglu(gate_up(ln2(resid_mid))))
  backend_.matmul_backward(x.d_swiglu, grads_ + o.mlp_down_weight, nullptr, x.d_resid,
                           x.swiglu[l], weight(o.mlp_down_weight), N, F, C, false);
  backend_.swiglu_backward(x.d_gate_up, x.d_swiglu, x.gate_up[l], N, F);
  backend_.matmul_backward(x.d_ln, grads_ + o.mlp_gate_weight, nullptr, x.d_gate_up, x.ln2[l],
                           weight(o.mlp_gate_weight), N, C, 2 * F, false);
  backend_.rmsnorm_backward(x.d_resid, grads_ + o.post_norm, x.d_ln, x.resid_mid[l],
                            weight(o.post_norm), x.ln2_rstd[l], N, C);

  // Attention block: resid_mid = resid[l] + o_proj(gate(attention(...)))
  const void* y = f.gate ? x.att_gated[l] : x.att[l];
  backend_.matmul_backward(x.d_y, grads_ + o.o_weight, nullptr, x.d_resid, y,
                           weight(o.o_weight), N, H * D, C, false);
  bool d_ln_written = false;
  const void* d_att = x.d_y;
  if (f.gate) {
    backend_.sigmoid_gate_backward(x.d_att, x.d_gate_z, x.d_y, x.att[l], x.gate_z[l], N * H * D);
    backend_.matmul_backward(x.d_ln, grads_ + o.gate_weight, nullptr, x.d_gate_z, x.ln1[l],
                             weight(o.gate_weight), N, C, H * D, false);
    d_ln_written = true;
    d_att = x.d_att;
  }
  AttentionBackwardArgs args;
  fill_attention_inputs(args, l);
  args.out = x.att[l];
  args.lse = x.lse[l];
  args.dout = d_att;
  args.dqkv = x.d_qkv;
  args.dsinks = f.sink ? grads_ + o.sinks : nullptr;
  args.dalpha = f.affine ? x.d_alpha : nullptr;
  backend_.attention_backward(args);
  if (f.affine) {
    backend_.alpha_activation_backward(x.d_alpha_z, x.d_alpha, x.alpha_z[l], N * H,
                                       attention_.alpha_activation);
    backend_.matmul_backward(x.d_ln, grads_ + o.alpha_weight, nullptr, x.d_alpha_z, x.ln1[l],
                             weight(o.alpha_weight), N, C, H, d_ln_written);
    d_ln_written = true;
  }
  backend_.rope_backward(x.d_qkv, x.rope_cos, x.rope_sin, B, T, H + 2 * Hkv, H + Hkv, D);
  backend_.matmul_backward(x.d_ln, grads_ + o.qkv_weight,
                           o.qkv_bias >= 0 ? grads_ + o.qkv_bias : nullptr, x.d_qkv, x.ln1[l],
                           weight(o.qkv_weight), N, C, QKV, d_ln_written);
  backend_.rmsnorm_backward(x.d_resid, grads_ + o.input_norm, x.d_ln, x.resid[l],
                            weight(o.input_norm), x.ln1_rstd[l], N, C);
}

std::vector<double> Model::take_alpha_sums(int64_t* tokens_counted) {
  if (tokens_counted) *tokens_counted = alpha_tokens_;
  alpha_tokens_ = 0;
  if (!features_.affine) return {};
  const int64_t LH = model_.num_hidden_layers * model_.num_attention_heads;
  std::vector<float> sums(LH);
  backend_.to_host(sums.data(), alpha_sums_, LH * sizeof(float));
  backend_.zero(alpha_sums_, LH * sizeof(float));
  return std::vector<double>(sums.begin(), sums.end());
}

std::vector<float> Model::alpha_ma() {
  const int64_t L = model_.num_hidden_layers, H = model_.num_attention_heads;
  if (!features_.affine) return {};
  std::vector<float> values(L * H);
  for (int64_t l = 0; l < L; ++l)
    backend_.to_host(values.data() + l * H, master_ + layout_.layers[l].alpha_ma, H * sizeof(float));
  return values;
}

void Model::set_alpha_ma(const std::vector<float>& values) {
  const int64_t L = model_.num_hidden_layers, H = model_.num_attention_heads;
  KD_CHECK(features_.affine && static_cast<int64_t>(values.size()) == L * H,
           "set_alpha_ma: expected ", L * H, " values for an affine model");
  for (int64_t l = 0; l < L; ++l)
    backend_.to_device(master_ + layout_.layers[l].alpha_ma, values.data() + l * H, H * sizeof(float));
  refresh_compute_weights();
}

// --- read-only views for analysis ---
const void* Model::layer_qkv(int64_t l) const {
  KD_CHECK(arena_ && l >= 0 && l < model_.num_hidden_layers, "layer_qkv: layer ", l,
           " out of range or forward has not run");
  return acts_.qkv[l];
}

const void* Model::layer_alpha(int64_t l) const {
  KD_CHECK(arena_ && l >= 0 && l < model_.num_hidden_layers, "layer_alpha: layer ", l,
           " out of range or forward has not run");
  return acts_.alpha[l];
}

const float* Model::layer_lse(int64_t l) const {
  KD_CHECK(arena_ && l >= 0 && l < model_.num_hidden_layers, "layer_lse: layer ", l,
           " out of range or forward has not run");
  return acts_.lse[l];
}

}  // namespace kdtrain
