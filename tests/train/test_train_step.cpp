// The trainer's step (train/train_step.h) in process, on tiny-llama: gradient
// accumulation, the schedule's lr, the non-finite guard (stop, skip, the cap on
// skips in a row) and the affine variant's alpha_ma update.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "support/run_parts_fixture.h"
#include "train/schedule.h"
#include "train/observer.h"
#include "train/train_step.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// lr 1e30 without clipping: step 1 is finite and its update overflows the
// weights, so every later step is not finite.
Config diverging(Config c, NonFinitePolicy policy) {
  c.optimizer.lr = 1e30;
  c.optimizer.grad_clip = 0;
  c.schedule.kind = ScheduleKind::constant;
  c.schedule.warmup = 0;
  c.train.on_nonfinite = policy;
  c.train.max_consecutive_skips = 3;
  return c;
}

}  // namespace

TEST_CASE("train step: two micro-batches accumulate the gradients of one batch of both", "[train][step]") {
  TinyRun split;  // global batch 4 = 2 micro-batches of 2
  TinyRun whole;
  Config c = tiny_run_config(whole.shard);
  c.train.micro_batch = 4;
  whole.reset(c);
  TrainStep a(*split.parts, nullptr), b(*whole.parts, nullptr);
  const StepResult ra = a.run(1), rb = b.run(1);
  REQUIRE(ra.sums.tokens == 4 * 32);
  REQUIRE(rb.sums.tokens == ra.sums.tokens);
  // Only the fp32 summation order differs (two passes of 64 tokens against one of
  // 128): a few ulps of fp32 (6e-8) per reduction of ~100 terms, bounded by 1e-5.
  CHECK(ra.loss == Approx(rb.loss).epsilon(1e-5));
  CHECK(ra.grad_norm == Approx(rb.grad_norm).epsilon(1e-5));
  // The reduced gradients stay in the arena until the next step zeroes them.
  const std::vector<float> ga = split.parts->student->get_grads(), gb = whole.parts->student->get_grads();
  REQUIRE(ga.size() == gb.size());
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < ga.size(); ++i) {
    worst = std::max(worst, std::abs(double(ga[i]) - gb[i]));
    largest = std::max(largest, std::abs(double(gb[i])));
  }
  CHECK(largest > 0.0);
  CHECK(worst <= 1e-5 * largest);
}

TEST_CASE("train step: step numbers are 1-based and the lr follows the schedule", "[train][step]") {
  TinyRun run;
  TrainStep step(*run.parts, nullptr);
  const Config& c = run.parts->config;
  for (int64_t s = 1; s <= 3; ++s) {
    const StepResult r = step.run(s);
    CHECK(r.lr == learning_rate(c.schedule, c.optimizer.lr, s - 1, c.train.steps));
    CHECK(r.applied);
    CHECK(std::isfinite(r.loss));
  }
  CHECK(run.parts->optimizer->steps_taken() == 3);
  CHECK(run.parts->sampler->index() > 0);
}

TEST_CASE("train step: a non-finite step never reaches the weights", "[train][step][nonfinite]") {
  for (NonFinitePolicy policy : {NonFinitePolicy::stop, NonFinitePolicy::skip}) {
    INFO("train.on_nonfinite=" << policy);
    TinyRun run;
    run.reset(diverging(tiny_run_config(run.shard), policy));
    TrainStep step(*run.parts, nullptr);
    REQUIRE(step.run(1).applied);
    const std::vector<float> before = run.parts->student->get_params();
    if (policy == NonFinitePolicy::stop) {
      // stop: an error naming the step and the way out.
      const std::string message = error_message([&] { step.run(2); });
      CHECK_THAT(message, Contains("step 2: non-finite"));
      CHECK_THAT(message, Contains("train.on_nonfinite=skip"));
    } else {
      // skip: counted, until max_consecutive_skips (3) in a row stop the run.
      for (int64_t s = 2; s <= 3; ++s) {
        CHECK_FALSE(step.run(s).applied);
        CHECK(step.skips().skipped == s - 1);
        CHECK(step.skips().consecutive == s - 1);
      }
      CHECK_THAT(error_message([&] { step.run(4); }), Contains("3 steps in a row"));
    }
    CHECK(same_bits(run.parts->student->get_params(), before));
    CHECK(run.parts->optimizer->steps_taken() == 1);
  }
}

TEST_CASE("train step: affine alpha_ma moves toward the step's mean alpha by 1 - rho", "[train][step][affine]") {
  TinyRun run(AttentionVariant::affine);
  TrainStep step(*run.parts, nullptr);
  Model& student = *run.parts->student;
  const double rho = run.parts->config.attention.alpha_momentum;
  const std::vector<float> before = student.variant().alpha_ma();
  const StepResult r = step.run(1);
  const std::vector<float> after = student.variant().alpha_ma();
  const ModelConfig& m = run.parts->config.model;
  REQUIRE(r.alpha_mean.size() == static_cast<size_t>(m.num_hidden_layers * m.num_attention_heads));
  REQUIRE(after.size() == r.alpha_mean.size());
  for (size_t i = 0; i < after.size(); ++i) {
    // The distance to the mean shrinks by rho, up to the fp32 rounding of alpha_ma.
    CHECK(std::abs(after[i] - r.alpha_mean[i]) == Approx(rho * std::abs(before[i] - r.alpha_mean[i])).margin(1e-6));
  }
}

TEST_CASE("train step: variants without affine carry no alpha_mean", "[train][step]") {
  TinyRun run(AttentionVariant::sink);
  TrainStep step(*run.parts, nullptr);
  CHECK(step.run(1).alpha_mean.empty());
}

TEST_CASE("training path: CUDA refuses head dims the fused kernels do not take", "[train][step][cuda_path]") {
  Config c;
  c.model = model_preset("tiny-llama");  // head_dim 16
  c.train.device = Device::cpu;
  CHECK_NOTHROW(check_training_path(c));  // the CPU takes any head dim
  c.train.device = Device::cuda;
  const std::string message = error_message([&] { check_training_path(c); });
  CHECK_THAT(message, Contains("model.head_dim = 16"));
  CHECK_THAT(message, Contains("64 and 128"));
  for (int64_t D : {64, 128}) {
    c.model.head_dim = D;
    CHECK_NOTHROW(check_training_path(c));
  }
  c.train.micro_batch = 65536;
  CHECK_THAT(error_message([&] { check_training_path(c); }), Contains("train.micro_batch (65536)"));
}

namespace {

// Records the phases the step announces, in order.
struct PhaseLog : TrainObserver {
  std::vector<StepPhase> phases;
  void on_phase(int64_t, StepPhase phase) override { phases.push_back(phase); }
};

}  // namespace

TEST_CASE("train step: the phase hook sees each micro-batch's teacher, student and backward, then the optimizer",
          "[train][step][phases]") {
  TinyRun run;  // global batch 4 = 2 micro-batches of 2
  PhaseLog log;
  TrainStep step(*run.parts, &log);
  step.run(1);
  using P = StepPhase;
  CHECK(log.phases == std::vector<P>{P::teacher, P::student, P::backward, P::teacher, P::student, P::backward,
                                     P::optimizer});
}

TEST_CASE("train step: a batch source replaces the data set, window by window", "[train][step][phases]") {
  // The source serves each window's tokens from the data set the default reads:
  // the step must be the default's, bit for bit; a source that serves other
  // tokens must change it.
  TinyRun a, b, c;
  const data::TokenDataset& data = *b.parts->train_data;
  BatchSource same;
  same.tokens = [&](const std::vector<int64_t>& w, int32_t* in, int32_t* tg) { data.fill_batch(w, in, tg); };
  BatchSource shifted;
  shifted.tokens = [&](const std::vector<int64_t>& w, int32_t* in, int32_t* tg) {
    std::vector<int64_t> next(w);
    for (int64_t& id : next) id = (id + 1) % data.num_windows();
    data.fill_batch(next, in, tg);
  };
  TrainStep sa(*a.parts, nullptr), sb(*b.parts, nullptr, same), sc(*c.parts, nullptr, shifted);
  const StepResult ra = sa.run(1), rb = sb.run(1), rc = sc.run(1);
  CHECK(ra.loss == rb.loss);
  CHECK(same_bits(a.parts->student->get_params(), b.parts->student->get_params()));
  CHECK(rc.loss != ra.loss);
}
