#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/host_dtype.h"
#include "config/limits.h"
#include "core/error.h"
#include "model/activations.h"
#include "model/rope.h"

namespace kdtrain {

namespace {
// The compute copy from host fp32 values: rounded on the host in slices (bounded
// host memory, all threads) so only act_dtype bytes cross to the device.
void upload_compute_copy(Backend& backend, void* weights, const std::vector<float>& host) {
  const int64_t n = static_cast<int64_t>(host.size());
  if (backend.act_dtype() == DType::f32) {
    backend.to_device(weights, host.data(), n * sizeof(float));
    return;
  }
  constexpr int64_t kSlice = int64_t(1) << 26;  // 64 Mi values = 128 MiB of bf16
  std::vector<uint16_t> rounded(static_cast<size_t>(std::min(n, kSlice)));
  for (int64_t start = 0; start < n; start += kSlice) {
    const int64_t len = std::min(kSlice, n - start);
    round_to_bf16(rounded.data(), host.data() + start, len);
    backend.to_device(static_cast<uint16_t*>(weights) + start, rounded.data(),
                      len * sizeof(uint16_t));
  }
}
}  // namespace

Model::Model(const ModelConfig& model, const AttentionConfig& attention, Backend& backend,
             ModelUse use)
    : model_(model), attention_(attention), features_(features_of(attention)),
      backend_(backend), use_(use),
      layout_(make_param_layout(model, attention)) {
  const size_t n = static_cast<size_t>(layout_.total);
  const std::string keys = model_size_keys(model_);
  // The arenas that scale with the model: a failure names the keys that sized them.
  auto arena = [&](const char* what, size_t bytes) {
    return allocate_or_name(what, double(bytes), keys, [&] { return backend_.alloc(bytes); });
  };
  const bool fp32_compute = backend_.act_dtype() == DType::f32;
  const size_t compute_bytes = n * dtype_size(backend_.act_dtype());
  if (use_ == ModelUse::teacher && !fp32_compute) {
    weights_ = arena("the compute copy of the parameters", compute_bytes);
  } else {
    master_ = static_cast<float*>(arena("the fp32 parameter arena", n * sizeof(float)));
    weights_ = fp32_compute ? master_ : arena("the compute copy of the parameters", compute_bytes);
  }
  if (use_ == ModelUse::train) grads_ = static_cast<float*>(arena("the gradient arena", n * sizeof(float)));
  variant_ = std::make_unique<VariantState>(model_, features_, attention_.alpha_momentum, layout_, backend_, master_);
}

Model::~Model() {
  if (arena_) backend_.release(arena_);
  if (weights_ != master_) backend_.release(weights_);
  variant_.reset();
  for (float* p : {master_, grads_})
    if (p) backend_.release(p);
}

void Model::set_params(const std::vector<float>& host) {
  KD_CHECK(static_cast<int64_t>(host.size()) == layout_.total, "set_params: expected ",
           layout_.total, " values, got ", host.size());
  if (master_) {
    backend_.to_device(master_, host.data(), host.size() * sizeof(float));
    refresh_compute_weights();
  } else {
    // A teacher without master: round to the compute dtype on the host (half the
    // bytes to move); the variant keeps its fp32 sinks and alpha_ma aside.
    upload_compute_copy(backend_, weights_, host);
  }
  variant_->load(host);
}

void Model::set_param_tensor(int64_t offset, const void* values, int64_t n, bool bf16) {
  KD_CHECK(offset >= 0 && n >= 0 && offset + n <= layout_.total, "set_param_tensor: [", offset,
           ", ", offset + n, ") is outside the ", layout_.total, " parameters");
  // fp32 values where they are needed: a master, or the fp32 sinks / alpha_ma.
  auto fp32 = [&] {
    std::vector<float> v(static_cast<size_t>(n));
    if (!bf16) {
      std::memcpy(v.data(), values, n * sizeof(float));
      return v;
    }
    const auto* bytes = static_cast<const unsigned char*>(values);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, bytes + 2 * i, sizeof b);  // the mapping may be unaligned
      v[i] = bf16_bits_to_float(b);
    }
    return v;
  };
  if (variant_->holds(offset)) variant_->load_tensor(offset, fp32().data());
  if (master_) {
    const std::vector<float> v = fp32();
    backend_.to_device(master_ + offset, v.data(), n * sizeof(float));
  } else if (bf16) {
    backend_.to_device(static_cast<uint16_t*>(weights_) + offset, values, n * sizeof(uint16_t));
  } else {
    std::vector<uint16_t> rounded(static_cast<size_t>(n));
    round_to_bf16(rounded.data(), static_cast<const float*>(values), n);
    backend_.to_device(static_cast<uint16_t*>(weights_) + offset, rounded.data(), n * sizeof(uint16_t));
  }
}

void Model::finish_param_tensors() { refresh_compute_weights(); }

std::vector<float> Model::get_params() {
  KD_CHECK(master_ != nullptr, "get_params: a teacher model keeps no fp32 master weights");
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
  if (master_ && weights_ != master_) backend_.convert_from_f32(weights_, master_, layout_.total);
}

void Model::zero_grads() {
  KD_CHECK(grads_ != nullptr, "zero_grads: model was built without gradients");
  backend_.zero(grads_, layout_.total * sizeof(float));
}

void* Model::weight(int64_t offset) const {
  if (offset < 0) return nullptr;
  return static_cast<char*>(weights_) + offset * dtype_size(backend_.act_dtype());
}

void Model::set_recompute(const RecomputePlan& recompute) {
  KD_CHECK(recompute.whole_layers >= 0 && recompute.whole_layers <= model_.num_hidden_layers,
           "train.recompute_layers ", recompute.whole_layers, " is outside [0, ",
           model_.num_hidden_layers, "] (model.num_hidden_layers)");
  if (recompute.kept == recompute_.kept && recompute.whole_layers == recompute_.whole_layers) return;
  recompute_ = recompute;
  if (arena_) backend_.release(arena_);  // laid out again by the next forward
  arena_ = nullptr;
}

void Model::ensure_activations(int64_t B, int64_t T) {
  if (arena_ && acts_.B == B && acts_.T == T) return;
  if (arena_) backend_.release(arena_);
  arena_ = nullptr;
  acts_ = Activations{};
  acts_.B = B;
  acts_.T = T;
  const DType act = backend_.act_dtype();
  arena_bytes_ = lay_out_activations(acts_, nullptr, model_, features_, act, use_, recompute_);
  arena_ = allocate_or_name(
      "activations for " + std::to_string(B) + " x " + std::to_string(T) + " tokens", double(arena_bytes_),
      "the micro-batch and sequence length (train.micro_batch, train.seq_len; --batch-size, --seq-len) and " +
          model_size_keys(model_),
      [&] { return backend_.alloc(arena_bytes_); });
  lay_out_activations(acts_, static_cast<char*>(arena_), model_, features_, act, use_, recompute_);

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
  host_tokens_.assign(tokens, tokens + N);  // the embedding backward groups them on the host
  backend_.to_device(x.tokens, tokens, N * sizeof(int32_t));
  backend_.embedding_forward(x.resid[0], x.tokens, weight(layout_.embed), N, C);
  // Layer l's input norm is fused into the residual add that ends layer l-1
  // (and the final norm into the last one), so only layer 0's runs alone.
  backend_.rmsnorm_forward(x.ln1[0], x.ln1_rstd[0], x.resid[0],
                           weight(layout_.layers[0].input_norm), N, C,
                           static_cast<float>(model_.rms_norm_eps));
  for (int64_t l = 0; l < model_.num_hidden_layers; ++l) forward_layer(l, accumulate_alpha);
  if (accumulate_alpha) variant_->count_tokens(N);
}

// The attention call of layer l: shape, features, q/k/v, the variant's sinks /
// alpha / alpha_ma (fp32: the master, or a teacher's side buffer), and its
// outputs att and lse. The backward is attention_backward_args() these.
AttentionForwardArgs Model::attention_args(int64_t l) const {
  const int64_t D = model_.head_dim;
  AttentionForwardArgs args;
  args.shape = {B_, T_, model_.num_attention_heads, model_.num_key_value_heads, D};
  args.features = features_;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  args.qkv = acts_.qkv[l];
  args.sinks = variant_->layer_sinks(l);
  args.alpha = features_.affine ? acts_.alpha[l] : nullptr;
  args.alpha_ma = variant_->layer_alpha_ma(l);
  args.out = acts_.att[l];
  args.lse = acts_.lse[l];
  return args;
}

Model::LayerSizes Model::layer_sizes() const {
  const ModelConfig& m = model_;
  const int64_t H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim;
  return {B_, T_, B_ * T_, m.hidden_size, H, Hkv, D, m.intermediate_size, (H + 2 * Hkv) * D};
}

void Model::forward_layer(int64_t l, bool accumulate_alpha) {
  forward_layer_body(l, accumulate_alpha);
  Activations& x = acts_;
  const ModelConfig& m = model_;
  const int64_t N = B_ * T_, C = m.hidden_size, F = m.intermediate_size;
  backend_.matmul_forward(x.proj_out, x.swiglu[l], weight(layout_.layers[l].mlp_down_weight),
                          nullptr, N, F, C);
  // The residual add, fused with the next layer's input norm (or the final norm).
  const bool last = l + 1 == m.num_hidden_layers;
  backend_.add_rmsnorm_forward(
      x.resid[l + 1], last ? x.final_norm : x.ln1[l + 1], last ? x.final_rstd : x.ln1_rstd[l + 1],
      x.resid_mid[l], x.proj_out,
      weight(last ? layout_.final_norm : layout_.layers[l + 1].input_norm), N, C,
      static_cast<float>(m.rms_norm_eps));
}

void Model::forward_layer_body(int64_t l, bool accumulate_alpha) {
  Activations& x = acts_;
  const LayerOffsets& o = layout_.layers[l];
  const auto [B, T, N, C, H, Hkv, D, F, QKV] = layer_sizes();
  const AttentionFeatures f = features_;
  const float eps = static_cast<float>(model_.rms_norm_eps);

  backend_.matmul_forward(x.qkv[l], x.ln1[l], weight(o.qkv_weight), weight(o.qkv_bias), N, C, QKV);
  backend_.rope_forward(x.qkv[l], x.rope_cos, x.rope_sin, B, T, H + 2 * Hkv, H + Hkv, D);
  if (f.affine) {
    backend_.matmul_forward(x.alpha_z[l], x.ln1[l], weight(o.alpha_weight), nullptr, N, C, H);
    backend_.alpha_activation_forward(x.alpha[l], x.alpha_z[l], N * H, attention_.alpha_activation);
    if (accumulate_alpha) variant_->accumulate_alpha(l, x.alpha[l], N);
  }
  backend_.attention_forward(attention_args(l));

  void* y = x.att[l];
  if (f.gate) {
    backend_.matmul_forward(x.gate_z[l], x.ln1[l], weight(o.gate_weight), nullptr, N, C, H * D);
    backend_.sigmoid_gate_forward(x.att_gated[l], x.att[l], x.gate_z[l], N * H * D);
    y = x.att_gated[l];
  }
  backend_.matmul_forward(x.proj_out, y, weight(o.o_weight), nullptr, N, H * D, C);
  backend_.add_rmsnorm_forward(x.resid_mid[l], x.ln2[l], x.ln2_rstd[l], x.resid[l], x.proj_out,
                               weight(o.post_norm), N, C, eps);

  backend_.matmul_forward(x.gate_up[l], x.ln2[l], weight(o.mlp_gate_weight), nullptr, N, C, 2 * F);
  backend_.swiglu_forward(x.swiglu[l], x.gate_up[l], N, F);
}

// A whole recomputed layer reruns its forward body from resid[l] (its input
// norm first: the forward fused it into the previous layer's residual add, which
// computes the same values from the same bf16 sum). Otherwise the dropped MLP
// inputs are rebuilt in their forward order: ln2, gate_up, swiglu.
void Model::recompute_mlp_inputs(int64_t l) {
  Activations& x = acts_;
  const LayerOffsets& o = layout_.layers[l];
  const auto [B, T, N, C, H, Hkv, D, F, QKV] = layer_sizes();
  const float eps = static_cast<float>(model_.rms_norm_eps);
  if (recompute_.whole(l)) {
    backend_.rmsnorm_forward(x.ln1[l], x.ln1_rstd[l], x.resid[l], weight(o.input_norm), N, C, eps);
    forward_layer_body(l, false);
    return;
  }
  if (recompute_.drops_norms())
    backend_.rmsnorm_forward(x.ln2[l], x.ln2_rstd[l], x.resid_mid[l], weight(o.post_norm), N, C,
                             eps);
  if (recompute_.drops_gate_up())
    backend_.matmul_forward(x.gate_up[l], x.ln2[l], weight(o.mlp_gate_weight), nullptr, N, C,
                            2 * F);
  if (recompute_.drops_swiglu()) backend_.swiglu_forward(x.swiglu[l], x.gate_up[l], N, F);
}

// ln1 shares its buffer with ln2, so it is rebuilt after the MLP's backward.
void Model::recompute_attention_inputs(int64_t l) {
  if (recompute_.whole(l) || !recompute_.drops_norms()) return;
  const LayerOffsets& o = layout_.layers[l];
  backend_.rmsnorm_forward(acts_.ln1[l], acts_.ln1_rstd[l], acts_.resid[l], weight(o.input_norm),
                           B_ * T_, model_.hidden_size, static_cast<float>(model_.rms_norm_eps));
}

void Model::head_logits(void* logits, int64_t start, int64_t n) {
  KD_CHECK(arena_ && start >= 0 && start + n <= B_ * T_, "head_logits: rows out of range");
  const int64_t C = model_.hidden_size;
  const size_t a = dtype_size(backend_.act_dtype());
  const char* h = static_cast<const char*>(acts_.final_norm) + start * C * a;
  backend_.matmul_forward(logits, h, weight(layout_.lm_head), nullptr, n, C, model_.vocab_size);
}

void Model::head_backward(const void* dlogits, int64_t start, int64_t n) {
  KD_CHECK(grads_ != nullptr, "head_backward: model was built without gradients");
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
  const int64_t N = B_ * T_, C = model_.hidden_size, L = model_.num_hidden_layers,
                V = model_.vocab_size;
  auto final = [&](int64_t begin, int64_t n) {
    if (grads_final_) grads_final_(begin, begin + n);
  };
  if (layout_.lm_head != layout_.embed) final(layout_.lm_head, V * C);
  backend_.zero(x.d_resid, N * C * dtype_size(backend_.act_dtype()));
  backend_.rmsnorm_backward(x.d_resid, grads_ + layout_.final_norm, x.d_final, x.resid[L],
                            weight(layout_.final_norm), x.final_rstd, N, C);
  final(layout_.final_norm, C);
  for (int64_t l = L - 1; l >= 0; --l) {
    backward_layer(l);
    final(layout_.layers[l].begin, layout_.layers[l].end - layout_.layers[l].begin);
  }
  backend_.embedding_backward(grads_ + layout_.embed, x.d_resid, host_tokens_.data(), N, C, V);
  final(layout_.embed, V * C);
}

// On entry d_resid holds d resid[l+1]; on exit it holds d resid[l].
void Model::backward_layer(int64_t l) {
  Activations& x = acts_;
  const LayerOffsets& o = layout_.layers[l];
  const auto [B, T, N, C, H, Hkv, D, F, QKV] = layer_sizes();
  const AttentionFeatures f = features_;

  // MLP block: resid[l+1] = resid_mid + down(swiglu(gate_up(ln2(resid_mid))))
  recompute_mlp_inputs(l);
  backend_.matmul_backward(x.d_swiglu, grads_ + o.mlp_down_weight, nullptr, x.d_resid,
                           x.swiglu[l], weight(o.mlp_down_weight), N, F, C, false);
  backend_.swiglu_backward(x.d_gate_up, x.d_swiglu, x.gate_up[l], N, F);
  backend_.matmul_backward(x.d_ln, grads_ + o.mlp_gate_weight, nullptr, x.d_gate_up, x.ln2[l],
                           weight(o.mlp_gate_weight), N, C, 2 * F, false);
  backend_.rmsnorm_backward(x.d_resid, grads_ + o.post_norm, x.d_ln, x.resid_mid[l],
                            weight(o.post_norm), x.ln2_rstd[l], N, C);

  // Attention block: resid_mid = resid[l] + o_proj(gate(attention(...)))
  recompute_attention_inputs(l);
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
  AttentionBackwardArgs args = attention_backward_args(attention_args(l));
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
