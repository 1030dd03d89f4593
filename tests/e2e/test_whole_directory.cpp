// No command destroys what it did not write.
// Each case is what a careful user did through the CLI and lost work to:
// `init --out` over a run or the user's files, `train --run-dir` on the
// teacher, a resume into another run's directory, a checkpoint path with a
// trailing `/`, `verify` disagreeing with `--resume`, `analyze --out` into a
// checkpoint, and `data write --out F --val-out F`. The rules they check are in
// io/output_dir.h and docs/reliability.md ("The whole directory").
#include <catch2/catch.hpp>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>

#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

int cli(const TempDir& tmp, std::vector<std::string> args, std::string* out) {
  return kdtrain_cli(tmp, std::move(args), out);
}

}  // namespace

TEST_CASE("whole directory: init --out refuses the user's files, a run and its checkpoints; --force a model only",
          "[reliability]") {
  TempDir tmp("init_out");
  std::string out;
  const fs::path mine = tmp.path / "mine";
  fs::create_directories(mine);
  write_bytes(mine / "notes.txt", "precious");
  // Before: the new model was swapped in, notes.txt deleted, exit 0.
  CHECK(cli(tmp, {"init", "--preset", "tiny-llama", "--out", mine.string()}, &out) == 1);
  require_all(out, {"--out " + mine.string(), "notes.txt", "--force"});
  CHECK(snapshot(mine) == std::map<std::string, std::string>{{"notes.txt", "precious"}});

  const fs::path model = tmp.path / "model";
  REQUIRE(cli(tmp, {"init", "--preset", "tiny-llama", "--seed", "1", "--out", model.string()}, &out) == 0);
  const auto first = snapshot(model);
  CHECK(cli(tmp, {"init", "--preset", "tiny-llama", "--seed", "2", "--out", model.string()}, &out) == 1);
  require_all(out, {"a model checkpoint", "--force"});
  CHECK(snapshot(model) == first);
  CHECK(cli(tmp, {"init", "--preset", "tiny-llama", "--seed", "2", "--out", model.string(), "--force"}, &out) == 0);
  CHECK(snapshot(model) != first);

  // A training run (even one training now: init takes no lock) and its checkpoints: never, --force or not.
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path run_dir = tmp.path / "run";
  REQUIRE(run(tiny_train_args(shard, run_dir.string(), 2, 2), &out, tmp.file("train.log")) == 0);
  const auto before = snapshot(run_dir);
  for (const fs::path& target : {run_dir, step_dir(run_dir, 2)}) {
    INFO(target);
    CHECK(cli(tmp, {"init", "--preset", "tiny-llama", "--out", target.string(), "--force"}, &out) == 1);
    require_all(out, {"never writes into a training run or its checkpoints"});
  }
  CHECK(snapshot(run_dir) == before);
}

TEST_CASE("whole directory: train --run-dir refuses a teacher's checkpoint and other files", "[reliability]") {
  TempDir tmp("run_dir_teacher");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 4);
  const fs::path teacher = tmp.path / "teacher";
  REQUIRE(cli(tmp, {"init", "--preset", "tiny-llama", "--out", teacher.string()}, &out) == 0);
  const auto before = snapshot(teacher);
  // Before: the run's config.json replaced the teacher's, exit 0; the teacher no longer loaded.
  CHECK(run(plus(tiny_train_args(shard, teacher.string(), 2, 2), {"--set", "kd.teacher=" + teacher.string()}), &out,
            tmp.file("t.log")) == 1);
  require_all(out, {"--run-dir " + teacher.string(), "a model checkpoint", "not a run directory"});
  CHECK(snapshot(teacher) == before);  // no config.json, no lock file, nothing

  const fs::path other = tmp.path / "papers";
  fs::create_directories(other);
  write_bytes(other / "draft.tex", "x");
  CHECK(run(tiny_train_args(shard, other.string(), 2, 2), &out, tmp.file("o.log")) == 1);
  require_all(out, {"--run-dir " + other.string(), "draft.tex"});
  CHECK(snapshot(other) == std::map<std::string, std::string>{{"draft.tex", "x"}});
  // A new, an empty and a run directory of its own are fine.
  fs::create_directories(tmp.path / "empty");
  CHECK(run(tiny_train_args(shard, (tmp.path / "empty").string(), 2, 2), &out, tmp.file("e.log")) == 0);
}

TEST_CASE("whole directory: a resume into another --run-dir holding a run is refused, not merged", "[reliability]") {
  TempDir tmp("branch");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 5);
  const fs::path a = tmp.path / "A", b = tmp.path / "B", c = tmp.path / "C";
  REQUIRE(run(tiny_train_args(shard, a.string(), 12, 2), &out, tmp.file("a.log")) == 0);
  REQUIRE(run(tiny_train_args(shard, b.string(), 4, 2), &out, tmp.file("b.log")) == 0);
  const auto before = snapshot(b);
  // Before: exit 0 and B's metrics held steps 1-4 of B, then 9-12 of A; checkpoints/ mixed both.
  CHECK(run({KDTRAIN_BINARY, "train", "--resume", step_dir(a, 8).string(), "--run-dir", b.string(), "--set",
             "train.steps=12"}, &out, tmp.file("r.log")) == 1);
  require_all(out, {"--run-dir " + b.string(), "already holds another run", "mix the two runs"});
  CHECK(snapshot(b) == before);
  // A new directory branches as before.
  REQUIRE(run({KDTRAIN_BINARY, "train", "--resume", step_dir(a, 8).string(), "--run-dir", c.string()}, &out,
              tmp.file("c.log")) == 0);
  std::vector<int64_t> steps;
  for (const auto& row : metrics_of(c)) steps.push_back(row["step"].get<int64_t>());
  CHECK(steps == std::vector<int64_t>{9, 10, 11, 12});
}

TEST_CASE("paths: a trailing slash names the same checkpoint for verify and --resume", "[reliability]") {
  FinishedRun r("slash", 4, 2);
  std::string out;
  const std::string slashed = step_dir(r.dir, 4).string() + "/";
  // Before: "step 4 does not match its checkpoint directory ''" from both, and a stray lock in checkpoints/.
  CHECK(cli(r.tmp, {"verify", slashed}, &out) == 0);
  CHECK(cli(r.tmp, {"verify", "./" + fs::relative(step_dir(r.dir, 4)).string() + "//"}, &out) == 0);
  CHECK(run({KDTRAIN_BINARY, "train", "--resume", slashed, "--set", "train.steps=6"}, &out, r.tmp.file("r.log")) == 0);
  CHECK(fs::exists(step_dir(r.dir, 6)));
  CHECK_FALSE(fs::exists(r.dir / "checkpoints" / "kdtrain.lock"));
}

TEST_CASE("verify: a checkpoint of a run without trainer_state.json fails, as --resume refuses it", "[reliability]") {
  FinishedRun r("verify_place", 4, 2);
  std::string out;
  fs::remove(step_dir(r.dir, 4) / "trainer_state.json");
  fs::remove(step_dir(r.dir, 4) / "checksums.json");
  CHECK(run({KDTRAIN_BINARY, "train", "--resume", r.dir.string()}, &out, r.tmp.file("r.log")) == 1);
  require_all(out, {"step_00000004", "trainer_state.json"});
  // Before: "ok ... model checkpoint, no checksums.json (not written by kdtrain)", exit 0.
  CHECK(cli(r.tmp, {"verify", r.dir.string()}, &out) == 1);
  require_all(out, {"FAIL  " + step_dir(r.dir, 4).string()});
  CHECK(cli(r.tmp, {"verify", step_dir(r.dir, 4).string()}, &out) == 1);
}

TEST_CASE("verify: checkpoints a live run prunes while verify reads them are not called corrupt", "[reliability]") {
  TempDir tmp("verify_live");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 8);
  const fs::path run_dir = tmp.path / "run";
  auto args = tiny_train_args(shard, run_dir.string(), 100000, 1);
  args = plus(args, {"--set", "checkpoint.keep=1"});
  const Process training = spawn(args, tmp.file("live.log"));
  REQUIRE(training.pid > 0);
  for (int i = 0; i < 6000 && !fs::exists(run_dir / "checkpoints" / "latest"); ++i) usleep(10000);
  REQUIRE(fs::exists(run_dir / "checkpoints" / "latest"));
  // Before: some of these reported a pruned checkpoint as a missing file, or `latest` as not verifying.
  int failures = 0;
  for (int i = 0; i < 40; ++i) {
    if (cli(tmp, {"verify", run_dir.string()}, &out) != 0) {
      ++failures;
      UNSCOPED_INFO(out);
    }
  }
  kill(training.pid, SIGKILL);
  wait_for(training);
  CHECK(failures == 0);
}

TEST_CASE("analyze: --out never writes into a checkpoint or a run", "[reliability]") {
  FinishedRun r("analyze_out", 2, 2);
  std::string out;
  const auto before = snapshot(r.dir);
  for (const fs::path& target : {step_dir(r.dir, 2), r.dir}) {
    INFO(target);
    // Before: analysis.json landed in the checkpoint; resume and verify then refused the run.
    CHECK(cli(r.tmp, {"analyze", "--checkpoint", r.dir.string(), "--data", r.shard, "--num-seqs", "1", "--out",
                        target.string(), "--force"}, &out) == 1);
    require_all(out, {"never writes into a training run or its checkpoints"});
  }
  CHECK(snapshot(r.dir) == before);
  CHECK(cli(r.tmp, {"verify", r.dir.string()}, &out) == 0);
  // Its own output is replaced without --force; other files need it.
  const fs::path dir = r.tmp.path / "analysis";
  for (int i = 0; i < 2; ++i)
    CHECK(cli(r.tmp, {"analyze", "--checkpoint", r.dir.string(), "--data", r.shard, "--num-seqs", "1", "--out",
                        dir.string()}, &out) == 0);
  write_bytes(dir / "notes.txt", "x");
  CHECK(cli(r.tmp, {"analyze", "--checkpoint", r.dir.string(), "--data", r.shard, "--num-seqs", "1", "--out",
                      dir.string()}, &out) == 1);
  require_all(out, {"notes.txt", "--force"});
}

TEST_CASE("data write: --out and --val-out are two files, neither of them the input", "[reliability]") {
  TempDir tmp("data_write_same");
  std::string out;
  write_bytes(tmp.path / "text.txt", "hello world, this is a small text to write as tokens");
  const std::string f = tmp.file("f.bin");
  // Before: "wrote f.bin ... (validation)", "wrote f.bin ... (training)", exit 0, the split lost.
  CHECK(cli(tmp, {"data", "write", "--bytes", tmp.file("text.txt"), "--out", f, "--val-out",
                      (tmp.path / "." / "f.bin").string()}, &out) == 1);
  require_all(out, {"name the same file"});
  CHECK_FALSE(fs::exists(f));
  CHECK(cli(tmp, {"data", "write", "--bytes", tmp.file("text.txt"), "--out", tmp.file("text.txt")}, &out) == 1);
  require_all(out, {"is the input file"});
  CHECK(read_bytes(tmp.path / "text.txt") == "hello world, this is a small text to write as tokens");
}
