// A micro-batch's gradients as the trainer makes them, for the model-level tests.
#pragma once
#include <cstdint>
#include <vector>

#include "model/loss.h"
#include "model/model.h"

namespace kdtrain::testing {

// Zeroes the gradients, runs the forward on B x T `inputs` (`training`: the
// forward of a training step), the loss against `targets` in chunks of
// chunk_tokens rows, averaged over the B*T tokens (no teacher), and the backward.
inline void micro_batch_gradients(Model& model, FusedLoss& loss, const std::vector<int32_t>& inputs,
                                  const std::vector<int32_t>& targets, int64_t B, int64_t T, bool training,
                                  int64_t chunk_tokens) {
  model.zero_grads();
  model.forward(inputs.data(), B, T, training);
  LossSettings s;
  s.chunk_tokens = chunk_tokens;
  loss.run(model, nullptr, targets.data(), s, 1.f / (B * T), true);
  model.backward();
}

}  // namespace kdtrain::testing
