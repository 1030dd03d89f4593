// The trainer's reporter (train/reporter.h) in process: the progress and
// validation cadences, the metrics record of a step, validation where due, and a
// failed metrics write kept for the checkpoint.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/run_parts_fixture.h"
#include "train/reporter.h"
#include "train/train_step.h"

using namespace kdtrain;
using namespace kdtrain::testing;

TEST_CASE("reporter: progress every log.interval, on the first and last steps, and after a silence", "[train][reporter]") {
  Config c;
  c.train.steps = 20;
  c.log.interval = 5;
  const auto quiet = std::chrono::seconds(30);
  // From a fresh start (first_step 0) and from a resume at step 7.
  for (const auto& [first, expected] : {std::pair{int64_t{0}, std::vector<int64_t>{1, 5, 10, 15, 20}},
                                        std::pair{int64_t{7}, std::vector<int64_t>{5, 8, 10, 15, 20}}})
    CHECK(due_steps(c.train.steps, [&](int64_t s) { return progress_due(c, s, first, {}, quiet); }) == expected);
  CHECK(progress_due(c, 7, 0, std::chrono::seconds(31), quiet));
}

TEST_CASE("reporter: validation every eval.interval and on the last step", "[train][reporter]") {
  Config c;
  c.train.steps = 10;
  c.eval.interval = 4;
  CHECK(due_steps(c.train.steps, [&](int64_t s) { return validation_due(c, s); }) == std::vector<int64_t>{4, 8, 10});
  c.eval.interval = 0;
  CHECK(due_steps(c.train.steps, [&](int64_t s) { return validation_due(c, s); }) == std::vector<int64_t>{10});
}

TEST_CASE("reporter: each step's record in metrics.jsonl, with validation where due", "[train][reporter]") {
  TinyRun run(AttentionVariant::sink);
  Config c = tiny_run_config(run.shard, AttentionVariant::sink);
  c.data.val = {run.shard};
  c.eval.interval = 2;
  c.train.steps = 3;
  run.reset(c);
  std::filesystem::create_directories(run.parts->run_dir);
  TrainStep step(*run.parts, nullptr);
  Reporter reporter(*run.parts);
  reporter.start(0, nlohmann::json::array());
  for (int64_t s = 1; s <= 3; ++s) reporter.report(s, step.run(s), 0.5, 0);
  REQUIRE_FALSE(reporter.write_failed());
  reporter.finish(3, false);
  const std::vector<nlohmann::json> rows = metrics_of(run.parts->run_dir);
  REQUIRE(rows.size() == 3);
  for (int64_t s = 1; s <= 3; ++s) {
    const nlohmann::json& r = rows[s - 1];
    INFO("step " << s);
    CHECK(r["step"] == s);
    CHECK(r["applied"] == true);
    CHECK(r["step_time_s"] == 0.5);
    CHECK(r["sinks"].size() == static_cast<size_t>(c.model.num_hidden_layers));
    CHECK_FALSE(r.contains("alpha_ma"));
    CHECK_FALSE(r.contains("soft_ce"));  // no teacher
    CHECK(r.contains("val_loss") == (s != 1));  // eval.interval 2, and the last step
    // Fig. 2 over every position where validation runs; the cheap prefix probe every logged step
    CHECK(r.contains("attn_logit_mean_abs_all") == (s != 1));
    CHECK(r.contains("attn_logit_mean_abs"));
    if (s != 1) CHECK(r["attn_logit_mean_abs_all"].get<double>() > 0.0);
  }
  // Validation is the mean CE over the first eval.batches micro-batches: the same weights give the same value.
  nlohmann::json again;
  reporter.add_validation(again);
  CHECK(again["val_loss"] == rows[2]["val_loss"]);
}

TEST_CASE("reporter: a failed metrics write is returned and its record kept for the checkpoint", "[train][reporter]") {
  if (!std::filesystem::exists("/dev/full")) {
    WARN("SKIPPED: /dev/full is absent");
    return;
  }
  TinyRun run;
  std::filesystem::create_directories(run.parts->run_dir);
  std::filesystem::create_symlink("/dev/full", std::filesystem::path(run.parts->run_dir) / "metrics.jsonl");
  TrainStep step(*run.parts, nullptr);
  Reporter reporter(*run.parts);
  reporter.start(0, nlohmann::json::array());
  reporter.report(1, step.run(1), 0.1, 0);
  CHECK(reporter.write_failed());
  const LogsAtCheckpoint logs = reporter.flush();
  REQUIRE(logs.failure);
  CHECK_THAT(error_message([&] { std::rethrow_exception(logs.failure); }), Contains("metrics.jsonl"));
  REQUIRE(logs.pending.size() == 1);
  CHECK(logs.pending[0]["step"] == 1);
}
