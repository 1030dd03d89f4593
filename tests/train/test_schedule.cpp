#include <catch2/catch.hpp>
#include <cmath>

#include "train/schedule.h"

using namespace kdtrain;

namespace {
ScheduleConfig wsd(DecayShape shape, int64_t warmup = 10, double fraction = 0.2, double min_ratio = 0.1) {
  ScheduleConfig s;
  s.kind = ScheduleKind::wsd;
  s.warmup = warmup;
  s.decay_fraction = fraction;
  s.decay_shape = shape;
  s.min_lr_ratio = min_ratio;
  return s;
}
}  // namespace

TEST_CASE("schedule: warmup endpoints", "[schedule]") {
  for (ScheduleKind kind : {ScheduleKind::wsd, ScheduleKind::cosine, ScheduleKind::constant}) {
    ScheduleConfig s = wsd(DecayShape::linear);
    s.kind = kind;
    CHECK(learning_rate(s, 1e-3, 0, 100) == Approx(1e-4));  // lr * 1 / warmup
    CHECK(learning_rate(s, 1e-3, 4, 100) == Approx(5e-4));
    CHECK(learning_rate(s, 1e-3, 9, 100) == Approx(1e-3));  // last warmup step reaches lr
  }
}

TEST_CASE("schedule: no warmup starts at the base lr", "[schedule]") {
  ScheduleConfig s = wsd(DecayShape::linear, 0);
  CHECK(learning_rate(s, 2.0, 0, 100) == Approx(2.0));
}

TEST_CASE("schedule: wsd stable value and decay end", "[schedule]") {
  // 100 steps, 20 decay steps: 80..99 decay, 10..79 stable.
  for (DecayShape shape : {DecayShape::linear, DecayShape::cosine, DecayShape::one_minus_sqrt}) {
    ScheduleConfig s = wsd(shape);
    for (int64_t step = 10; step < 80; ++step) CHECK(learning_rate(s, 1.0, step, 100) == 1.0);
    CHECK(learning_rate(s, 1.0, 99, 100) == Approx(0.1));   // min_lr_ratio * lr
    CHECK(learning_rate(s, 1.0, 150, 100) == Approx(0.1));  // past the end: stays at the floor
    CHECK(learning_rate(s, 1.0, 80, 100) < 1.0);            // decay has begun
    for (int64_t step = 79; step < 99; ++step)
      CHECK(learning_rate(s, 1.0, step + 1, 100) < learning_rate(s, 1.0, step, 100));
  }
}

TEST_CASE("schedule: wsd midpoint of each decay shape", "[schedule]") {
  // Decay over steps 80..99; progress p = (step - 80 + 1) / 20 = 0.5 at step 89.
  const double m = 0.1;
  CHECK(learning_rate(wsd(DecayShape::linear), 1.0, 89, 100) == Approx(m + (1 - m) * 0.5));
  CHECK(learning_rate(wsd(DecayShape::cosine), 1.0, 89, 100) == Approx(m + (1 - m) * 0.5));
  CHECK(learning_rate(wsd(DecayShape::one_minus_sqrt), 1.0, 89, 100) ==
        Approx(m + (1 - m) * (1 - std::sqrt(0.5))));
  // Quarter point separates linear from cosine: cos is flatter early.
  CHECK(learning_rate(wsd(DecayShape::linear), 1.0, 84, 100) == Approx(m + (1 - m) * 0.75));
  CHECK(learning_rate(wsd(DecayShape::cosine), 1.0, 84, 100) ==
        Approx(m + (1 - m) * 0.5 * (1 + std::cos(3.14159265358979 * 0.25))));
}

TEST_CASE("schedule: cosine decays from warmup to the floor", "[schedule]") {
  ScheduleConfig s = wsd(DecayShape::linear, 10, 0.2, 0.0);
  s.kind = ScheduleKind::cosine;
  // Steps 10..109 decay (100 steps); p = 0.5 at step 59.
  CHECK(learning_rate(s, 1.0, 59, 110) == Approx(0.5));
  CHECK(learning_rate(s, 1.0, 109, 110) == Approx(0.0).margin(1e-12));
  for (int64_t step = 10; step < 109; ++step)
    CHECK(learning_rate(s, 1.0, step + 1, 110) < learning_rate(s, 1.0, step, 110));
}

TEST_CASE("schedule: constant holds after warmup", "[schedule]") {
  ScheduleConfig s = wsd(DecayShape::linear);
  s.kind = ScheduleKind::constant;
  for (int64_t step = 10; step < 100; ++step) CHECK(learning_rate(s, 3e-4, step, 100) == 3e-4);
}

TEST_CASE("schedule: decay_factor endpoints", "[schedule]") {
  for (DecayShape shape : {DecayShape::linear, DecayShape::cosine, DecayShape::one_minus_sqrt}) {
    CHECK(decay_factor(shape, 0.0) == Approx(1.0));
    CHECK(decay_factor(shape, 1.0) == Approx(0.0).margin(1e-12));
  }
}
