// A teacher cache is input like any other, through the CLI (docs/reliability.md):
// a sharded cache tampered with and its checksums recomputed stops `kdtrain
// train` before the step that would use the window, naming the shard file, the
// window and the position; and SIGINT or SIGTERM during `kdtrain teacher-cache`
// leaves no temporary behind, and the same command then resumes without --force.
// --json reports the cache and this run's write rate as one JSON line (the GPU
// window's cache-write step reads it).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/teacher_cache.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/teacher_cache_fixture.h"

using namespace kdtrain;
using namespace kdtrain::testing;
namespace fs = std::filesystem;

namespace {

// One window's decoded rows.
struct Window {
  std::vector<int32_t> ids;
  std::vector<float> logp, tail;
};

// Decodes window `window` of `cache`, lets `change` edit it, encodes it back and
// recomputes the shard's checksum, in its trailer and in manifest.json: what a
// tamperer does so that only the value checks can tell.
template <typename Change>
void tamper(const std::string& cache, int64_t window, const Change& change) {
  data::CacheManifest m = data::read_cache_manifest(cache);
  const data::CacheHeader& h = m.header;
  const int64_t s = window / m.shard_windows, local = window - m.shards[s].first_window;
  const fs::path file = fs::path(cache) / m.shards[s].file;
  std::string bytes = read_bytes(file);
  auto* record = reinterpret_cast<uint8_t*>(&bytes[data::kCacheHeaderBytes + local * h.record_bytes()]);
  Window w{std::vector<int32_t>(h.seq_len * h.K), std::vector<float>(h.seq_len * h.K), std::vector<float>(h.seq_len)};
  data::decode_record(h, record, w.ids.data(), w.logp.data(), w.tail.data());
  change(w, h.K);
  data::encode_record(h, w.ids.data(), w.logp.data(), w.tail.data(), record);
  data::CacheChecksum sum;
  sum.update(bytes.data(), bytes.size() - data::kCacheTrailerBytes);
  m.shards[s].checksum = sum.value();
  data::encode_trailer(m.shards[s].checksum, reinterpret_cast<uint8_t*>(&bytes[bytes.size() - data::kCacheTrailerBytes]));
  write_bytes(file, bytes);
  data::write_cache_manifest(cache, m);
}

// `kdtrain teacher-cache` over the fixture's teacher and shard, on one CPU thread.
std::vector<std::string> cache_command(const CacheFixture& f, const std::string& cache, const char* seq_len,
                                       const char* top_k, const char* shard_windows) {
  return {KDTRAIN_BINARY, "teacher-cache", "--teacher", f.teacher_dir, "--data", f.shard, "--seq-len", seq_len,
          "--top-k", top_k, "--shard-windows", shard_windows, "--threads", "1", "--out", cache};
}

// The last non-empty line of `out`, as JSON (it must be JSON).
nlohmann::json last_line_json(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  REQUIRE(end != std::string::npos);
  const size_t start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start + 1)));
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

TEST_CASE("teacher cache values: a tampered sharded cache with its checksums recomputed stops train, naming shard and window",
          "[teacher_cache][reliability]") {
  // 4 windows of 32 tokens over the fixture's 61 ids (6-bit ids: 61..63 fit the record
  // but lie outside the vocabulary), two windows per shard; one step of 4 windows reads them all.
  CacheFixture f(4 * 32 + 1);
  const std::string cache = f.dir.file("cache");
  std::string out;
  REQUIRE(run(cache_command(f, cache, "32", "4", "2"), &out, f.dir.file("cache.log")) == 0);
  const std::string good_shard = read_bytes(fs::path(cache) / "shard_00001.bin");
  const std::string good_manifest = read_bytes(fs::path(cache) / "manifest.json");
  auto train = [&](const std::string& run_dir) {
    return run(plus(tiny_train_args(f.shard, run_dir, 1, 1),
                    {"--set", "model.vocab_size=61", "--set", "kd.teacher_cache=" + cache}),
               &out, f.dir.file("train.log"));
  };
  // The untampered cache trains: the failures below are the tampering's.
  REQUIRE(train(f.dir.file("good")) == 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* what;
    std::function<void(Window&, int64_t)> change;  // at position 5
  };
  const std::vector<Case> cases = {
      {"not a finite value <= 0", [](Window& w, int64_t K) { w.logp[5 * K] = 0.7f; }},
      {"not a finite value <= 0", [&](Window& w, int64_t K) { w.logp[5 * K + 1] = nan; }},
      {"outside the vocabulary [0, 61)", [](Window& w, int64_t K) { w.ids[5 * K + 2] = 62; }}};
  int n = 0;
  for (const Case& c : cases) {
    INFO(c.what);
    write_bytes(fs::path(cache) / "shard_00001.bin", good_shard);
    write_bytes(fs::path(cache) / "manifest.json", good_manifest);
    tamper(cache, 3, c.change);
    const fs::path run_dir = f.dir.path / ("run" + std::to_string(n++));
    // Before the values were checked as read: a positive log-probability trained
    // silently, NaN failed later as a gradient error not naming the cache, an id
    // outside the vocabulary was caught mid-run.
    CHECK(train(run_dir.string()) == 1);
    require_all(out, {cache, "shard_00001.bin", "window 3", "position 5", c.what});
    // The step that would have used the window never happened.
    CHECK_FALSE(fs::exists(run_dir / "checkpoints" / "latest"));
    CHECK((!fs::exists(run_dir / "metrics.jsonl") || metrics_of(run_dir).empty()));
    // verify reads every window up front and names the same one.
    CHECK(run({KDTRAIN_BINARY, "verify", cache}, &out, f.dir.file("verify.log")) == 1);
    require_all(out, {"shard_00001.bin", "window 3", "position 5", c.what});
  }
}

TEST_CASE("signals: SIGINT or SIGTERM during teacher-cache removes what it staged, and the rerun resumes",
          "[teacher_cache][reliability][signals]") {
  CacheFixture f(64 * 600 + 1);  // 600 windows of 64 tokens, 30 shards of 20
  const std::string cache = f.dir.file("cache");
  const std::vector<std::string> command = cache_command(f, cache, "64", "5", "20");
  int n = 0;
  for (int signal : {SIGINT, SIGTERM}) {
    INFO("signal " << signal);
    const std::string log = f.dir.file("interrupted" + std::to_string(n++) + ".log");
    const Process p = spawn(command, log);
    REQUIRE(p.pid > 0);
    // Interrupt once this run has committed a shard and stages the next one.
    const std::string first = cache + "/" + data::cache_shard_file(signal == SIGINT ? 0 : 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!(fs::exists(first) && has_temporary(cache)) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    kill(p.pid, signal);
    const int code = wait_for(p);
    INFO(read_file(log));
    REQUIRE(code != 0);  // else the run was too fast to interrupt: the test proved nothing
    // Before: killed at once, leaving the shard's temporary behind, and the rerun was refused without --force.
    CHECK(code == 128 + signal);
    CHECK_FALSE(has_temporary(cache));
    CHECK(fs::exists(first));
    CHECK_FALSE(fs::exists(cache + "/manifest.json"));  // an incomplete cache is no cache
  }
  const ino_t kept = inode_of(cache + "/" + data::cache_shard_file(0));
  std::string out;
  REQUIRE(run(command, &out, f.dir.file("rerun.log")) == 0);
  CHECK(out.find("(0 already complete)") == std::string::npos);
  CHECK(inode_of(cache + "/" + data::cache_shard_file(0)) == kept);  // resumed, not rewritten
  CHECK_FALSE(has_temporary(cache));
  REQUIRE(run({KDTRAIN_BINARY, "verify", cache}, &out, f.dir.file("verify.log")) == 0);
  CHECK(out.find("30 shards, 600 windows x 64 tokens, top-5 of 61") != std::string::npos);
}

TEST_CASE("teacher-cache --json: the last line reports the cache and the tokens/s of what this run wrote",
          "[teacher_cache][e2e]") {
  CacheFixture f(6 * 32 + 1);  // 6 windows of 32 tokens, 3 shards of 2
  const std::string cache = f.dir.file("cache");
  const std::vector<std::string> command = cache_command(f, cache, "32", "4", "2");
  std::string out;
  REQUIRE(run(command, &out, f.dir.file("text.log")) == 0);
  CHECK(out.find("wrote " + cache + ": 6 windows x 32 tokens in 3 shards, top-4 of 61 (6-bit ids), bf16") !=
        std::string::npos);
  fs::remove(fs::path(cache) / data::cache_shard_file(1));
  REQUIRE(run(plus(command, {"--json"}), &out, f.dir.file("json.log")) == 0);
  const nlohmann::json r = last_line_json(out);
  INFO(r.dump());
  CHECK(r["windows"] == 6);
  CHECK(r["seq_len"] == 32);
  CHECK(r["tokens"] == 6 * 32);
  CHECK(r["shards"] == 3);
  CHECK(r["top_k"] == 4);
  CHECK(r["vocab_size"] == 61);
  CHECK(r["id_bits"] == 6);
  CHECK(r["value_type"] == "bf16");
  CHECK(r["ranks"] == 1);
  // Only the removed shard was written again: the resumed ones are not this run's speed.
  CHECK(r["tokens_written"].get<double>() == 2 * 32);
  const double seconds = r["seconds"].get<double>();
  REQUIRE(seconds > 0);
  CHECK(r["tokens_per_s"].get<double>() == Approx(2 * 32 / seconds).epsilon(1e-12));
  CHECK(out.find("wrote " + cache) == std::string::npos);  // the JSON replaces the line
  CHECK_FALSE(r.contains("kernel_ms"));
  // --kernel-times adds the GPU's per-kernel milliseconds; the CPU backend times none.
  fs::remove(fs::path(cache) / data::cache_shard_file(1));
  REQUIRE(run(plus(command, {"--json", "--kernel-times"}), &out, f.dir.file("timed.log")) == 0);
  const nlohmann::json timed = last_line_json(out);
  INFO(timed.dump());
  REQUIRE(timed.contains("kernel_ms"));
  CHECK(timed["kernel_ms"].is_object());
  CHECK(timed["kernel_ms"].empty());
}
