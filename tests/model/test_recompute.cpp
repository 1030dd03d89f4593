// Selective activation recomputation (train.recompute, train.recompute_layers;
// model/activations.h) on the CPU backend: every choice, with and without whole
// layers, gives bit-identical losses, gradients and alpha statistics for every
// variant, over two accumulated micro-batches; the arena it allocates is the
// plan `kdtrain info` prints, and each choice keeps less than the one before.
#include <catch2/catch.hpp>

#include <cstring>

#include "backend/backend.h"
#include "model/activations.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

constexpr int64_t kB = 2, kT = 9;

// What a training step reads back: the loss of each micro-batch, the
// accumulated gradients, alpha's column sums and the last final hidden state.
struct StepResult {
  std::vector<double> losses;
  std::vector<float> grads;
  std::vector<double> alpha_sums;
  std::vector<float> final_hidden;
  size_t arena_bytes = 0;
};

StepResult two_micro_batches(const ModelConfig& config, AttentionVariant variant,
                             const RecomputePlan& recompute) {
  std::unique_ptr<Backend> backend = make_backend("cpu", 0);
  AttentionConfig attention;
  attention.variant = variant;
  attention.sink_init_std = 1.0;
  Model model(config, attention, *backend);
  model.set_recompute(recompute);
  std::vector<float> params = init_params(model.layout(), config, attention, 5);
  for (const ParamSpec& s : model.layout().specs)  // non-zero alpha_ma and biases
    if (s.role == ParamRole::buffer || s.role == ParamRole::bias)
      for (int64_t i = 0; i < s.numel(); ++i) params[s.offset + i] = 0.3f + 0.01f * float(i % 7);
  model.set_params(params);
  FusedLoss loss(*backend);
  LossSettings settings;
  settings.chunk_tokens = 7;
  StepResult r;
  model.zero_grads();
  for (uint64_t micro = 0; micro < 2; ++micro) {
    const std::vector<int32_t> tokens = random_tokens(kB * kT + 1, config.vocab_size, 11 + micro);
    const std::vector<int32_t> inputs(tokens.begin(), tokens.end() - 1);
    const std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
    model.forward(inputs.data(), kB, kT, true);
    r.losses.push_back(
        loss.run(model, nullptr, targets.data(), settings, 1.f / (kB * kT), true).mixed(0.f, false));
    model.backward();
  }
  r.grads = model.get_grads();
  int64_t counted = 0;
  r.alpha_sums = model.variant().take_alpha_sums(&counted);
  const int64_t n = kB * kT * config.hidden_size;
  r.final_hidden.resize(static_cast<size_t>(n));
  backend->to_host(r.final_hidden.data(), model.final_hidden(), n * sizeof(float));
  r.arena_bytes = model.activation_bytes();
  return r;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::vector<RecomputePlan> every_choice(int64_t layers) {
  std::vector<RecomputePlan> plans;
  for (int64_t whole : {int64_t(0), int64_t(1), layers})
    for (const auto& row : Choices<Recompute>::rows) plans.push_back({row.value, whole});
  return plans;
}

ModelConfig three_layers(ModelConfig m) {
  m.num_hidden_layers = 3;  // whole layers 0..K-1 beside kept ones, and a kept first layer
  m.initializer_range = 0.2;
  return m;
}

}  // namespace

TEST_CASE("recompute: every choice is bit-identical to keeping every activation",
          "[recompute][model]") {
  for (const ModelConfig& config : {three_layers(llama_like()), three_layers(qwen_like())}) {
    for (AttentionVariant variant : kAllVariants) {
      const StepResult kept = two_micro_batches(config, variant, RecomputePlan{});
      for (const RecomputePlan& r : every_choice(config.num_hidden_layers)) {
        INFO(to_string(config.family) << " " << variant << " recompute=" << r.kept
                                      << " layers=" << r.whole_layers);
        const StepResult again = two_micro_batches(config, variant, r);
        CHECK(same_bits(again.losses, kept.losses));
        CHECK(same_bits(again.grads, kept.grads));
        CHECK(same_bits(again.alpha_sums, kept.alpha_sums));  // counted once, not per rerun
        CHECK(same_bits(again.final_hidden, kept.final_hidden));
        // One whole layer alone saves nothing: its buffers move to the shared layer.
        if (r.kept != Recompute::none || r.whole_layers > 1) CHECK(again.arena_bytes < kept.arena_bytes);
      }
    }
  }
}

TEST_CASE("recompute: the model allocates the planned arena, and each choice keeps less",
          "[recompute][memory]") {
  const ModelConfig config = three_layers(llama_like());
  for (AttentionVariant variant : kAllVariants) {
    const AttentionFeatures f = features_of(variant);
    size_t previous = 0;
    for (const RecomputePlan& r : every_choice(config.num_hidden_layers)) {
      INFO(variant << " recompute=" << r.kept << " layers=" << r.whole_layers);
      const ActivationPlan plan = plan_activations(config, f, DType::f32, ModelUse::train, kB, kT, r);
      CHECK(plan.total_bytes == two_micro_batches(config, variant, r).arena_bytes);
      if (r.whole_layers == 0 && r.kept != Recompute::none) CHECK(plan.total_bytes < previous);
      if (r.whole_layers == 0) previous = plan.total_bytes;
      // Frozen and teacher models never recompute: their layout ignores the choice.
      for (ModelUse use : {ModelUse::frozen, ModelUse::teacher})
        CHECK(plan_activations(config, f, DType::f32, use, kB, kT, r).total_bytes ==
              plan_activations(config, f, DType::f32, use, kB, kT).total_bytes);
    }
  }
}

TEST_CASE("recompute: added FLOPs are the gate/up products and the rerun layers", "[recompute]") {
  const ModelConfig m = three_layers(llama_like());
  const AttentionFeatures f = features_of(AttentionVariant::baseline);
  const double C = double(m.hidden_size), F = double(m.intermediate_size);
  CHECK(recompute_flops_per_token(m, f, {Recompute::norms, 0}, kT) == 0.0);
  CHECK(recompute_flops_per_token(m, f, {Recompute::mlp, 0}, kT) == 3 * 2 * C * 2 * F);
  // A whole layer costs more than its gate/up product, and whole layers replace it.
  const double one_layer = recompute_flops_per_token(m, f, {Recompute::none, 1}, kT);
  CHECK(one_layer > 2 * C * 2 * F);
  CHECK(recompute_flops_per_token(m, f, {Recompute::mlp, 1}, kT) == one_layer + 2 * 2 * C * 2 * F);
}

TEST_CASE("recompute: more whole layers than the model has is refused, naming the key", "[recompute]") {
  std::unique_ptr<Backend> backend = make_backend("cpu", 0);
  Model model(llama_like(), AttentionConfig{}, *backend);
  CHECK_THROWS_WITH(model.set_recompute({Recompute::none, 3}),
                    Catch::Contains("train.recompute_layers") && Catch::Contains("num_hidden_layers"));
}
