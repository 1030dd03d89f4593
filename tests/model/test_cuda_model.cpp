// The whole model on the CUDA backend (bf16) against the CPU backend (fp32), for
// every attention variant and both fixtures (llama-like: GQA, tied head, head dim
// 6; qwen-like: MHA, q/k/v bias, untied) plus a llama-like model with head dim 64
// (the fused attention path), one step of the mixed KD + CE loss (online teacher on
// the same backend, forward KL, tau = 2, kd_weight 0.5, several loss chunks).
//
// FlashAttention's rule separates rounding from defects: "truth" is the CPU model
// in fp32, "lowp" the same CPU model on the bf16-rounded weights with every
// activation rounded to bf16 as the GPU stores it (bf16_emulation_backend.h). Then
//   - loss:  |gpu - truth| <= 2 |lowp - truth| + u |truth|;
//   - every trainable tensor's gradient: relative L2 error ||g - g_truth|| / ||g_truth||
//     <= 2 x lowp's + 4u, and the norm ratio ||g|| / ||g_truth|| within 1 +- the same
//     bound (a gradient off by a constant factor passes a cosine test, not these;
//     lowp's own ratio is no yardstick: its deviation is a noisy projection of its
//     error, near 0 even at 6% error); buffers (alpha_ma) get exactly zero gradient;
//   - the alpha column sums (affine variants) within 1e-2 relative.
// u = 2^-8. The floors cover what lowp does not model: the roundings inside the fused
// attention (P and dS) and the summation orders.
//
// The first GPU run checked cosines > 0.999 and failed at 0.994..0.999 (llama_head64:
// embedding, layer 0 norm and q/k). Rounding, not a defect: lowp reproduces them on
// the CPU (baseline: embedding 0.99570 vs the GPU's 0.99587; layer-0 q_proj 0.99366 vs
// 0.99405, k_proj 0.99349 vs 0.99384, v_proj 0.99824 vs 0.99820; loss 5.10432 vs the
// GPU's 5.10453 against fp32's 5.10499). This fixture's gradients are that sensitive
// (initializer_range 0.2, head dim 64: peaked softmax); bf16 weights alone move them
// by 4-5%, activations by as much again.
// And determinism: two CUDA runs of 3 full training steps (forward, fused loss,
// backward, global norm, clipped AdamW) give bit-identical losses and weights.
#include <cmath>

#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/backend_args.h"
#include "support/bf16_emulation_backend.h"
#include "support/model_fixtures.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::testing;
using namespace kdtrain::cudatest;

namespace {

constexpr int64_t kB = 2, kT = 7;

// Student and teacher on one backend, parameters from fixed seeds.
struct Run {
  std::unique_ptr<Model> student, teacher;
  std::unique_ptr<FusedLoss> loss;
  std::vector<int32_t> inputs, targets;
  LossSettings settings;

  // round_weights: set the bf16-rounded weights (lowp; the CPU model has no separate
  // compute copy to round them for it).
  Run(Backend& be, const ModelConfig& base, AttentionVariant v, uint64_t seed, bool round_weights = false) {
    ModelConfig config = base;
    config.initializer_range = 0.2;  // gradients well above bf16 noise
    AttentionConfig attention;
    attention.variant = v;
    attention.sink_init_std = 1.0;
    student = std::make_unique<Model>(config, attention, be);
    teacher = std::make_unique<Model>(config, attention, be, ModelUse::frozen);
    std::vector<float> params = init_params(student->layout(), config, attention, seed);
    SplitMix64 rng(seed + 7);  // non-zero alpha_ma and biases: every term contributes
    for (const ParamSpec& s : student->layout().specs)
      if (s.role == ParamRole::buffer || s.role == ParamRole::bias)
        for (int64_t i = 0; i < s.numel(); ++i)
          params[s.offset + i] = static_cast<float>(0.3 + 0.4 * rng.uniform());
    std::vector<float> teacher_params = init_params(teacher->layout(), config, attention, seed + 100);
    if (round_weights) {
      for (float& x : params) x = round_bf16(x);
      for (float& x : teacher_params) x = round_bf16(x);
    }
    student->set_params(params);
    teacher->set_params(teacher_params);
    loss = std::make_unique<FusedLoss>(be);
    const std::vector<int32_t> tokens = random_tokens(kB * kT + 1, config.vocab_size, seed + 1);
    inputs.assign(tokens.begin(), tokens.end() - 1);
    targets.assign(tokens.begin() + 1, tokens.end());
    settings.kd_loss = KdLoss::forward_kl;
    settings.temperature = 2.f;
    settings.kd_weight = 0.5f;
    settings.chunk_tokens = 5;  // several chunks, the last one partial
  }

  // One micro-step; returns the mixed loss. Gradients land in student->grads().
  double step(bool accumulate_alpha) {
    student->zero_grads();
    teacher->forward(inputs.data(), kB, kT, false);
    student->forward(inputs.data(), kB, kT, accumulate_alpha);
    const LossSums sums = loss->run(*student, teacher.get(), targets.data(), settings,
                                    1.f / (kB * kT), true);
    student->backward();
    return sums.mixed(settings.kd_weight, true);
  }
};

// A gradient tensor against the truth: relative L2 error and norm ratio.
struct GradError {
  double rel = 0, ratio = 1;
};
GradError grad_error(const float* got, const float* truth, int64_t n) {
  double e2 = 0, g2 = 0, t2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - truth[i];
    e2 += d * d;
    g2 += static_cast<double>(got[i]) * got[i];
    t2 += static_cast<double>(truth[i]) * truth[i];
  }
  if (t2 == 0) return GradError{std::sqrt(e2), g2 == 0 ? 1.0 : INFINITY};
  return GradError{std::sqrt(e2 / t2), std::sqrt(g2 / t2)};
}

ModelConfig llama_head64() {
  ModelConfig m = llama_like();
  m.hidden_size = 100;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 64;
  m.intermediate_size = 130;
  return m;
}

}  // namespace

TEST_CASE("cuda model matches the CPU model for every variant", "[cuda][model]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto cpu_be = make_backend("cpu", 0);
  Bf16EmulationBackend lowp_be;
  auto gpu_be = cuda_backend();
  const double u = kBf16U, floor = 4 * u;
  struct Fixture { const char* name; ModelConfig config; };
  for (const Fixture& fx : {Fixture{"llama_like", llama_like()}, Fixture{"qwen_like", qwen_like()},
                            Fixture{"llama_head64", llama_head64()}}) {
    for (AttentionVariant v : kAllVariants) {
      INFO(fx.name << " variant=" << to_string(v));
      Run truth_run(*cpu_be, fx.config, v, 11);
      Run lowp_run(lowp_be, fx.config, v, 11, true);
      Run gpu_run(*gpu_be, fx.config, v, 11);
      const double loss_truth = truth_run.step(true), loss_lowp = lowp_run.step(true),
                   loss_gpu = gpu_run.step(true);
      INFO("loss fp32=" << loss_truth << " lowp=" << loss_lowp << " cuda=" << loss_gpu);
      CHECK(std::isfinite(loss_gpu));
      CHECK(std::abs(loss_gpu - loss_truth) <= 2 * std::abs(loss_lowp - loss_truth) + u * std::abs(loss_truth));

      const std::vector<float> g_truth = truth_run.student->get_grads();
      const std::vector<float> g_lowp = lowp_run.student->get_grads();
      const std::vector<float> g_gpu = gpu_run.student->get_grads();
      for (const ParamSpec& s : truth_run.student->layout().specs) {
        INFO("tensor " << s.name);
        if (!s.trainable()) {
          for (int64_t i = 0; i < s.numel(); ++i) REQUIRE(g_gpu[s.offset + i] == 0.f);
          continue;
        }
        const GradError gpu = grad_error(g_gpu.data() + s.offset, g_truth.data() + s.offset, s.numel());
        const GradError lowp = grad_error(g_lowp.data() + s.offset, g_truth.data() + s.offset, s.numel());
        INFO("relative L2 error cuda=" << gpu.rel << " lowp=" << lowp.rel << "; norm ratio cuda="
                                       << gpu.ratio << " lowp=" << lowp.ratio);
        CHECK(gpu.rel <= 2 * lowp.rel + floor);
        CHECK(std::abs(gpu.ratio - 1) <= 2 * lowp.rel + floor);
      }

      int64_t counted_cpu = 0, counted_gpu = 0;
      const std::vector<double> a_cpu = truth_run.student->variant().take_alpha_sums(&counted_cpu);
      const std::vector<double> a_gpu = gpu_run.student->variant().take_alpha_sums(&counted_gpu);
      CHECK(counted_cpu == counted_gpu);
      REQUIRE(a_cpu.size() == a_gpu.size());
      for (size_t i = 0; i < a_cpu.size(); ++i)
        CHECK(std::abs(a_gpu[i] - a_cpu[i]) <= 1e-2 * std::abs(a_cpu[i]) + 1e-3);
    }
  }
}

namespace {

// 3 clipped AdamW steps on the CUDA backend; returns the losses and the final
// master weights as raw bytes.
std::pair<std::vector<double>, std::vector<unsigned char>> train_three_steps(AttentionVariant v) {
  auto be = cuda_backend();
  Run run(*be, llama_like(), v, 5);
  Model& model = *run.student;
  const int64_t n = model.layout().total;
  float* m = static_cast<float*>(be->alloc(n * sizeof(float)));
  float* vv = static_cast<float*>(be->alloc(n * sizeof(float)));
  std::vector<double> losses;
  for (int64_t step = 1; step <= 3; ++step) {
    losses.push_back(run.step(false));
    const double norm = std::sqrt(be->sum_squares(model.grads(), n));
    losses.push_back(norm);
    AdamWArgs a = adamw_args(model.master(), model.weights(), model.grads(), m, vv, n);
    a.lr = 1e-2f;
    a.weight_decay = 0.1f;
    a.grad_scale = static_cast<float>(std::min(1.0, 1.0 / (norm + 1e-6)));
    a.step = step;
    be->adamw_update(a);
  }
  std::vector<unsigned char> bytes(n * sizeof(float));
  be->to_host(bytes.data(), model.master(), bytes.size());
  be->release(m);
  be->release(vv);
  return {losses, bytes};
}

}  // namespace

TEST_CASE("cuda training steps are bit-identical run after run", "[cuda][model][determinism]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  for (AttentionVariant v : {AttentionVariant::sink, AttentionVariant::affine_gated}) {
    INFO("variant=" << static_cast<int>(v));
    const auto first = train_three_steps(v);
    const auto second = train_three_steps(v);
    CHECK(first.first == second.first);
    CHECK(first.second == second.second);
    for (double x : first.first) CHECK(std::isfinite(x));
  }
}
