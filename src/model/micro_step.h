// One micro-batch through the models, written once for every caller: the
// training step (train/train_step.cpp), validation (train/reporter.cpp),
// perplexity (eval/perplexity.cpp), `kdtrain dump` and `kdtrain bench` (which
// times the training step itself). As llm.c's gpt2_forward takes optional
// targets, the same function serves training and evaluation:
//   teacher forward (an online teacher) → student forward → the fused loss
//   against the teacher's logits, the cached teacher rows, or the targets alone
//   → (train pass) the student's backward.
// In a train pass the forward adds the alpha sums of the affine variants
// (model/variant_state.h), the loss pushes each chunk's dlogits through the LM
// head, and the backward accumulates into the student's gradients; the caller
// zeroes them (Model::zero_grads) before the first micro-batch of a step.
#pragma once
#include <cstdint>
#include <functional>

#include "model/cached_teacher_loss.h"
#include "model/loss.h"
#include "model/model.h"

namespace kdtrain {

// The parts of a training step, in order, for hooks that time them
// (`kdtrain bench`): each micro-batch runs teacher, student (forward and loss)
// and backward; the step then reduces, clips and updates (optimizer).
enum class StepPhase { teacher, student, backward, optimizer };
// Called as each phase begins; the work of the previous one may still be queued
// on the backend's stream (a hook that times phases synchronises first).
using PhaseHook = std::function<void(StepPhase phase)>;

struct MicroBatch {
  const int32_t* inputs = nullptr;   // (B, T) host token ids
  const int32_t* targets = nullptr;  // (B, T) host: each input's next token
  int64_t B = 0, T = 0;
};

// Where the KD terms of the loss come from: an online teacher run on the same
// inputs, the cached teacher rows of the batch's windows (in the order of the
// student's tokens, data/teacher_cache.h), or neither (cross-entropy only).
struct MicroTeacher {
  Model* model = nullptr;
  const CachedRows* cached = nullptr;
  CacheTail tail = CacheTail::renormalize;  // how the cached rows' tail is read
};

struct MicroPass {
  bool train = false;       // alpha sums, the loss's gradient and the backward
  float grad_scale = 1.f;   // multiplies the gradient (1 / the step's global tokens)
  LogitsObserver logits;    // each chunk's student logits, fp32 host (kdtrain dump)
  PhaseHook on_phase;       // teacher, student, backward as each begins
  static MicroPass eval() { return MicroPass{}; }
  static MicroPass training(float grad_scale) {
    MicroPass p;
    p.train = true;
    p.grad_scale = grad_scale;
    return p;
  }
};

// Runs one micro-batch; returns its loss sums (over its B*T tokens).
LossSums run_micro_batch(const MicroBatch& batch, Model& student, const MicroTeacher& teacher, FusedLoss& loss,
                         const LossSettings& settings, const MicroPass& pass);

}  // namespace kdtrain
