// The trainer's checkpointer (train/checkpointer.h) in process: the cadence, a
// save resumed bit for bit into freshly built parts, a save after failed logs
// (written, then an error), the run lock and the stop vote.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "support/run_parts_fixture.h"
#include "train/checkpointer.h"
#include "train/reporter.h"
#include "train/train_step.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

// A fresh run's loop parts over `run`, the run directory locked and started.
struct Loop {
  TrainOptions options;
  TrainStep step;
  Reporter reporter;
  Checkpointer checkpointer;
  explicit Loop(RunParts& parts)
      : options(options_for(parts)), step(parts, nullptr), reporter(parts), checkpointer(parts, options) {
    checkpointer.open_run();
    reporter.start(0, nlohmann::json::array());
  }
  static TrainOptions options_for(const RunParts& parts) {
    TrainOptions o;
    o.run_dir = parts.run_dir;
    return o;
  }
};

}  // namespace

TEST_CASE("checkpointer: due every checkpoint.interval, on the last step and on a stop", "[train][checkpointer]") {
  Config c;
  c.train.steps = 10;
  c.checkpoint.interval = 3;
  CHECK(due_steps(c.train.steps, [&](int64_t s) { return checkpoint_due(c, s, false); }) ==
        std::vector<int64_t>{3, 6, 9, 10});
  CHECK(due_steps(c.train.steps, [&](int64_t s) { return checkpoint_due(c, s, true); }).size() == 10);
  c.checkpoint.interval = 0;
  CHECK(due_steps(c.train.steps, [&](int64_t s) { return checkpoint_due(c, s, false); }) ==
        std::vector<int64_t>{10});
}

TEST_CASE("checkpointer: a saved run resumes bit for bit into freshly built parts", "[train][checkpointer][resume]") {
  TinyRun run(AttentionVariant::affine);
  Loop loop(*run.parts);
  auto& [options, step, reporter, checkpointer] = loop;
  for (int64_t s = 1; s <= 2; ++s) reporter.report(s, step.run(s), 0.1, 0);
  REQUIRE_FALSE(reporter.write_failed());
  step.skips() = {2, 1};  // as if steps 1 and 2 had been skipped (at most `step` may be)
  CHECK_THAT(checkpointer.save(2, step.skips(), reporter.flush().pending), Contains("step_00000002"));
  CHECK_THAT(checkpointer.last(), Contains("step_00000002"));
  const StepResult next = step.run(3);

  // A second process: the same config, parts built from scratch, resumed.
  dist::SingleCommunicator comm;
  RunParts resumed(run.parts->config, comm, (run.tmp.path / "resumed").string());
  resumed.build();
  TrainOptions resume_options;
  resume_options.resume = run.parts->run_dir;
  resume_options.run_dir = resumed.run_dir;
  Checkpointer resumer(resumed, resume_options);
  const TrainingState state = resumer.resume();
  CHECK(state.step == 2);
  CHECK(state.skipped_steps == 2);
  CHECK(state.consecutive_skips == 1);
  CHECK(state.pending_metrics.empty());
  // Resuming only reads: the new run directory appears once the run opens (after the ranks agree).
  CHECK_FALSE(std::filesystem::exists(resumed.run_dir));
  resumer.open_run();
  CHECK(std::filesystem::exists(std::filesystem::path(resumed.run_dir) / "config.json"));
  TrainStep resumed_step(resumed, nullptr);
  const StepResult again = resumed_step.run(3);
  CHECK(again.loss == next.loss);
  CHECK(again.grad_norm == next.grad_norm);
  const std::vector<float> a = run.parts->student->get_params(), b = resumed.student->get_params();
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  CHECK(run.parts->student->variant().alpha_ma() == resumed.student->variant().alpha_ma());
}

TEST_CASE("checkpointer: after failed logs it still saves, then stops saying so", "[train][checkpointer]") {
  TinyRun run;
  Loop loop(*run.parts);
  loop.step.run(1);
  LogsAtCheckpoint logs;
  logs.failure = std::make_exception_ptr(Error("disk full"));
  const std::string message = error_message([&] { loop.checkpointer.save_then_stop(1, loop.step.skips(), logs); });
  CHECK_THAT(message, Contains("disk full"));
  CHECK_THAT(message, Contains("stopped after writing a checkpoint at step 1"));
  CHECK_THAT(message, Contains("--resume " + run.parts->run_dir));
  CHECK(std::filesystem::exists(std::filesystem::path(run.parts->run_dir) / "checkpoints" / "step_00000001"));
}

TEST_CASE("checkpointer: a second writer of the run directory is refused", "[train][checkpointer][lock]") {
  TinyRun run;
  TrainOptions options;
  options.run_dir = run.parts->run_dir;
  Checkpointer first(*run.parts, options), second(*run.parts, options);
  first.open_run();
  CHECK(std::filesystem::exists(std::filesystem::path(run.parts->run_dir) / "config.json"));
  CHECK_THAT(error_message([&] { second.open_run(); }), Contains(run.parts->run_dir));
}

TEST_CASE("checkpointer: ranks stop together when the logs fail", "[train][checkpointer]") {
  TinyRun run;
  Checkpointer checkpointer(*run.parts, TrainOptions{});
  CHECK_FALSE(checkpointer.stop_agreed(false));
  CHECK(checkpointer.stop_agreed(true));
}
