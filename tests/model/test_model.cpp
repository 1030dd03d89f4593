// Whole-model checks on the CPU backend: directional finite differences of the
// loss for every variant and both alpha activations, the sink -> -inf limit,
// gradient accumulation, and KD against an identical teacher.
#include <catch2/catch.hpp>

#include <cmath>

#include "backend/backend.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "support/model_step.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

struct Harness {
  std::unique_ptr<Backend> backend = make_backend("cpu", 0);
  ModelConfig config;
  AttentionConfig attention;
  std::unique_ptr<Model> model;
  FusedLoss loss{*backend};
  std::vector<int32_t> inputs, targets;
  int64_t B = 2, T = 7;

  Harness(const ModelConfig& m, AttentionVariant v, AlphaActivation act, uint64_t seed) {
    config = m;
    config.initializer_range = 0.2;  // larger weights: gradients well above fp32 noise
    attention.variant = v;
    attention.alpha_activation = act;
    attention.sink_init_std = 1.0;
    model = std::make_unique<Model>(config, attention, *backend);
    std::vector<float> params = init_params(model->layout(), config, attention, seed);
    // Non-zero alpha_ma and biases so every term of the variant contributes.
    SplitMix64 rng(seed + 7);
    for (const ParamSpec& s : model->layout().specs)
      if (s.role == ParamRole::buffer || s.role == ParamRole::bias)
        for (int64_t i = 0; i < s.numel(); ++i)
          params[s.offset + i] = static_cast<float>(0.3 + 0.4 * rng.uniform());
    model->set_params(params);
    std::vector<int32_t> tokens = random_tokens(B * T + 1, config.vocab_size, seed + 1);
    inputs.assign(tokens.begin(), tokens.end() - 1);
    targets.assign(tokens.begin() + 1, tokens.end());
  }

  double loss_value() {
    model->forward(inputs.data(), B, T, false);
    LossSettings s;
    s.chunk_tokens = 5;  // several chunks, the last one partial
    return loss.run(*model, nullptr, targets.data(), s, 1.f, false).mixed(0.f, false);
  }

  std::vector<float> gradient() {
    micro_batch_gradients(*model, loss, inputs, targets, B, T, false, 5);
    return model->get_grads();
  }
};

// Directional derivative along a random direction restricted to one tensor.
void check_tensor_gradient(Harness& h, const ParamSpec& spec, const std::vector<float>& grad) {
  std::vector<float> base = h.model->get_params();
  SplitMix64 rng(hash_string(spec.name));
  std::vector<double> dir(spec.numel());
  double analytic = 0.0;
  for (int64_t i = 0; i < spec.numel(); ++i) {
    dir[i] = rng.normal();
    analytic += dir[i] * grad[spec.offset + i];
  }
  const double step = 2e-3;
  auto shifted = [&](double sign) {
    std::vector<float> p = base;
    for (int64_t i = 0; i < spec.numel(); ++i)
      p[spec.offset + i] = static_cast<float>(base[spec.offset + i] + sign * step * dir[i]);
    h.model->set_params(p);
    return h.loss_value();
  };
  const double numeric = (shifted(1) - shifted(-1)) / (2 * step);
  h.model->set_params(base);
  INFO(spec.name << ": analytic " << analytic << " numeric " << numeric);
  // fp32 forward: the loss carries ~1e-7 relative rounding, so the central
  // difference is good to ~1e-4 absolute; 3% relative covers the curvature.
  CHECK(std::abs(analytic - numeric) <= 2e-3 + 3e-2 * std::abs(numeric));
}

}  // namespace

TEST_CASE("model: loss gradient matches finite differences for every variant", "[model][grad]") {
  for (bool qwen : {false, true})
    for (AttentionVariant v : kAllVariants)
      for (AlphaActivation act : {AlphaActivation::linear_clip, AlphaActivation::sigmoid}) {
        if (!features_of(v).affine && act == AlphaActivation::sigmoid) continue;
        DYNAMIC_SECTION((qwen ? "qwen-like " : "llama-like ") << to_string(v) << " "
                                                              << to_string(act)) {
          Harness h(qwen ? qwen_like() : llama_like(), v, act, 11);
          const std::vector<float> grad = h.gradient();
          for (const ParamSpec& spec : h.model->layout().specs) {
            if (!spec.trainable()) continue;
            const bool layer0_or_global = spec.layer <= 0;
            if (layer0_or_global) check_tensor_gradient(h, spec, grad);
          }
        }
      }
}

TEST_CASE("model: alpha_ma receives no gradient", "[model][affine]") {
  Harness h(llama_like(), AttentionVariant::affine, AlphaActivation::linear_clip, 3);
  const std::vector<float> grad = h.gradient();
  for (const ParamSpec& spec : h.model->layout().specs)
    if (spec.role == ParamRole::buffer)
      for (int64_t i = 0; i < spec.numel(); ++i) REQUIRE(grad[spec.offset + i] == 0.f);
}

TEST_CASE("model: sink with s -> -inf gives the baseline logits", "[model][sink]") {
  for (bool qwen : {false, true}) {
    Harness base(qwen ? qwen_like() : llama_like(), AttentionVariant::baseline,
                 AlphaActivation::linear_clip, 5);
    Harness sink(qwen ? qwen_like() : llama_like(), AttentionVariant::sink,
                 AlphaActivation::linear_clip, 5);
    // Shared tensors come from per-name streams, so only the sinks differ.
    std::vector<float> p = sink.model->get_params();
    for (const ParamSpec& s : sink.model->layout().specs) {
      if (s.role == ParamRole::sink) {
        for (int64_t i = 0; i < s.numel(); ++i) p[s.offset + i] = -1e4f;
      } else if (s.role == ParamRole::bias) {
        const ParamSpec* twin = base.model->layout().find(s.name);
        REQUIRE(twin != nullptr);
        std::vector<float> bp = base.model->get_params();
        for (int64_t i = 0; i < s.numel(); ++i) p[s.offset + i] = bp[twin->offset + i];
      }
    }
    sink.model->set_params(p);
    CHECK(sink.loss_value() == Approx(base.loss_value()).epsilon(1e-6));
  }
}

TEST_CASE("model: 4 micro-batches accumulate to one batch of 4", "[model][accumulation]") {
  for (AttentionVariant v : kAllVariants) {
    Harness one(llama_like(), v, AlphaActivation::linear_clip, 9);
    const int64_t B = 4, T = 6, N = B * T;
    std::vector<int32_t> tokens = random_tokens(N + B, one.config.vocab_size, 17);
    std::vector<int32_t> in(N), tg(N);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        in[b * T + t] = tokens[b * (T + 1) + t];
        tg[b * T + t] = tokens[b * (T + 1) + t + 1];
      }
    LossSettings s;
    s.chunk_tokens = 10;
    one.model->zero_grads();
    one.model->forward(in.data(), B, T, true);
    const double full = one.loss.run(*one.model, nullptr, tg.data(), s, 1.f / N, true).ce;
    one.model->backward();
    const std::vector<float> g_full = one.model->get_grads();
    int64_t counted_full = 0;
    const std::vector<double> alpha_full = one.model->variant().take_alpha_sums(&counted_full);

    one.model->zero_grads();
    double micro = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      one.model->forward(in.data() + b * T, 1, T, true);
      micro += one.loss.run(*one.model, nullptr, tg.data() + b * T, s, 1.f / N, true).ce;
      one.model->backward();
    }
    const std::vector<float> g_micro = one.model->get_grads();
    int64_t counted_micro = 0;
    const std::vector<double> alpha_micro = one.model->variant().take_alpha_sums(&counted_micro);

    INFO(to_string(v));
    CHECK(micro == Approx(full).epsilon(1e-6));
    double max_diff = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < g_full.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(g_full[i] - g_micro[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::abs(g_full[i])));
    }
    CHECK(max_diff <= 1e-5 * max_abs + 1e-7);
    CHECK(counted_full == counted_micro);
    REQUIRE(alpha_full.size() == alpha_micro.size());
    for (size_t i = 0; i < alpha_full.size(); ++i)
      CHECK(alpha_micro[i] == Approx(alpha_full[i]).epsilon(1e-5));
  }
}

TEST_CASE("model: forward KL against an identical teacher is zero", "[model][kd]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl}) {
    Harness student(qwen_like(), AttentionVariant::affine, AlphaActivation::linear_clip, 21);
    Model teacher(student.config, student.attention, *student.backend, ModelUse::frozen);
    teacher.set_params(student.model->get_params());
    teacher.forward(student.inputs.data(), student.B, student.T, false);
    student.model->zero_grads();
    student.model->forward(student.inputs.data(), student.B, student.T, false);
    LossSettings s;
    s.kd_loss = kind;
    s.kd_weight = 1.f;
    s.temperature = 2.f;
    s.chunk_tokens = 4;
    LossSums sums = student.loss.run(*student.model, &teacher, student.targets.data(), s, 1.f, true);
    CHECK(std::abs(sums.kd) < 1e-4);
    CHECK(sums.ce > 0.0);
    student.model->backward();
    for (float g : student.model->get_grads()) REQUIRE(std::abs(g) < 1e-4f);
  }
}

// FusedLoss sums the per-token teacher soft cross-entropy over its chunks for any
// kd.loss: it equals the soft_ce loss itself, exceeds the forward KL by the teacher
// entropy (> 0), and is 0 without a teacher.
TEST_CASE("model: logged soft cross-entropy equals the soft_ce KD loss", "[model][kd]") {
  Harness student(qwen_like(), AttentionVariant::affine, AlphaActivation::linear_clip, 21);
  Harness other(qwen_like(), AttentionVariant::baseline, AlphaActivation::linear_clip, 22);
  Model teacher(other.config, other.attention, *student.backend, ModelUse::frozen);
  teacher.set_params(other.model->get_params());
  teacher.forward(student.inputs.data(), student.B, student.T, false);
  student.model->forward(student.inputs.data(), student.B, student.T, false);
  LossSettings s;
  s.kd_weight = 1.f;
  s.temperature = 2.f;
  s.chunk_tokens = 5;
  s.kd_loss = KdLoss::soft_ce;
  const LossSums soft = student.loss.run(*student.model, &teacher, student.targets.data(), s, 1.f, false);
  s.kd_loss = KdLoss::forward_kl;
  const LossSums kl = student.loss.run(*student.model, &teacher, student.targets.data(), s, 1.f, false);
  CHECK(soft.soft_ce == Approx(soft.kd).epsilon(1e-6));
  CHECK(kl.soft_ce == Approx(soft.kd).epsilon(1e-6));
  CHECK(kl.soft_ce > kl.kd + 1e-3);
  const LossSums none = student.loss.run(*student.model, nullptr, student.targets.data(), s, 1.f, false);
  CHECK(none.soft_ce == 0.0);
}

TEST_CASE("model: teacher without gradients refuses backward", "[model]") {
  auto backend = make_backend("cpu", 0);
  AttentionConfig a;
  Model teacher(llama_like(), a, *backend, ModelUse::frozen);
  CHECK_FALSE(teacher.trainable());
  CHECK_THROWS_WITH(teacher.zero_grads(), Catch::Contains("without gradients"));
}
