// What `kdtrain bench` puts around the training step it times: the run's parts
// built from the bench's options instead of a data set (a random-init student,
// an optional teacher, the optimizer, a sampler over a pool of random token
// windows, with --teacher-cache a synthetic cache of them read by training's
// cache reader), the batch source that serves those windows, and the observer
// that times each phase of TrainStep::run (train/observer.h).
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "bench/bench.h"
#include "train/observer.h"
#include "train/run_parts.h"
#include "train/train_step.h"

namespace kdtrain::bench {

// The config of the timed run: one micro-batch of B sequences of T tokens per
// step (global batch B on one rank), train.steps = warmup + steps for the
// learning-rate schedule, train.device from --device.
Config step_bench_config(const BenchShape& shape, const BenchOptions& options);

struct BenchTeacher {
  std::string source;  // "", "preset (random init)" or "checkpoint"
  double ready_s = 0;  // a checkpoint's: mapped, checked, uploaded and hashed (train/teacher_load.h)
};
// Builds parts.backend, student (random init from --seed), loss, teacher
// (--teacher: a preset, random init, or a checkpoint directory) or cache and
// its reader (--teacher-cache: a synthetic cache of the pool's windows),
// sampler and optimizer for parts.config.
BenchTeacher build_step_bench_parts(RunParts& parts, const BenchOptions& options);

// B windows of random tokens (fixed seed: inputs the first T of T+1, targets the
// last T) and, with --teacher-cache K, their rows from parts.cache_reader.
BatchSource random_batches(const RunParts& parts, const BenchOptions& options);

// The cache reader's takes so far: served by its thread (hits) or read on the
// step's thread (misses); zero without --teacher-cache.
struct CacheReaderCounts {
  int64_t hits = 0, misses = 0;
};
CacheReaderCounts reader_counts(const RunParts& parts);
// {"hits", "misses"} of the timed steps (since `timed_start`) and "upload_lane"
// (the reader thread uploads the rows: CUDA); null without --teacher-cache.
nlohmann::json cache_reader_report(const RunParts& parts, const CacheReaderCounts& timed_start);

// The arenas the timed run allocated, as "<key>_bytes" of the memory plan's
// rows (model/memory_plan.h): the student's and the teacher's activations, and
// the optimizer's moments.
nlohmann::json measured_arenas(const RunParts& parts);

// Times each phase of each step: synchronises the backend as each phase
// begins and as the step ends, so a phase's time is its own work.
class PhaseTimer : public TrainObserver {
 public:
  static constexpr int kPhases = 4;  // StepPhase: teacher, student, backward, optimizer
  explicit PhaseTimer(Backend& backend) : backend_(backend) {}
  // Around TrainStep::run; `record`: keep this step's times (false for warmup).
  void begin_step(bool record);
  void end_step();
  void on_phase(int64_t step, StepPhase phase) override;

  // Per recorded step, milliseconds: the whole step, and each phase (the time
  // before the first mark, drawing the batch, counts as the teacher's).
  std::vector<double> step_ms;
  std::array<std::vector<double>, kPhases> phase_ms;

 private:
  void close_phase();
  Backend& backend_;
  bool record_ = false;
  std::chrono::steady_clock::time_point step_start_, mark_;
  StepPhase current_ = StepPhase::teacher;
  std::array<double, kPhases> open_{};
};

}  // namespace kdtrain::bench
