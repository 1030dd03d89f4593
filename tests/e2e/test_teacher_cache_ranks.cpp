// `kdtrain teacher-cache` written by many ranks and resumed (cli/teacher_cache_builder.h):
// the same command run as one process and under mpirun with 1, 2 and 3 CPU
// ranks gives byte-identical shards and manifests, and a run killed with
// SIGKILL in the middle of a shard, rerun with the same command (on another
// rank count), skips the complete shards, rewrites the rest and ends
// byte-identical too. SIGINT or SIGTERM to mpirun, which passes the job's end to
// every rank, leaves no rank's staging files and no manifest behind. Training
// from a cache on 2 ranks sums its checksums once for the node's ranks, and a
// corrupt shard stops every rank before the step that would read it.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "support/mpi_util.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/synthetic_cache_fixture.h"
#include "support/teacher_cache_fixture.h"

using namespace kdtrain;
using namespace kdtrain::testing;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Every file of a cache directory, by name.
std::map<std::string, std::string> cache_files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = read_file(e.path().string());
  return files;
}

struct RankFixture {
  explicit RankFixture(int64_t windows = 600, int64_t shard_windows = 100)
      : f(64 * windows + 1), shard_windows(std::to_string(shard_windows)) {}
  CacheFixture f;  // windows of 64 tokens
  std::string shard_windows;
  std::vector<std::string> command(const std::string& out) const {
    return {KDTRAIN_BINARY, "teacher-cache", "--teacher", f.teacher_dir, "--data", f.shard, "--seq-len", "64",
            "--top-k", "5", "--batch-size", "8", "--shard-windows", shard_windows, "--threads", "1", "--out", out};
  }
  std::string out(const std::string& name) const { return f.dir.file(name); }
};

}  // namespace

TEST_CASE("teacher-cache: 1, 2 and 3 ranks write the same bytes as one process", "[teacher_cache][mpi]") {
  REQUIRE_MPIRUN();
  RankFixture r;
  std::string log;
  REQUIRE(run(r.command(r.out("single")), &log, r.out("single.log")) == 0);
  INFO(log);
  const std::map<std::string, std::string> single = cache_files(r.out("single"));
  REQUIRE(single.size() == 7);  // 6 shards and the manifest
  for (int ranks : {1, 2, 3}) {
    const std::string out = r.out("ranks" + std::to_string(ranks));
    REQUIRE(run(under_mpi(ranks, r.command(out)), &log, out + ".log") == 0);
    INFO(ranks << " ranks: " << log);
    CHECK(cache_files(out) == single);
  }
}

TEST_CASE("teacher-cache: killed mid-shard, the same command resumes and ends byte-identical",
          "[teacher_cache][mpi]") {
  RankFixture r;
  std::string log;
  REQUIRE(run(r.command(r.out("whole")), &log, r.out("whole.log")) == 0);
  const std::map<std::string, std::string> whole = cache_files(r.out("whole"));

  const std::string out = r.out("killed");
  const Process p = spawn(r.command(out), out + ".log");
  REQUIRE(p.pid > 0);
  // Wait for the second shard's temporary to hold a header and a window, then kill.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool mid_shard = false;
  while (!mid_shard && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out, ec))
      if (e.path().filename().string().rfind("shard_00001.bin.tmp.", 0) == 0 && fs::file_size(e.path(), ec) > 4096)
        mid_shard = true;
    if (!mid_shard) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(p.pid, SIGKILL);
  REQUIRE(wait_for(p) == 128 + SIGKILL);
  INFO(read_file(out + ".log"));
  REQUIRE(mid_shard);  // else the run was too fast to interrupt: the test proved nothing
  CHECK(fs::exists(out + "/shard_00000.bin"));
  CHECK_FALSE(fs::exists(out + "/shard_00001.bin"));
  CHECK_FALSE(fs::exists(out + "/manifest.json"));
  CHECK_THROWS_WITH(data::TeacherCache(out), Contains("no manifest.json"));

  // Resumed under mpirun with 2 ranks when there is one, else as one process.
  const bool mpi = !find_mpirun().empty();
  REQUIRE(run(mpi ? under_mpi(2, r.command(out)) : r.command(out), &log, out + ".resume.log") == 0);
  INFO(log);
  CHECK(log.find("(1 already complete)") != std::string::npos);  // shard 0, on rank 0
  CHECK(cache_files(out) == whole);  // no temporaries left, every byte the same
  REQUIRE(run({KDTRAIN_BINARY, "verify", out}, &log, out + ".verify.log") == 0);
  CHECK(log.find("6 shards, 600 windows x 64 tokens, top-5 of 61, bf16") != std::string::npos);
}

TEST_CASE("teacher-cache: SIGINT or SIGTERM to mpirun leaves no rank's temporaries, and the rerun ends byte-identical",
          "[teacher_cache][mpi][signals]") {
  REQUIRE_MPIRUN();
  // 4 shards of 4800 windows, about 3 s each on the 2-core CI machine (0.35 s at 600
  // windows there): Open MPI's mpirun passes its signal on as SIGTERM a second after it
  // gets it, and a rank that finished within that second would commit the whole cache.
  RankFixture r(19200, 4800);
  std::string log;
  REQUIRE(run(r.command(r.out("whole")), &log, r.out("whole.log")) == 0);
  const std::map<std::string, std::string> whole = cache_files(r.out("whole"));
  for (int signal : {SIGINT, SIGTERM}) {
    INFO("signal " << signal);
    const std::string out = r.out("interrupted" + std::to_string(signal));
    const Process p = spawn(under_mpi(2, r.command(out)), out + ".log");
    REQUIRE(p.pid > 0);
    // Interrupt while both ranks stage a shard.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto staging = [&] {
      int ranks_staging = 0;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(out, ec)) {
        if (e.path().filename().string().find(".tmp.") != std::string::npos) ++ranks_staging;
      }
      return ranks_staging >= 2;
    };
    bool seen = false;
    while (!(seen = staging()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    REQUIRE(seen);  // else the run was too fast to interrupt: the test proved nothing
    kill(p.pid, signal);
    const int code = wait_for(p);
    INFO(read_file(out + ".log"));
    CHECK(code != 0);
    std::string left;  // named in the failure
    for (const auto& e : fs::directory_iterator(out)) left += e.path().filename().string() + " ";
    INFO("left in the cache directory: " << left);
    CHECK_FALSE(has_temporary(out));
    CHECK_FALSE(fs::exists(out + "/manifest.json"));  // an incomplete cache is no cache
    REQUIRE(run(under_mpi(2, r.command(out)), &log, out + ".rerun.log") == 0);
    INFO(log);
    CHECK(cache_files(out) == whole);  // no temporaries left, every byte the same
  }
}

TEST_CASE("teacher cache: 2 ranks training from a cache share its checksums, and a corrupt shard stops both",
          "[teacher_cache][mpi]") {
  REQUIRE_MPIRUN();
  RankFixture r(8, 2);  // 4 shards of 2 windows of 64 tokens: 2 steps of 4 windows read them all
  const std::string cache = r.out("cache");
  std::string log;
  REQUIRE(run(r.command(cache), &log, cache + ".log") == 0);
  auto train = [&](const std::string& name) {
    const std::string run_dir = r.out(name);
    const int code = run(under_mpi(2, plus(tiny_train_args(r.f.shard, run_dir, 2, 2),
                                           {"--set", "train.seq_len=64", "--set", "model.vocab_size=61", "--set",
                                            "kd.teacher_cache=" + cache})),
                         &log, run_dir + ".log");
    return code;
  };
  REQUIRE(train("good") == 0);
  INFO(log);
  CHECK(log.find("checksums shared by 2 ranks of this node") != std::string::npos);
  tamper_record(cache, 1);
  CHECK(train("bad") != 0);
  require_all(log, {cache, "shard_00001.bin (windows 2..3)", "checksum mismatch"});
  CHECK_FALSE(fs::exists(r.out("bad") + "/checkpoints/latest"));
}
