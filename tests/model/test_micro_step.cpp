// The micro-step (model/micro_step.h) against the sequence it replaces, spelled
// out by hand: an eval pass is the forward and the fused loss; a train pass adds
// the alpha sums, the loss's gradient and the backward; a cached teacher goes
// through run_cached_loss. The same float operations in the same order, so every
// result is compared bit for bit; and the phase hook sees each phase once, in order.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "model/init.h"
#include "model/micro_step.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_sums(const LossSums& a, const LossSums& b) {
  return a.ce == b.ce && a.kd == b.kd && a.soft_ce == b.soft_ce && a.tokens == b.tokens;
}

// A student (affine: the forward's alpha sums count) and a baseline teacher on
// random tokens; two of each, one for the micro-step and one for the hand-written sequence.
struct Pair {
  std::unique_ptr<Backend> backend = make_backend("cpu", 1);
  ModelConfig m = llama_like();
  AttentionConfig a;
  std::unique_ptr<Model> student, teacher;
  FusedLoss loss{*backend};
  int64_t B = 2, T = 6;
  std::vector<int32_t> inputs, targets;
  LossSettings settings;

  Pair() {
    a.variant = AttentionVariant::affine;
    student = std::make_unique<Model>(m, a, *backend, ModelUse::train);
    student->set_params(init_params(student->layout(), m, a, 4));
    teacher = std::make_unique<Model>(m, AttentionConfig{}, *backend, ModelUse::teacher);
    teacher->set_params(init_params(teacher->layout(), m, AttentionConfig{}, 5));
    const std::vector<int32_t> tokens = random_tokens(B * T + 1, m.vocab_size, 6);
    inputs.assign(tokens.begin(), tokens.end() - 1);
    targets.assign(tokens.begin() + 1, tokens.end());
    settings.kd_weight = 0.6f;
    settings.temperature = 2.f;
    settings.chunk_tokens = 5;  // several chunks, the last one partial
  }
  MicroBatch batch() const { return {inputs.data(), targets.data(), B, T}; }

  // The micro-step with the online teacher, recording each phase it reports.
  LossSums micro_step(MicroPass pass, std::vector<StepPhase>& phases) {
    pass.on_phase = [&](StepPhase p) { phases.push_back(p); };
    MicroTeacher online;
    online.model = teacher.get();
    return run_micro_batch(batch(), *student, online, loss, settings, pass);
  }

  // The sequence it replaces, by hand: both forwards and the fused loss, and the
  // student's backward when training.
  LossSums by_hand(float grad_scale, bool training) {
    teacher->forward(inputs.data(), B, T, false);
    student->forward(inputs.data(), B, T, training);
    const LossSums sums = loss.run(*student, teacher.get(), targets.data(), settings, grad_scale, training);
    if (training) student->backward();
    return sums;
  }
};

}  // namespace

TEST_CASE("micro-step: an eval pass is the forward and the loss, nothing more", "[model][micro_step]") {
  Pair step, hand;
  std::vector<StepPhase> phases;
  const LossSums got = step.micro_step(MicroPass::eval(), phases);
  const LossSums want = hand.by_hand(1.f, false);
  CHECK(same_sums(got, want));
  CHECK(got.kd > 0);
  CHECK(phases == std::vector<StepPhase>{StepPhase::teacher, StepPhase::student});
  int64_t counted = -1;
  step.student->variant().take_alpha_sums(&counted);
  CHECK(counted == 0);  // an eval forward adds no alpha sums
  CHECK(same_bits(step.student->get_grads(), std::vector<float>(step.student->layout().total, 0.f)));
}

TEST_CASE("micro-step: a train pass adds the alpha sums, the loss's gradient and the backward",
          "[model][micro_step]") {
  Pair step, hand;
  std::vector<StepPhase> phases;
  const LossSums got = step.micro_step(MicroPass::training(0.25f), phases);
  const LossSums want = hand.by_hand(0.25f, true);
  CHECK(same_sums(got, want));
  CHECK(same_bits(step.student->get_grads(), hand.student->get_grads()));
  int64_t got_tokens = 0, want_tokens = 0;
  CHECK(step.student->variant().take_alpha_sums(&got_tokens) == hand.student->variant().take_alpha_sums(&want_tokens));
  CHECK(got_tokens == step.B * step.T);
  CHECK(got_tokens == want_tokens);
  CHECK(phases == std::vector<StepPhase>{StepPhase::teacher, StepPhase::student, StepPhase::backward});
}

TEST_CASE("micro-step: a cached teacher's rows go through run_cached_loss", "[model][micro_step]") {
  Pair step, hand;
  // One row per token: the K = 2 ids (t, t+1) with log-probabilities of 0.7 and 0.2, tail 0.1.
  CachedRows rows;
  rows.K = 2;
  for (int32_t t : step.targets) {
    rows.ids.insert(rows.ids.end(), {t, static_cast<int32_t>((t + 1) % step.m.vocab_size)});
    rows.logp.insert(rows.logp.end(), {std::log(0.7f), std::log(0.2f)});
    rows.log_tail.push_back(std::log(0.1f));
  }
  MicroTeacher teacher;
  teacher.cached = &rows;
  teacher.tail = CacheTail::bucket;
  const LossSums got =
      run_micro_batch(step.batch(), *step.student, teacher, step.loss, step.settings, MicroPass::training(0.5f));

  hand.student->forward(hand.inputs.data(), hand.B, hand.T, true);
  const LossSums want = run_cached_loss(hand.loss, *hand.student, rows, CacheTail::bucket, hand.targets.data(),
                                        hand.settings, 0.5f, true);
  hand.student->backward();
  CHECK(same_sums(got, want));
  CHECK(got.kd > 0);
  CHECK(same_bits(step.student->get_grads(), hand.student->get_grads()));
}
