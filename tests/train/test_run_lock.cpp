// One process per run directory. The red team ran
//   kdtrain train --config c.json --run-dir R & sleep 0.5;
//   kdtrain train --config c.json --run-dir R --set train.seed=999
// and both exited 0, R's metrics.jsonl ending up with the second run and a torn
// line. Now the second is refused naming the holder, the first finishes
// untouched, and the lock is gone as soon as its holder is (kill -9 included).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"
#include "train/run_lock.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Waits until the run has logged a step (so it holds the lock and is training).
bool wait_for_first_step(const fs::path& run_dir) {
  for (int i = 0; i < 6000; ++i) {
    if (fs::exists(run_dir / "metrics.jsonl") && !metrics_of(run_dir).empty()) return true;
    usleep(10000);
  }
  return false;
}

// Every line parses and steps run 1, 2, ... without gaps or repeats.
void require_one_clean_run(const fs::path& run_dir, size_t steps) {
  const std::string text = read_bytes(run_dir / "metrics.jsonl");
  size_t line_start = 0, step = 0;
  while (line_start < text.size()) {
    const size_t end = text.find('\n', line_start);
    REQUIRE(end != std::string::npos);  // no torn last line
    const auto row = nlohmann::json::parse(text.substr(line_start, end - line_start));
    REQUIRE(row["step"].get<size_t>() == ++step);
    line_start = end + 1;
  }
  REQUIRE(step == steps);
}

}  // namespace

TEST_CASE("run lock: a second train on a busy run directory is refused, naming the holder", "[reliability][lock]") {
  TempDir tmp("lock");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 1);
  const fs::path run_dir = tmp.path / "R";
  const auto first_args = tiny_train_args(shard, run_dir.string(), 24, 4);
  const Process first = spawn(first_args, (tmp.path / "first.log").string());
  REQUIRE(wait_for_first_step(run_dir));

  std::string out;
  SECTION("a fresh run with another seed") {
    CHECK(run(plus(tiny_train_args(shard, run_dir.string(), 24, 4), {"--set", "train.seed=999"}), &out,
              (tmp.path / "second.log").string()) == 1);
  }
  SECTION("a resume of the same run") {
    // Wait for a checkpoint so the resume gets as far as the lock.
    for (int i = 0; i < 6000 && !fs::exists(run_dir / "checkpoints" / "latest"); ++i) usleep(10000);
    CHECK(run({KDTRAIN_BINARY, "train", "--resume", run_dir.string()}, &out, (tmp.path / "second.log").string()) == 1);
  }
  INFO(out);
  require_all(out, {run_dir.string(), "in use", "pid " + std::to_string(first.pid), this_host()});
  REQUIRE(wait_for(first) == 0);
  require_one_clean_run(run_dir, 24);
}

TEST_CASE("run lock: released on any exit, kill -9 included", "[reliability][lock]") {
  TempDir tmp("lock_kill");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 2);
  const fs::path run_dir = tmp.path / "R";
  const Process first = spawn(tiny_train_args(shard, run_dir.string(), 16, 2), (tmp.path / "first.log").string());
  REQUIRE(wait_for_first_step(run_dir));
  for (int i = 0; i < 6000 && !fs::exists(run_dir / "checkpoints" / "latest"); ++i) usleep(10000);
  kill(first.pid, SIGKILL);
  wait_for(first);
  std::string out;
  const int code = run({KDTRAIN_BINARY, "train", "--resume", run_dir.string()}, &out, (tmp.path / "resume.log").string());
  INFO(out);
  CHECK(code == 0);
  require_one_clean_run(run_dir, 16);
  // In-process: the lock is exclusive while held and free once released.
  {
    RunLock held(run_dir.string());
    require_all(error_message([&] { RunLock again(run_dir.string()); }),
                {"in use", "pid " + std::to_string(getpid())});
  }
  RunLock after(run_dir.string());
}

TEST_CASE("run lock: under MPI rank 0 holds it for the job", "[reliability][lock][dist]") {
  std::string mpirun;
  for (const char* dir : {"/usr/bin", "/usr/local/bin"})
    if (fs::exists(fs::path(dir) / "mpirun")) mpirun = (fs::path(dir) / "mpirun").string();
  if (mpirun.empty()) {
    WARN("SKIPPED: mpirun not found");
    return;
  }
  TempDir tmp("lock_mpi");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path run_dir = tmp.path / "R";
  const fs::path debug = tmp.path / "debug";
  setenv("KDTRAIN_DIST_DEBUG", debug.c_str(), 1);
  std::vector<std::string> args = {mpirun, "--oversubscribe", "--allow-run-as-root", "--mca",
                                   "mpi_yield_when_idle", "1", "-np", "2"};
  for (const std::string& a : plus(tiny_train_args(shard, run_dir.string(), 40, 10), {"--set", "train.threads=1"}))
    args.push_back(a);
  const Process job = spawn(args, (tmp.path / "job.log").string());
  unsetenv("KDTRAIN_DIST_DEBUG");
  REQUIRE(wait_for_first_step(run_dir));
  const std::string rank0_pid = read_bytes(debug / "rank0.pid");
  std::string out;
  CHECK(run(tiny_train_args(shard, run_dir.string(), 40, 10), &out, (tmp.path / "second.log").string()) == 1);
  require_all(out, {"in use", "pid " + rank0_pid.substr(0, rank0_pid.find('\n'))});
  REQUIRE(wait_for(job) == 0);
  require_one_clean_run(run_dir, 40);
}
