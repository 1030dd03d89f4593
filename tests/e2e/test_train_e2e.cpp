// End-to-end training runs through the kdtrain binary: loss falls on real text,
// resume is bit-exact (from several checkpoints, from a resumed run, after
// SIGTERM and after kill -9 at random moments, including mid-checkpoint),
// bad shards stop the run before step 0, and non-finite steps never reach the weights.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/shard.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

std::vector<std::string> base_args(const std::string& train, const std::string& run_dir) {
  return {KDTRAIN_BINARY, "train", "--preset", "tiny-llama", "--attention", "affine",
          "--set", "data.train=" + train, "--set", "train.seq_len=32",
          "--set", "train.global_batch=4", "--set", "train.micro_batch=2",
          "--set", "train.steps=12", "--set", "schedule.warmup=3",
          "--set", "schedule.decay_fraction=0.5", "--set", "checkpoint.interval=3",
          "--set", "checkpoint.keep=10", "--set", "log.interval=1",
          "--run-dir", run_dir};
}

// Everything a resumed run must reproduce bit for bit (timings excluded).
void require_same_trajectory(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("row " << i);
    for (const char* key : {"step", "lr", "loss", "kd", "ce", "grad_norm", "alpha_ma", "alpha_mean"})
      REQUIRE(a[i][key] == b[i][key]);
  }
}

}  // namespace

TEST_CASE("train e2e: loss falls on real text (FineWeb-Edu sample)", "[train][e2e]") {
  const fs::path sample = fs::path(KDTRAIN_SOURCE_DIR) / ".." / "shared" / "data" / "text" /
                          "fineweb_edu_sample10BT.rows000-099.csv";
  if (!fs::exists(sample)) {
    WARN("SKIPPED: ../shared/data is absent");
    return;
  }
  TempDir tmp("realtext");
  // The CSV's bytes are real English prose (with some CSV quoting); bytes are the tokens.
  std::ifstream in(sample, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint32_t> tokens(text.begin(), text.end());
  for (auto& t : tokens) t &= 0xFF;
  const std::string shard = (tmp.path / "text.bin").string();
  data::write_shard(shard, tokens, 1);
  std::string out;
  const fs::path run_dir = tmp.path / "run";
  auto args = base_args(shard, run_dir.string());
  args = plus(args, {"--set", "train.steps=40", "--set", "optimizer.lr=3e-3", "--set", "checkpoint.interval=0"});
  REQUIRE(run(args, &out, (tmp.path / "log.txt").string()) == 0);
  const auto rows = metrics_of(run_dir);
  REQUIRE(rows.size() == 40);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += rows[i]["ce"].get<double>() / 5;
  for (int i = 35; i < 40; ++i) last += rows[i]["ce"].get<double>() / 5;
  INFO(out);
  CHECK(first > 5.0);        // ~ln(256) = 5.55 at initialisation
  CHECK(last < first - 1.0);  // learns byte statistics of English within 40 steps
}

TEST_CASE("train e2e: resume from several checkpoints, and from a resumed run, is bit-exact", "[train][e2e][resume]") {
  TempDir tmp("resume");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path full = tmp.path / "full";
  std::string out;
  REQUIRE(run(base_args(shard, full.string()), &out, (tmp.path / "full.log").string()) == 0);
  const auto reference = metrics_of(full);
  REQUIRE(reference.size() == 12);
  {
    // The log says which attention implementation ran and the peak memory.
    INFO(out);
    CHECK(out.find("attention B=2 T=32 H=4 Hkv=2 D=16 affine: forward cpu-reference, "
                   "backward cpu-reference") != std::string::npos);
    CHECK(out.find("memory: peak backend memory") != std::string::npos);
    for (const auto& row : reference) CHECK(row["peak_memory_bytes"].get<int64_t>() > 0);
  }

  for (int from : {3, 6, 9}) {
    DYNAMIC_SECTION("resume from step " << from) {
      const fs::path copy = tmp.path / ("copy" + std::to_string(from));
      fs::remove_all(copy);
      fs::copy(full, copy, fs::copy_options::recursive);
      char name[32];
      std::snprintf(name, sizeof name, "step_%08d", from);
      const std::string ckpt = (copy / "checkpoints" / name).string();
      // The copy's latest is step 12: resuming an older checkpoint in place rewinds the run.
      REQUIRE(run({KDTRAIN_BINARY, "train", "--resume", ckpt, "--rewind"}, &out, (tmp.path / "r.log").string()) == 0);
      INFO(out);
      require_same_trajectory(metrics_of(copy), reference);
      // Resume the resumed run once more, from a checkpoint that run wrote.
      const std::string again = (copy / "checkpoints" / "step_00000009").string();
      REQUIRE(run({KDTRAIN_BINARY, "train", "--resume", again, "--rewind"}, &out, (tmp.path / "r2.log").string()) == 0);
      require_same_trajectory(metrics_of(copy), reference);
    }
  }
}

TEST_CASE("train e2e: SIGTERM checkpoints and exits 0; resume continues bit-exactly", "[train][e2e][resume]") {
  TempDir tmp("sigterm");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 4);
  std::string out;
  REQUIRE(run(base_args(shard, (tmp.path / "full").string()), &out, (tmp.path / "full.log").string()) == 0);
  const auto reference = metrics_of(tmp.path / "full");

  const fs::path run_dir = tmp.path / "stopped";
  auto args = plus(base_args(shard, run_dir.string()), {"--set", "checkpoint.interval=100"});
  const Process p = spawn(args, (tmp.path / "stopped.log").string());
  // Wait for some steps to be logged, then ask it to stop.
  for (int i = 0; i < 2000 && metrics_of(run_dir).size() < 4; ++i) usleep(5000);
  kill(p.pid, SIGTERM);
  REQUIRE(wait_for(p) == 0);
  const size_t done = metrics_of(run_dir).size();
  INFO("stopped after " << done << " steps");
  REQUIRE(fs::exists(run_dir / "checkpoints" / "latest"));
  if (done < 12) {
    REQUIRE(run({KDTRAIN_BINARY, "train", "--resume", run_dir.string()}, &out, (tmp.path / "r.log").string()) == 0);
  }
  require_same_trajectory(metrics_of(run_dir), reference);
}

TEST_CASE("train e2e: kill -9 at random moments, even mid-checkpoint, never breaks resume", "[train][e2e][resume]") {
  TempDir tmp("kill9");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 5);
  std::string out;
  // A checkpoint every step: most of the time is spent writing checkpoints.
  auto args = plus(base_args(shard, (tmp.path / "full").string()), {"--set", "checkpoint.interval=1", "--set", "checkpoint.keep=2"});
  REQUIRE(run(args, &out, (tmp.path / "full.log").string()) == 0);
  const auto reference = metrics_of(tmp.path / "full");

  const fs::path run_dir = tmp.path / "killed";
  auto killed_args = plus(base_args(shard, run_dir.string()), {"--set", "checkpoint.interval=1", "--set", "checkpoint.keep=2"});
  SplitMix64 rng(99);
  bool started = false;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<std::string> a = started ? std::vector<std::string>{KDTRAIN_BINARY, "train", "--resume", run_dir.string()}
                                         : killed_args;
    const Process p = spawn(a, (tmp.path / "k.log").string());
    usleep(static_cast<useconds_t>(100000 + rng.next() % 400000));
    kill(p.pid, SIGKILL);
    wait_for(p);
    started = started || fs::exists(run_dir / "checkpoints" / "latest");
    if (!started) fs::remove_all(run_dir);  // killed before its first checkpoint: start over
  }
  // Whatever state the kills left, the run resumes and ends as the uninterrupted one.
  const auto final_args = started ? std::vector<std::string>{KDTRAIN_BINARY, "train", "--resume", run_dir.string()}
                                  : killed_args;
  const int final_code = run(final_args, &out, (tmp.path / "final.log").string());
  INFO(out);
  REQUIRE(final_code == 0);
  require_same_trajectory(metrics_of(run_dir), reference);
}

TEST_CASE("train e2e: bad shards stop the run before step 0, naming the file", "[train][e2e][data]") {
  TempDir tmp("badshards");
  const std::string good = text_shard(tmp.path, "good.bin", 5000, 6);
  auto write_raw = [&](const std::string& name, const std::vector<int32_t>& header, size_t payload) {
    const std::string path = (tmp.path / name).string();
    std::ofstream f(path, std::ios::binary);
    std::vector<int32_t> h(256, 0);
    std::copy(header.begin(), header.end(), h.begin());
    f.write(reinterpret_cast<const char*>(h.data()), 1024);
    std::vector<char> zeros(payload, 0);
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    return path;
  };
  struct Case { std::string path, reason; };
  std::vector<Case> cases = {
      {write_raw("bad_magic.bin", {12345, 1, 100}, 200), "magic"},
      {write_raw("bad_version.bin", {20240520, 3, 100}, 200), "version"},
      {write_raw("truncated.bin", {20240520, 1, 100}, 150), "size"},
      {write_raw("trailing.bin", {20240801, 7, 10}, 48), "size"},
      {write_raw("short_header.bin", {}, 0), "header"},
  };
  {  // a token id beyond the 256-token vocabulary of tiny-llama
    std::vector<uint32_t> t(5000, 65);
    t[4321] = 300;
    const std::string path = (tmp.path / "big_id.bin").string();
    data::write_shard(path, t, 1);
    cases.push_back({path, "4321"});
  }
  cases.push_back({text_shard(tmp.path, "tiny.bin", 20, 7), "window"});
  fs::resize_file(tmp.path / "short_header.bin", 100);
  for (const Case& c : cases) {
    DYNAMIC_SECTION(fs::path(c.path).filename().string()) {
      const fs::path run_dir = tmp.path / "run";
      fs::remove_all(run_dir);
      std::string out;
      const int code = run(base_args(c.path, run_dir.string()), &out, (tmp.path / "log.txt").string());
      INFO(out);
      CHECK(code != 0);
      CHECK(out.find(fs::path(c.path).filename().string()) != std::string::npos);
      CHECK(out.find(c.reason) != std::string::npos);
      CHECK_FALSE(fs::exists(run_dir / "metrics.jsonl"));
      CHECK_FALSE(fs::exists(run_dir / "checkpoints"));
    }
  }
  (void)good;
}

TEST_CASE("train e2e: a non-finite step never reaches the weights", "[train][e2e][nonfinite]") {
  TempDir tmp("nonfinite");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 8);
  // The first update makes the weights overflow, so the next step's loss is not finite.
  const std::vector<std::string> diverge = plus(diverging_run(), {"--set", "checkpoint.interval=1"});
  SECTION("stop (default): non-zero exit, clear message, last checkpoint intact") {
    const fs::path run_dir = tmp.path / "stop";
    std::string out;
    const int code = run(plus(base_args(shard, run_dir.string()), diverge), &out, (tmp.path / "stop.log").string());
    INFO(out);
    CHECK(code != 0);
    CHECK(out.find("non-finite") != std::string::npos);
    CHECK(out.find("not applied") != std::string::npos);
    const auto rows = metrics_of(run_dir);
    REQUIRE(fs::exists(run_dir / "checkpoints" / "latest"));
    // The checkpoint resumes (its weights are the last applied ones) and fails the same way.
    std::string out2;
    CHECK(run({KDTRAIN_BINARY, "train", "--resume", run_dir.string()}, &out2, (tmp.path / "stop2.log").string()) != 0);
    CHECK(out2.find("non-finite") != std::string::npos);
  }
  SECTION("skip: the run completes and counts skipped steps") {
    const fs::path run_dir = tmp.path / "skip";
    std::string out;
    const int code = run(plus(plus(base_args(shard, run_dir.string()), diverge), {"--set", "train.on_nonfinite=skip", "--set", "train.max_consecutive_skips=100"}),
                         &out, (tmp.path / "skip.log").string());
    INFO(out);
    REQUIRE(code == 0);
    const auto rows = metrics_of(run_dir);
    REQUIRE(rows.size() == 12);
    CHECK(rows.back()["skipped_steps"].get<int64_t>() > 0);
    bool saw_unapplied = false;
    for (const auto& r : rows) saw_unapplied |= !r["applied"].get<bool>();
    CHECK(saw_unapplied);
  }
}

TEST_CASE("train e2e: a teacher with another vocabulary is refused before step 0", "[train][e2e][kd]") {
  TempDir tmp("vocab");
  const std::string shard = text_shard(tmp.path, "train.bin", 5000, 9);
  const std::string teacher = (tmp.path / "teacher").string();
  std::string out;
  REQUIRE(run({KDTRAIN_BINARY, "init", "--preset", "tiny-qwen", "--set", "model.vocab_size=300", "--out", teacher},
              &out, (tmp.path / "init.log").string()) == 0);
  const fs::path run_dir = tmp.path / "run";
  const int code = run(plus(base_args(shard, run_dir.string()), {"--set", "kd.teacher=" + teacher}), &out,
                       (tmp.path / "train.log").string());
  INFO(out);
  CHECK(code != 0);
  CHECK(out.find("vocab") != std::string::npos);
  CHECK(out.find("300") != std::string::npos);
  CHECK_FALSE(fs::exists(run_dir / "metrics.jsonl"));
}

TEST_CASE("train e2e: resume refuses changed data or architecture", "[train][e2e][resume]") {
  TempDir tmp("refuse");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 10);
  const std::string other = text_shard(tmp.path, "other.bin", 20000, 11);
  const fs::path run_dir = tmp.path / "run";
  std::string out;
  REQUIRE(run(plus(base_args(shard, run_dir.string()), {"--set", "train.steps=3", "--set", "schedule.warmup=1"}),
              &out, (tmp.path / "a.log").string()) == 0);
  SECTION("different data") {
    const int code = run({KDTRAIN_BINARY, "train", "--resume", run_dir.string(), "--set", "data.train=" + other},
                         &out, (tmp.path / "b.log").string());
    INFO(out);
    CHECK(code != 0);
    CHECK(out.find("fingerprint") != std::string::npos);
  }
  SECTION("different architecture") {
    const int code = run({KDTRAIN_BINARY, "train", "--resume", run_dir.string(), "--set", "model.intermediate_size=160"},
                         &out, (tmp.path / "c.log").string());
    INFO(out);
    CHECK(code != 0);
    CHECK(out.find("intermediate_size") != std::string::npos);
  }
}
