// Data parallelism (issues 6 and 18) end to end: the kdtrain binary under
// `mpirun --oversubscribe -np 1/2/3/4` against a single process with the same
// global batch: losses and weights within 1e-5, bit-exact with the gradient
// buckets reduced during the backward or after it (and so between two runs),
// alpha_ma and weights identical on every rank, every window read exactly once
// per epoch (token = window fixture), resume across world sizes (4 -> 2 and
// 2 -> 4), and a rank that dies or hangs mid-bucket ending the job within
// dist.timeout_s without moving `latest`. Per-rank records and faults come from
// kdtrain_probe (tests/e2e/probe/). The tests skip with a visible message where
// mpirun is absent. The unit level is in test_dist.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "data/shard.h"
#include "support/dist_test_util.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "dist/mpi_communicator.h"
#include "io/safetensors.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace fs = std::filesystem;

namespace {

constexpr int64_t kSeq = 32;
constexpr int64_t kWindows = 96;  // one epoch = 8 steps of 12 windows

// Token at position p is the index of the window it starts (p / seq_len), so the
// first input token of every sequence names the window a rank actually read.
// Some noise on the other positions gives the model something to learn.
std::string window_shard(const fs::path& dir) {
  std::vector<uint32_t> tokens(kWindows * kSeq + 1);
  for (size_t p = 0; p < tokens.size(); ++p)
    tokens[p] = p % kSeq == 0 ? static_cast<uint32_t>((p / kSeq) % 256)
                              : static_cast<uint32_t>('a' + (p * 7 + p / 3) % 26);
  const std::string path = (dir / "train.bin").string();
  data::write_shard(path, tokens, 1);
  return path;
}

std::vector<std::string> train_args(const std::string& shard, const fs::path& run_dir, int64_t steps,
                                    const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {
      KDTRAIN_BINARY, "train", "--preset", "tiny-llama", "--attention", "affine",
      "--set", "data.train=" + shard, "--set", "train.seq_len=32",
      "--set", "train.global_batch=12", "--set", "train.micro_batch=1",
      "--set", "train.steps=" + std::to_string(steps), "--set", "schedule.warmup=2",
      "--set", "checkpoint.keep=10", "--set", "log.interval=1",
      "--set", "optimizer.lr=3e-3", "--set", "train.threads=1",
      "--run-dir", run_dir.string()};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The same run under kdtrain_probe (tests/e2e/probe/): the trainer with a test
// observer, e.g. {"--record", dir} for per-rank step records.
std::vector<std::string> with_probe(std::vector<std::string> args, const std::vector<std::string>& probe) {
  args[0] = KDTRAIN_PROBE;
  args.insert(args.begin() + 1, probe.begin(), probe.end());
  return args;
}

fs::path final_checkpoint(const fs::path& run_dir) {
  std::string name = read_file((run_dir / "checkpoints" / "latest").string());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return run_dir / "checkpoints" / name;
}

// The bytes of the model weights in a run's latest checkpoint.
std::string final_weights(const fs::path& run_dir) {
  return read_file((final_checkpoint(run_dir) / "model.safetensors").string());
}

// Two runs that agree bit for bit: as many records, each of `keys` equal in every
// record, and the same final weights.
void check_same_run(const fs::path& a, const fs::path& b, const std::vector<const char*>& keys) {
  const auto x = read_jsonl(a / "metrics.jsonl"), y = read_jsonl(b / "metrics.jsonl");
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i)
    for (const char* key : keys) CHECK(x[i][key] == y[i][key]);
  CHECK(final_weights(a) == final_weights(b));
}

std::map<std::string, std::vector<float>> read_model(const fs::path& checkpoint) {
  const io::SafetensorsFile file((checkpoint / "model.safetensors").string());
  std::map<std::string, std::vector<float>> tensors;
  for (const std::string& name : file.names()) tensors[name] = file.read_f32(name);
  return tensors;
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-6); }

// Per-step metrics within `tol` relative (rows of `b` from `first_row` on).
void require_close_metrics(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                           double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("row " << i);
    REQUIRE(a[i]["step"] == b[i]["step"]);
    for (const char* key : {"loss", "ce", "grad_norm", "lr"}) {
      INFO(key << ": " << a[i][key] << " vs " << b[i][key]);
      CHECK(rel_diff(a[i][key].get<double>(), b[i][key].get<double>()) <= tol);
    }
    const auto& ma = a[i]["alpha_ma"];
    const auto& mb = b[i]["alpha_ma"];
    REQUIRE(ma.size() == mb.size());
    for (size_t l = 0; l < ma.size(); ++l)
      for (size_t h = 0; h < ma[l].size(); ++h)
        CHECK(rel_diff(ma[l][h].get<double>(), mb[l][h].get<double>()) <= tol);
  }
}

// Weights equal within tol relative to the tensor's largest magnitude
// (elementwise relative error is meaningless for values near zero).
void require_close_weights(const fs::path& a, const fs::path& b, double tol) {
  const auto wa = read_model(a), wb = read_model(b);
  REQUIRE(wa.size() == wb.size());
  for (const auto& [name, va] : wa) {
    INFO(name);
    const std::vector<float>& vb = wb.at(name);
    REQUIRE(va.size() == vb.size());
    double scale = 1e-6, worst = 0.0;
    for (float x : vb) scale = std::max(scale, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(double(va[i]) - vb[i]));
    CHECK(worst / scale <= tol);
  }
}

}  // namespace

TEST_CASE("dist: 2, 3 and 4 ranks match one process; overlap on and off give the same bits; ranks agree",
          "[dist][mpi][overlap]") {
  REQUIRE_MPIRUN();
  TempDir tmp("match");
  const std::string shard = window_shard(tmp.path);
  std::string out;
  const fs::path single = tmp.path / "single";
  REQUIRE(run_logged(train_args(shard, single, 6), tmp.path / "single.log", &out) == 0);
  const auto reference = read_jsonl(single / "metrics.jsonl");
  REQUIRE(reference.size() == 6);

  for (int ranks : {2, 3, 4}) {
    SECTION("ZeRO-1 over " + std::to_string(ranks) + " ranks") {
      // 0.01 MiB buckets: 43 of the tiny model's 109,376 gradients, most inside
      // one rank's shard, some across a shard boundary.
      const std::vector<std::string> buckets = {"--set", "dist.bucket_mb=0.01"};
      const fs::path run = tmp.path / ("zero1_" + std::to_string(ranks));
      const fs::path debug = tmp.path / ("debug_" + std::to_string(ranks));
      const int code = run_logged(
          under_mpi(ranks, with_probe(train_args(shard, run, 6, buckets), {"--record", debug.string()})),
          tmp.path / "a.log", &out);
      INFO(out);
      REQUIRE(code == 0);
      CHECK(out.find("ZeRO-1") != std::string::npos);
      CHECK(out.find("gradient reduction: 43 buckets of up to 0.01 MiB, overlapped with the backward") !=
            std::string::npos);
      require_close_metrics(read_jsonl(run / "metrics.jsonl"), reference, 1e-5);
      require_close_weights(final_checkpoint(run), final_checkpoint(single), 1e-5);
      for (int r = 0; r < ranks; ++r)
        CHECK(fs::exists(final_checkpoint(run) / ("optimizer.rank" + std::to_string(r) + "-of-" +
                                                  std::to_string(ranks) + ".safetensors")));

      // Every rank holds the same alpha_ma and the same weights after every step.
      std::vector<std::vector<nlohmann::json>> logs;
      for (int r = 0; r < ranks; ++r) logs.push_back(read_jsonl(debug / ("rank" + std::to_string(r) + ".jsonl")));
      for (int r = 0; r < ranks; ++r) {
        REQUIRE(logs[r].size() == 6);
        for (size_t i = 0; i < 6; ++i) {
          CHECK(logs[r][i]["alpha_ma"] == logs[0][i]["alpha_ma"]);
          CHECK(logs[r][i]["weights_fnv"] == logs[0][i]["weights_fnv"]);
        }
      }

      // A second run, with the buckets launched after the backward instead of
      // during it, reproduces every bit (so two runs agree, overlap or not).
      const fs::path again = tmp.path / ("again_" + std::to_string(ranks));
      auto no_overlap = buckets;
      no_overlap.insert(no_overlap.end(), {"--set", "dist.overlap=false"});
      REQUIRE(run_logged(under_mpi(ranks, train_args(shard, again, 6, no_overlap)), tmp.path / "b.log", &out) == 0);
      CHECK(out.find("after the backward") != std::string::npos);
      check_same_run(run, again, {"loss", "kd", "ce", "grad_norm", "alpha_ma", "alpha_mean"});
    }
  }

  SECTION("plain all-reduce mode (dist.zero1=false) over 2 ranks") {
    const fs::path run = tmp.path / "allreduce";
    const int code = run_logged(under_mpi(2, train_args(shard, run, 6, {"--set", "dist.zero1=false"})),
                                tmp.path / "c.log", &out);
    INFO(out);
    REQUIRE(code == 0);
    CHECK(out.find("all-reduce") != std::string::npos);
    require_close_metrics(read_jsonl(run / "metrics.jsonl"), reference, 1e-5);
    require_close_weights(final_checkpoint(run), final_checkpoint(single), 1e-5);
  }
}

TEST_CASE("dist: every window is read exactly once per epoch across ranks", "[dist][mpi]") {
  REQUIRE_MPIRUN();
  TempDir tmp("windows");
  const std::string shard = window_shard(tmp.path);
  const int ranks = 3;
  const int64_t steps = 2 * kWindows / 12;  // two epochs
  const fs::path debug = tmp.path / "debug";
  std::string out;
  const int code = run_logged(under_mpi(ranks, with_probe(train_args(shard, tmp.path / "run", steps),
                                                          {"--record", debug.string()})),
                              tmp.path / "run.log", &out);
  INFO(out);
  REQUIRE(code == 0);
  std::vector<std::vector<nlohmann::json>> logs;
  for (int r = 0; r < ranks; ++r) {
    logs.push_back(read_jsonl(debug / ("rank" + std::to_string(r) + ".jsonl")));
    REQUIRE(static_cast<int64_t>(logs[r].size()) == steps);
  }
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int64_t step = epoch * 8; step < (epoch + 1) * 8; ++step) {
      std::set<int64_t> this_step;
      for (int r = 0; r < ranks; ++r) {
        const auto& rec = logs[r][step];
        const auto windows = rec["windows"].get<std::vector<int64_t>>();
        const auto tokens = rec["first_tokens"].get<std::vector<int64_t>>();
        CHECK(windows.size() == 4);  // 12 / 3 ranks
        REQUIRE(tokens.size() == windows.size());
        for (size_t i = 0; i < windows.size(); ++i) {
          CHECK(tokens[i] == windows[i] % 256);  // the rank read the window it claims
          seen.insert(tokens[i]);
          this_step.insert(windows[i]);
        }
      }
      CHECK(this_step.size() == 12);  // disjoint slices of one global batch
    }
    INFO("epoch " << epoch);
    REQUIRE(seen.size() == static_cast<size_t>(kWindows));
    for (int64_t w = 0; w < kWindows; ++w) CHECK(seen.count(w) == 1);
  }
}

TEST_CASE("dist: resume re-shards the optimizer between 4 and 2 ranks, with overlap", "[dist][mpi][resume][overlap]") {
  REQUIRE_MPIRUN();
  TempDir tmp("reshard");
  const std::string shard = window_shard(tmp.path);
  std::string out;
  // Overlapped reduction in small buckets on both sides of the resume.
  const std::vector<std::string> ckpt = {"--set", "checkpoint.interval=3", "--set", "dist.bucket_mb=0.01"};
  for (auto [from, to] : {std::pair<int, int>{4, 2}, std::pair<int, int>{2, 4}}) {
    const std::string tag = std::to_string(from) + "to" + std::to_string(to);
    const fs::path full = tmp.path / ("full" + tag);
    int code = run_logged(under_mpi(from, train_args(shard, full, 6, ckpt)), tmp.path / "full.log", &out);
    INFO(out);
    REQUIRE(code == 0);
    const fs::path step3 = full / "checkpoints" / "step_00000003";
    REQUIRE(fs::exists(step3 / ("optimizer.rank0-of-" + std::to_string(from) + ".safetensors")));
    const fs::path resumed = tmp.path / ("resumed" + tag);
    auto args = train_args(shard, resumed, 6, ckpt);
    args.insert(args.end(), {"--resume", step3.string()});
    code = run_logged(under_mpi(to, args), tmp.path / "resume.log", &out);
    INFO(out);
    REQUIRE(code == 0);
    CHECK(out.find("written by " + std::to_string(from) + " rank(s), now " + std::to_string(to)) !=
          std::string::npos);
    auto expected = read_jsonl(full / "metrics.jsonl");
    expected.erase(expected.begin(), expected.begin() + 3);
    require_close_metrics(read_jsonl(resumed / "metrics.jsonl"), expected, 1e-5);
    require_close_weights(final_checkpoint(resumed), final_checkpoint(full), 1e-5);
  }
  // A 2-rank checkpoint also resumes in one process (no launcher).
  const fs::path single = tmp.path / "single";
  auto args = train_args(shard, single, 6, ckpt);
  args.insert(args.end(), {"--resume", (tmp.path / "full2to4" / "checkpoints" / "step_00000003").string()});
  REQUIRE(run_logged(args, tmp.path / "single.log", &out) == 0);
  auto expected = read_jsonl(tmp.path / "full2to4" / "metrics.jsonl");
  expected.erase(expected.begin(), expected.begin() + 3);
  require_close_metrics(read_jsonl(single / "metrics.jsonl"), expected, 1e-5);
}

TEST_CASE("dist: one rank under mpirun, overlap on or off, is bit-exact with no launcher", "[dist][mpi][overlap]") {
  REQUIRE_MPIRUN();
  TempDir tmp("one");
  const std::string shard = window_shard(tmp.path);
  std::string out;
  REQUIRE(run_logged(train_args(shard, tmp.path / "plain", 4), tmp.path / "plain.log", &out) == 0);
  for (bool overlap : {true, false}) {
    const fs::path run = tmp.path / (overlap ? "mpi" : "mpi_after");
    REQUIRE(run_logged(under_mpi(1, train_args(shard, run, 4,
                                               {"--set", "dist.bucket_mb=0.01", "--set",
                                                std::string("dist.overlap=") + (overlap ? "true" : "false")})),
                       tmp.path / "mpi.log", &out) == 0);
    INFO(out);
    CHECK(out.find("1 rank(s) over mpi") != std::string::npos);
    check_same_run(tmp.path / "plain", run, {"loss", "ce", "grad_norm", "alpha_ma"});
  }
}

TEST_CASE("dist: SIGTERM to one rank stops every rank at the same step, resume is bit-exact",
          "[dist][mpi][resume]") {
  REQUIRE_MPIRUN();
  TempDir tmp("sigterm");
  const std::string shard = window_shard(tmp.path);
  const int64_t steps = 150;
  const std::vector<std::string> quiet = {"--set", "log.interval=1000"};
  std::string out;
  const fs::path full = tmp.path / "full";
  REQUIRE(run_logged(under_mpi(3, train_args(shard, full, steps, quiet)), tmp.path / "full.log", &out) == 0);

  const fs::path run = tmp.path / "run", debug = tmp.path / "debug";
  const Process job = spawn(under_mpi(3, with_probe(train_args(shard, run, steps, quiet), {"--record", debug.string()})),
                            (tmp.path / "job.log").string());
  REQUIRE(job.pid > 0);
  const auto start = std::chrono::steady_clock::now();
  while (read_jsonl(debug / "rank1.jsonl").size() < 2 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(kill(std::stoi(read_file((debug / "rank1.pid").string())), SIGTERM) == 0);
  const int code = wait_for(job, 60.0);
  out = read_file((tmp.path / "job.log").string());
  INFO(out);
  REQUIRE(code == 0);
  const auto stopped = read_jsonl(run / "metrics.jsonl");
  REQUIRE(stopped.size() < static_cast<size_t>(steps));
  CHECK(out.find("another rank received a stop signal") != std::string::npos);
  for (int r = 0; r < 3; ++r)  // every rank stopped after the same step
    CHECK(read_jsonl(debug / ("rank" + std::to_string(r) + ".jsonl")).size() == stopped.size());

  auto args = under_mpi(3, train_args(shard, run, steps, quiet));
  args.insert(args.end(), {"--resume", run.string()});
  REQUIRE(run_logged(args, tmp.path / "resume.log", &out) == 0);
  check_same_run(run, full, {"loss", "ce", "grad_norm", "alpha_ma"});
}

TEST_CASE("dist: a NaN gradient on one rank is skipped or stops on every rank alike",
          "[dist][mpi][nonfinite]") {
  REQUIRE_MPIRUN();
  TempDir tmp("nan");
  const std::string shard = window_shard(tmp.path);
  std::string out;
  const std::vector<std::string> nan = {"--nan-at", "2:3"};  // rank 2's gradients at step 3
  SECTION("skip") {
    const fs::path debug = tmp.path / "debug";
    std::vector<std::string> probe = nan;
    probe.insert(probe.end(), {"--record", debug.string()});
    const int code = run_logged(under_mpi(3, with_probe(train_args(shard, tmp.path / "skip", 5,
                                                                   {"--set", "train.on_nonfinite=skip"}),
                                                        probe)),
                                tmp.path / "skip.log", &out);
    INFO(out);
    REQUIRE(code == 0);
    const auto rows = read_jsonl(tmp.path / "skip" / "metrics.jsonl");
    REQUIRE(rows.size() == 5);
    CHECK_FALSE(rows[2]["applied"].get<bool>());
    CHECK(rows.back()["skipped_steps"] == 1);
    for (int r = 0; r < 3; ++r) {
      const auto log = read_jsonl(debug / ("rank" + std::to_string(r) + ".jsonl"));
      REQUIRE(log.size() == 5);
      CHECK_FALSE(log[2]["applied"].get<bool>());
      CHECK(log[2]["weights_fnv"] == log[1]["weights_fnv"]);  // the step left the weights alone
      CHECK(log[4]["weights_fnv"] == read_jsonl(debug / "rank0.jsonl")[4]["weights_fnv"]);
    }
  }
  SECTION("stop") {
    const int code = run_logged(under_mpi(3, with_probe(train_args(shard, tmp.path / "stop", 5), nan)),
                                tmp.path / "stop.log", &out);
    INFO(out);
    CHECK(code != 0);
    CHECK(out.find("non-finite gradient norm") != std::string::npos);
  }
}

TEST_CASE("dist: batch not divisible by micro-batch x ranks is refused at start", "[dist][mpi]") {
  REQUIRE_MPIRUN();
  TempDir tmp("divisible");
  const std::string shard = window_shard(tmp.path);
  std::string out;
  auto args = train_args(shard, tmp.path / "run", 2, {"--set", "train.global_batch=10"});
  const int code = run_logged(under_mpi(4, args), tmp.path / "run.log", &out);
  INFO(out);
  CHECK(code != 0);
  CHECK(out.find("train.global_batch (10) must be a multiple of train.micro_batch (1) x world size (4)") !=
        std::string::npos);
  CHECK(out.find("kdtrain: rank ") != std::string::npos);  // errors name their rank
  CHECK_FALSE(fs::exists(tmp.path / "run" / "metrics.jsonl"));
}

TEST_CASE("dist: a rank that dies or hangs mid-bucket ends the job within dist.timeout_s; latest stays",
          "[dist][mpi][fault][overlap]") {
  REQUIRE_MPIRUN();
  TempDir tmp("fault");
  const std::string shard = window_shard(tmp.path);
  // Rank 1 raises the signal at step 3 when its 6th bucket is ready: buckets
  // 0-4 are in flight on every rank. Checkpoints every 2 steps: step 2's is the last.
  for (const char* how : {"--kill-at", "--stop-at"}) {
    INFO(how);
    const fs::path debug = tmp.path / (std::string("debug") + how);
    const fs::path run = tmp.path / (std::string("run") + how);
    const Process job = spawn(
        under_mpi(3, with_probe(train_args(shard, run, 8,
                                           {"--set", "dist.timeout_s=3", "--set", "checkpoint.interval=2",
                                            "--set", "dist.bucket_mb=0.01"}),
                                {how, "1:3:5", "--record", debug.string()})),
        (tmp.path / "job.log").string());
    REQUIRE(job.pid > 0);
    // From the end of step 2 on rank 1: step 3 then fails within the timeout.
    const fs::path log1 = debug / "rank1.jsonl";
    const auto start = std::chrono::steady_clock::now();
    while (read_jsonl(log1).size() < 2 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(read_jsonl(log1).size() == 2);
    const auto step2_at = std::chrono::steady_clock::now();
    const int code = wait_for(job, 30.0);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step2_at).count();
    const std::string out = read_file((tmp.path / "job.log").string());
    INFO(out);
    CHECK(code != 0);
    CHECK(code != -1);            // exited by itself, not by our 30 s limit
    CHECK(seconds < 3.0 + 10.0);  // one step, the timeout and the launcher's tear-down
    CHECK(out.find("raises signal") != std::string::npos);
    if (std::string(how) == "--stop-at") {
      CHECK(out.find("collective 'reduce_scatter (gradient buckets)' did not complete within dist.timeout_s") !=
            std::string::npos);
      kill(std::stoi(read_file((debug / "rank1.pid").string())), SIGKILL);  // in case it was left stopped
    }
    // No rank moved `latest` past the last complete checkpoint.
    CHECK(final_checkpoint(run).filename() == "step_00000002");
    CHECK_FALSE(fs::exists(run / "checkpoints" / "step_00000004"));
    for (int r = 0; r < 3; ++r) CHECK(read_jsonl(debug / ("rank" + std::to_string(r) + ".jsonl")).size() == 2);
  }
}

