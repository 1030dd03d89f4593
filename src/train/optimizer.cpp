#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kdtrain {

AdamW::AdamW(Model& model, const OptimizerConfig& config, int64_t shard_begin, int64_t shard_end)
    : model_(model), config_(config), begin_(shard_begin),
      end_(shard_end < 0 ? model.layout().total : shard_end) {
  KD_CHECK(model.trainable(), "optimizer: the model has no gradients");
  KD_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= model.layout().total,
           "optimizer: shard [", begin_, ", ", end_, ") outside the parameter arena");
  for (const ParamSpec& spec : model.layout().specs) {
    if (!spec.trainable()) continue;
    const int64_t b = std::max(begin_, spec.offset), e = std::min(end_, spec.offset + spec.numel());
    if (b < e)
      segments_.push_back({b - begin_, e - begin_,
                           spec.decayed() ? static_cast<float>(config_.weight_decay) : 0.f});
  }
  const size_t bytes = static_cast<size_t>(end_ - begin_) * sizeof(float);
  Backend& backend = model.backend();
  m_ = static_cast<float*>(backend.alloc(std::max<size_t>(bytes, 4)));
  v_ = static_cast<float*>(backend.alloc(std::max<size_t>(bytes, 4)));
}

AdamW::~AdamW() {
  model_.backend().release(m_);
  model_.backend().release(v_);
}

// One reduction over the whole shard (one host read): the gradients of buffers
// (alpha_ma) are never written, so they add exact zeros.
double AdamW::grad_sum_squares() {
  return model_.backend().sum_squares(model_.grads() + begin_, end_ - begin_);
}

void AdamW::step(float lr, float clip) {
  ++step_;
  Backend& backend = model_.backend();
  const size_t act = dtype_size(backend.act_dtype());
  AdamWArgs a;  // the shard's arrays; segments relative to its start, one call
  a.master = model_.master() + begin_;
  a.compute = static_cast<char*>(model_.weights()) + begin_ * act;
  a.grad = model_.grads() + begin_;
  a.m = m_;
  a.v = v_;
  a.n = end_ - begin_;
  a.lr = lr;
  a.beta1 = static_cast<float>(config_.beta1);
  a.beta2 = static_cast<float>(config_.beta2);
  a.eps = static_cast<float>(config_.eps);
  a.grad_scale = clip;
  a.step = step_;
  a.segments = segments_.data();
  a.num_segments = static_cast<int64_t>(segments_.size());
  backend.adamw_update(a);
}

std::vector<float> AdamW::first_moment() {
  std::vector<float> host(end_ - begin_);
  model_.backend().to_host(host.data(), m_, host.size() * sizeof(float));
  return host;
}

std::vector<float> AdamW::second_moment() {
  std::vector<float> host(end_ - begin_);
  model_.backend().to_host(host.data(), v_, host.size() * sizeof(float));
  return host;
}

void AdamW::set_state(const std::vector<float>& m, const std::vector<float>& v, int64_t steps) {
  const size_t n = static_cast<size_t>(end_ - begin_);
  KD_CHECK(m.size() == n && v.size() == n, "optimizer state: expected ", n,
           " values per moment, got ", m.size(), " and ", v.size());
  model_.backend().to_device(m_, m.data(), n * sizeof(float));
  model_.backend().to_device(v_, v.data(), n * sizeof(float));
  step_ = steps;
}

float clip_scale(double grad_norm, double max_norm) {
  if (max_norm <= 0.0 || !std::isfinite(grad_norm) || grad_norm <= max_norm) return 1.f;
  return static_cast<float>(max_norm / (grad_norm + 1e-6));
}

}  // namespace kdtrain
