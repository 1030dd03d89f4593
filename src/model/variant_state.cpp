#include "model/variant_state.h"

#include <algorithm>

#include "core/error.h"

namespace kdtrain {

VariantState::VariantState(const ModelConfig& model, AttentionFeatures features, double alpha_momentum,
                           const ParamLayout& layout, Backend& backend, float* master)
    : backend_(backend), layout_(layout), features_(features), rho_(alpha_momentum),
      L_(model.num_hidden_layers), H_(model.num_attention_heads), master_(master) {
  const size_t LH = static_cast<size_t>(L_ * H_);
  if (!master_) side_ = static_cast<float*>(backend_.alloc(2 * LH * sizeof(float)));
  alpha_sums_ = static_cast<float*>(backend_.alloc(LH * sizeof(float)));
  sinks_view_ = static_cast<float*>(backend_.alloc(LH * sizeof(float)));
  if (features_.affine) alpha_ma_host_.assign(LH, 0.f);
}

VariantState::~VariantState() {
  for (float* p : {side_, alpha_sums_, sinks_view_})
    if (p) backend_.release(p);
}

const float* VariantState::layer_sinks(int64_t l) const {
  const int64_t off = layout_.layers[l].sinks;
  if (off < 0) return nullptr;
  return master_ ? master_ + off : side_ + l * H_;
}

const float* VariantState::layer_alpha_ma(int64_t l) const {
  const int64_t off = layout_.layers[l].alpha_ma;
  if (off < 0) return nullptr;
  return master_ ? master_ + off : side_ + L_ * H_ + l * H_;
}

std::vector<float> VariantState::sinks() {
  if (!features_.sink) return {};
  // Gather on the device, then one read of L*H floats.
  for (int64_t l = 0; l < L_; ++l) backend_.copy(sinks_view_ + l * H_, layer_sinks(l), H_ * sizeof(float));
  std::vector<float> host(static_cast<size_t>(L_ * H_));
  backend_.to_host(host.data(), sinks_view_, host.size() * sizeof(float));
  return host;
}

void VariantState::load(const std::vector<float>& host) {
  for (int64_t l = 0; l < L_ && features_.affine; ++l)
    std::copy_n(host.data() + layout_.layers[l].alpha_ma, H_, alpha_ma_host_.data() + l * H_);
  if (master_) return;  // the master arena holds them
  for (int64_t l = 0; l < L_; ++l) {
    const int64_t sinks = layout_.layers[l].sinks;
    if (sinks >= 0) backend_.to_device(side_ + l * H_, host.data() + sinks, H_ * sizeof(float));
  }
  upload_alpha_ma();
}

bool VariantState::holds(int64_t offset) const {
  for (const LayerOffsets& o : layout_.layers)
    if (offset >= 0 && (offset == o.sinks || offset == o.alpha_ma)) return true;
  return false;
}

void VariantState::load_tensor(int64_t offset, const float* values) {
  for (int64_t l = 0; l < L_; ++l) {
    const LayerOffsets& o = layout_.layers[l];
    if (offset < 0 || (offset != o.sinks && offset != o.alpha_ma)) continue;
    if (offset == o.alpha_ma) std::copy_n(values, H_, alpha_ma_host_.data() + l * H_);
    if (!master_)
      backend_.to_device(const_cast<float*>(offset == o.sinks ? layer_sinks(l) : layer_alpha_ma(l)), values,
                         H_ * sizeof(float));
  }
}

void VariantState::accumulate_alpha(int64_t l, const void* alpha, int64_t N) {
  backend_.column_sum_accumulate(alpha_sums_ + l * H_, alpha, N, H_);
}

std::vector<double> VariantState::take_alpha_sums(int64_t* tokens_counted) {
  if (tokens_counted) *tokens_counted = alpha_tokens_;
  alpha_tokens_ = 0;
  if (!features_.affine) return {};
  const int64_t LH = L_ * H_;
  std::vector<float> sums(LH);
  backend_.to_host(sums.data(), alpha_sums_, LH * sizeof(float));
  backend_.zero(alpha_sums_, LH * sizeof(float));
  return std::vector<double>(sums.begin(), sums.end());
}

std::vector<double> VariantState::end_step(dist::Communicator& comm, bool applied) {
  int64_t tokens = 0;
  std::vector<double> sums = take_alpha_sums(&tokens);
  if (sums.empty()) return {};
  if (comm.distributed()) {
    sums.push_back(static_cast<double>(tokens));
    comm.all_reduce_sum_host(sums.data(), static_cast<int64_t>(sums.size()));
    tokens = static_cast<int64_t>(sums.back());
    sums.pop_back();
  }
  if (!applied) return {};
  std::vector<double> mean(sums.size());
  for (size_t i = 0; i < sums.size(); ++i) {
    mean[i] = sums[i] / static_cast<double>(tokens);
    alpha_ma_host_[i] = static_cast<float>(rho_ * alpha_ma_host_[i] + (1.0 - rho_) * mean[i]);
  }
  upload_alpha_ma();
  return mean;
}

void VariantState::set_alpha_ma(const std::vector<float>& values) {
  KD_CHECK(features_.affine && static_cast<int64_t>(values.size()) == L_ * H_, "set_alpha_ma: expected ",
           L_ * H_, " values for an affine model");
  alpha_ma_host_ = values;
  upload_alpha_ma();
}

void VariantState::upload_alpha_ma() {
  for (int64_t l = 0; l < L_ && features_.affine; ++l)
    backend_.to_device(const_cast<float*>(layer_alpha_ma(l)), alpha_ma_host_.data() + l * H_, H_ * sizeof(float));
}

}  // namespace kdtrain
