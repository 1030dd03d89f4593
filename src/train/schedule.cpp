#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace kdtrain {

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

double decay_factor(DecayShape shape, double p) {
  p = std::clamp(p, 0.0, 1.0);
  switch (shape) {
    case DecayShape::linear:
      return 1.0 - p;
    case DecayShape::cosine:
      return 0.5 * (1.0 + std::cos(kPi * p));
    case DecayShape::one_minus_sqrt:
      return 1.0 - std::sqrt(p);
  }
  return 1.0 - p;
}

double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  if (step < s.warmup) return base_lr * double(step + 1) / double(s.warmup);
  const double floor_ratio = s.min_lr_ratio;
  // Decay over [start, start + length): progress reaches 1 on the last step.
  auto decayed = [&](DecayShape shape, int64_t start, int64_t length) {
    if (length <= 0 || step < start) return base_lr;
    const double p = double(step - start + 1) / double(length);
    return base_lr * (floor_ratio + (1.0 - floor_ratio) * decay_factor(shape, p));
  };
  switch (s.kind) {
    case ScheduleKind::constant:
      return base_lr;
    case ScheduleKind::cosine:
      return decayed(DecayShape::cosine, s.warmup, total_steps - s.warmup);
    case ScheduleKind::wsd: {
      const int64_t length = std::llround(s.decay_fraction * double(total_steps));
      return decayed(s.decay_shape, total_steps - length, length);
    }
  }
  return base_lr;
}

}  // namespace kdtrain
