// Learning-rate schedules (docs/config.md "schedule").
//
// Steps are 0-based; step s is the s-th optimizer step of `total_steps`.
//   warmup (all kinds):  lr(s) = base_lr * (s + 1) / warmup            for s < warmup
//   wsd:      stable at base_lr, then the last D = round(decay_fraction * total_steps)
//             steps decay: p = (s - (total_steps - D) + 1) / D in (0, 1],
//             lr = base_lr * (m + (1 - m) * shape(p)), m = min_lr_ratio,
//             shape: linear 1 - p, cosine (1 + cos(pi p)) / 2, 1-sqrt 1 - sqrt(p).
//             The last step (s = total_steps - 1) therefore runs at m * base_lr.
//   cosine:   after warmup, cosine shape over the remaining steps, same p convention.
//   constant: base_lr after warmup.
// Steps past total_steps keep the final value.
#pragma once
#include <cstdint>

#include "config/config.h"

namespace kdtrain {

double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step,
                     int64_t total_steps);

// The shape factor in [0, 1] at decay progress p in [0, 1] (1 at p = 0, 0 at p = 1).
double decay_factor(DecayShape shape, double p);

}  // namespace kdtrain
