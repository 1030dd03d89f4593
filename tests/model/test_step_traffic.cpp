// What one training step asks of the backend on the host's side, read from
// Backend::counters() on the CPU backend (the calls are the same on CUDA; there
// each to_host is a wait for the device). Pins down the step's round trips:
//   - no whole-arena copy to the host (sink logging reads L*H floats, alpha_ma is
//     a host mirror, the embedding backward takes the host's token ids);
//   - the gradient norm is one reduction (one sum_squares call, one read);
//   - no allocation once the first step has sized every buffer;
//   - a teacher keeps one layer's activations and, on a bf16 backend, no master.
#include <catch2/catch.hpp>

#include <cmath>

#include "backend/backend.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "support/model_step.h"
#include "train/optimizer.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

struct Step {
  std::unique_ptr<Backend> backend;
  ModelConfig config = llama_like();
  AttentionConfig attention;
  std::unique_ptr<Model> model;
  std::unique_ptr<AdamW> optimizer;
  FusedLoss loss{*backend};
  std::vector<int32_t> inputs, targets;
  int64_t B = 2, T = 9;

  explicit Step(AttentionVariant v, const std::string& device = "cpu")
      : backend(make_backend(device, 1)) {
    attention.variant = v;
    model = std::make_unique<Model>(config, attention, *backend);
    model->set_params(init_params(model->layout(), config, attention, 5));
    optimizer = std::make_unique<AdamW>(*model, OptimizerConfig{});
    const std::vector<int32_t> tokens = random_tokens(B * T + 1, config.vocab_size, 6);
    inputs.assign(tokens.begin(), tokens.end() - 1);
    targets.assign(tokens.begin() + 1, tokens.end());
  }

  // The trainer's step, as src/train/train_step.cpp runs it for one micro-batch.
  void run() {
    micro_batch_gradients(*model, loss, inputs, targets, B, T, true, 7);
    const double norm = std::sqrt(optimizer->grad_sum_squares());
    optimizer->step(1e-3f, clip_scale(norm, 1.0));
    dist::SingleCommunicator comm;
    model->variant().end_step(comm, true);
    (void)model->variant().sinks();  // what the sink variants log every step
  }
};

BackendCounters delta(const BackendCounters& a, const BackendCounters& b) {
  BackendCounters d;
  d.host_waits = b.host_waits - a.host_waits;
  d.to_host_calls = b.to_host_calls - a.to_host_calls;
  d.to_host_bytes = b.to_host_bytes - a.to_host_bytes;
  d.to_device_calls = b.to_device_calls - a.to_device_calls;
  d.to_device_bytes = b.to_device_bytes - a.to_device_bytes;
  d.allocs = b.allocs - a.allocs;
  return d;
}
}  // namespace

TEST_CASE("a training step moves no parameter arena and allocates nothing once warm",
          "[train][traffic]") {
  for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::sink,
                             AttentionVariant::affine}) {
    INFO("variant " << to_string(v));
    Step step(v);
    step.run();  // sizes the activation arena and the loss buffers
    const BackendCounters before = step.backend->counters();
    step.run();
    const BackendCounters d = delta(before, step.backend->counters());
    const int64_t arena_bytes = step.model->layout().total * int64_t(sizeof(float));
    const int64_t L = step.config.num_hidden_layers, H = step.config.num_attention_heads;
    const int64_t N = step.B * step.T;
    CHECK(d.allocs == 0);
    // Reads: the loss (ce and kd per token), the alpha sums (affine), the sinks
    // (sink), and the gradient norm (inside sum_squares, not a to_host). Nothing
    // of the size of the arena.
    int64_t expected_read = 2 * N * int64_t(sizeof(float));
    if (features_of(v).affine) expected_read += L * H * int64_t(sizeof(float));
    if (features_of(v).sink) expected_read += L * H * int64_t(sizeof(float));
    CHECK(d.to_host_bytes == expected_read);
    CHECK(d.to_host_bytes < arena_bytes / 4);
    // Uploads: the input tokens, the targets and, for affine, alpha_ma (L*H floats).
    int64_t expected_written = 2 * N * int64_t(sizeof(int32_t));
    if (features_of(v).affine) expected_written += L * H * int64_t(sizeof(float));
    CHECK(d.to_device_bytes == expected_written);
  }
}

TEST_CASE("sinks() and the alpha_ma mirror agree with the parameter arena", "[train][traffic]") {
  Step sink(AttentionVariant::sink);
  sink.run();
  const std::vector<float> params = sink.model->get_params();
  const std::vector<float> sinks = sink.model->variant().sinks();
  const int64_t H = sink.config.num_attention_heads;
  for (int64_t l = 0; l < sink.config.num_hidden_layers; ++l)
    for (int64_t h = 0; h < H; ++h)
      CHECK(sinks[l * H + h] == params[sink.model->layout().layers[l].sinks + h]);

  Step affine(AttentionVariant::affine);
  affine.run();
  affine.run();
  const std::vector<float> p = affine.model->get_params();
  const std::vector<float> ma = affine.model->variant().alpha_ma();
  for (int64_t l = 0; l < affine.config.num_hidden_layers; ++l)
    for (int64_t h = 0; h < H; ++h) {
      CHECK(ma[l * H + h] == p[affine.model->layout().layers[l].alpha_ma + h]);
      CHECK(ma[l * H + h] != 0.f);  // the update ran
    }
  // set_params refreshes the mirror.
  std::vector<float> fresh = init_params(affine.model->layout(), affine.config, affine.attention, 9);
  fresh[affine.model->layout().layers[1].alpha_ma + 2] = 0.625f;
  affine.model->set_params(fresh);
  CHECK(affine.model->variant().alpha_ma()[1 * H + 2] == 0.625f);
}

TEST_CASE("a teacher streams: one layer of activations, forward equal to a frozen model",
          "[model][traffic]") {
  auto backend = make_backend("cpu", 1);
  const ModelConfig m = llama_like();
  for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::sink,
                             AttentionVariant::affine_gated}) {
    INFO("variant " << to_string(v));
    AttentionConfig a;
    a.variant = v;
    const int64_t B = 2, T = 9;
    const AttentionFeatures f = features_of(v);
    auto arena = [&](const ModelConfig& model, ModelUse use) {
      return plan_activations(model, f, DType::bf16, use, B, T).total_bytes;
    };
    const size_t train = arena(m, ModelUse::train);
    const size_t frozen = arena(m, ModelUse::frozen);
    const size_t teacher = arena(m, ModelUse::teacher);
    CHECK(teacher < frozen);
    CHECK(frozen < train);
    // One more layer costs a frozen model a layer's worth, a teacher nothing.
    ModelConfig deeper = m;
    deeper.num_hidden_layers += 3;
    CHECK(arena(deeper, ModelUse::teacher) == teacher);
    CHECK(arena(deeper, ModelUse::frozen) > frozen);

    const std::vector<float> params = init_params(make_param_layout(m, a), m, a, 3);
    Model reference(m, a, *backend, ModelUse::frozen), streamed(m, a, *backend, ModelUse::teacher);
    reference.set_params(params);
    streamed.set_params(params);
    const std::vector<int32_t> tokens = random_tokens(B * T, m.vocab_size, 4);
    reference.forward(tokens.data(), B, T, false);
    streamed.forward(tokens.data(), B, T, false);
    const int64_t n = B * T * m.hidden_size;
    std::vector<float> h1(n), h2(n);
    backend->to_host(h1.data(), reference.final_hidden(), n * sizeof(float));
    backend->to_host(h2.data(), streamed.final_hidden(), n * sizeof(float));
    CHECK(h1 == h2);
  }
}

TEST_CASE("cuda: a training step waits for the device only to read results back",
          "[cuda][traffic]") {
  if (!cuda_available()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::sink,
                             AttentionVariant::affine}) {
    INFO("variant " << to_string(v));
    Step step(v, "cuda");
    step.run();
    const BackendCounters before = step.backend->counters();
    step.run();
    const BackendCounters d = delta(before, step.backend->counters());
    // The loss sums and the gradient norm, plus the alpha sums (affine) or the
    // sinks (sink); every upload is staged without a wait.
    const int64_t expected = 2 + (features_of(v).affine ? 1 : 0) + (features_of(v).sink ? 1 : 0);
    CHECK(d.host_waits == expected);
    CHECK(d.allocs == 0);
  }
}
