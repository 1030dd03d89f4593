#include "model/attention_readback.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kdtrain {

namespace {

// A host fp32 copy of n activation values (act_dtype) from backend memory.
std::vector<float> host_f32(Backend& backend, const void* ptr, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (backend.act_dtype() == DType::f32) {
    backend.to_host(out.data(), ptr, n * sizeof(float));
  } else {
    float* tmp = static_cast<float*>(backend.alloc(n * sizeof(float)));
    backend.convert_to_f32(tmp, ptr, n);
    backend.to_host(out.data(), tmp, n * sizeof(float));
    backend.release(tmp);
  }
  return out;
}

}  // namespace

LayerView read_layer(Model& model, int64_t l, bool with_stats, int64_t sequences,
                     int64_t positions) {
  const ModelConfig& m = model.config();
  Backend& backend = model.backend();
  LayerView v;
  v.B = model.batch_size();
  v.T = model.seq_len();
  v.H = m.num_attention_heads;
  v.Hkv = m.num_key_value_heads;
  v.D = m.head_dim;
  v.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v.D)));
  const int64_t row = (v.H + 2 * v.Hkv) * v.D;
  if (!with_stats && ((sequences > 0 && sequences < v.B) || (positions > 0 && positions < v.T))) {
    const int64_t B = sequences > 0 ? std::min(sequences, v.B) : v.B;
    const int64_t T = positions > 0 ? std::min(positions, v.T) : v.T;
    const size_t a = dtype_size(backend.act_dtype());
    v.qkv.resize(B * T * row);
    for (int64_t b = 0; b < B; ++b) {  // rows (b, 0..T) are contiguous in (B, T, heads, D)
      const void* src = static_cast<const char*>(model.layer_qkv(l)) + b * v.T * row * a;
      const std::vector<float> part = host_f32(backend, src, T * row);
      std::copy(part.begin(), part.end(), v.qkv.begin() + b * T * row);
    }
    v.B = B;
    v.T = T;
    return v;
  }
  v.qkv = host_f32(backend, model.layer_qkv(l), v.B * v.T * row);
  if (!with_stats) return v;
  v.lse.resize(v.B * v.H * v.T);
  backend.to_host(v.lse.data(), model.layer_lse(l), v.lse.size() * sizeof(float));
  const AttentionFeatures f = model.features();
  const LayerOffsets& o = model.layout().layers[l];
  if (f.affine) {
    v.alpha = host_f32(backend, model.layer_alpha(l), v.B * v.T * v.H);
    v.alpha_ma.resize(v.H);
    backend.to_host(v.alpha_ma.data(), model.master() + o.alpha_ma, v.H * sizeof(float));
  }
  if (f.sink) {
    v.sinks.resize(v.H);
    backend.to_host(v.sinks.data(), model.master() + o.sinks, v.H * sizeof(float));
  }
  return v;
}

double abs_logit_sum(const LayerView& v, int64_t* pairs) {
  const int64_t rows = v.B * v.H * v.T;
  std::vector<double> sums(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t task = 0; task < rows; ++task) {
    const int64_t i = task % v.T, h = (task / v.T) % v.H, b = task / (v.T * v.H);
    double s = 0.0;
    for (int64_t j = 0; j <= i; ++j) s += std::fabs(v.logit(b, h, i, j));
    sums[task] = s;
  }
  double total = 0.0;
  for (double s : sums) total += s;  // fixed order
  *pairs = v.B * v.H * v.T * (v.T + 1) / 2;
  return total;
}

std::vector<double> abs_attention_logit_per_layer(Model& model, int64_t sequences,
                                                  int64_t positions) {
  const int64_t L = model.config().num_hidden_layers;
  std::vector<double> out(L);
  for (int64_t l = 0; l < L; ++l) {
    const LayerView v = read_layer(model, l, false, sequences, positions);
    int64_t pairs = 0;
    out[l] = abs_logit_sum(v, &pairs) / static_cast<double>(pairs);
  }
  return out;
}

double mean_abs_attention_logit(Model& model, const int32_t* tokens, int64_t B, int64_t T) {
  model.forward(tokens, B, T, false);
  // Every layer has the same number of causal pairs, so the mean of layer means is
  // the mean over all (layer, sequence, head, pair).
  const std::vector<double> per_layer = abs_attention_logit_per_layer(model);
  double s = 0.0;
  for (double x : per_layer) s += x;
  return s / static_cast<double>(per_layer.size());
}

double probe_mean_abs_attention_logit(Model& model, int64_t positions, int64_t sequences) {
  KD_CHECK(model.batch_size() > 0, "attention-logit probe: the model has not run forward");
  const std::vector<double> per_layer = abs_attention_logit_per_layer(model, sequences, positions);
  double s = 0.0;
  for (double x : per_layer) s += x;
  return s / static_cast<double>(per_layer.size());
}

}  // namespace kdtrain
