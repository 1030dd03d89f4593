#include "model/micro_step.h"

#include "core/error.h"

namespace kdtrain {

LossSums run_micro_batch(const MicroBatch& batch, Model& student, const MicroTeacher& teacher, FusedLoss& loss,
                         const LossSettings& settings, const MicroPass& pass) {
  const auto phase = [&](StepPhase p) {
    if (pass.on_phase) pass.on_phase(p);
  };
  phase(StepPhase::teacher);
  if (teacher.model) teacher.model->forward(batch.inputs, batch.B, batch.T, false);
  phase(StepPhase::student);
  student.forward(batch.inputs, batch.B, batch.T, pass.train);
  LossSums sums;
  if (teacher.cached) {
    KD_CHECK(!pass.logits, "the student's logits cannot be observed against a cached teacher");
    sums = run_cached_loss(loss, student, *teacher.cached, teacher.tail, batch.targets, settings, pass.grad_scale,
                           pass.train);
  } else {
    sums = loss.run(student, teacher.model, batch.targets, settings, pass.grad_scale, pass.train, pass.logits);
  }
  if (!pass.train) return sums;
  phase(StepPhase::backward);
  student.backward();
  return sums;
}

}  // namespace kdtrain
