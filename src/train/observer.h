// Hooks into the training loop for tests and diagnostics. The production
// trainer runs without one (TrainOptions::observer is null) and reads no
// debugging environment; the data-parallel tests run `kdtrain_probe`
// (tests/e2e/probe/), the kdtrain CLI with an observer that records what every
// rank read and held, and injects faults at exact points of a step.
//
// Every hook runs on every rank, on the training thread. Steps are 1-based:
// `step` is the optimizer step being computed or just finished.
#pragma once
#include <cstdint>
#include <vector>

#include "model/micro_step.h"

namespace kdtrain {


struct StepObservation {
  int64_t step = 0;
  int rank = 0, world = 1;
  const std::vector<int64_t>* windows = nullptr;  // this rank's window ids of the step, in order
  double loss = 0.0, grad_norm = 0.0;             // reduced over ranks: the same on every rank
  bool applied = true;                            // false for a skipped non-finite step
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  // Once, after set-up and before the first step.
  virtual void on_start(int /*rank*/, int /*world*/) {}
  // Each micro-batch's input tokens (B, T) as read from the data.
  virtual void on_micro_batch(int64_t /*step*/, const int32_t* /*inputs*/, int64_t /*B*/,
                              int64_t /*T*/) {}
  // As each phase of the step begins (model/micro_step.h): per micro-batch
  // teacher, student and backward, then the optimizer. `kdtrain bench` times them.
  virtual void on_phase(int64_t /*step*/, StepPhase /*phase*/) {}
  // The step's local gradients in arena elements [begin, end) are final and
  // about to be reduced across ranks (student.grads(), backend memory).
  virtual void on_grads_ready(int64_t /*step*/, int64_t /*begin*/, int64_t /*end*/,
                              Model& /*student*/) {}
  // After the optimizer step (or the skip), before the stop agreement and checkpointing.
  virtual void on_step_end(const StepObservation& /*step*/, Model& /*student*/) {}
};

}  // namespace kdtrain
