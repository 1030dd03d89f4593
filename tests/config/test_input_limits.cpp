// Hostile or mistaken input, round two: each is refused with a message naming
// the file or key, before memory is reserved or a run directory exists, instead
// of a silently wrong run, an out-of-memory kill or a death without a word.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "dist/watchdog.h"
#include "io/file_util.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

int cli(const TempDir& tmp, std::vector<std::string> args, std::string* out) {
  return kdtrain_cli(tmp, std::move(args), out);
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("shards: two spellings of one shard are one shard; a path with [ ] is that file", "[reliability]") {
  TempDir tmp("spellings");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 2000, 1);
  // Before: `train.bin` and `./train.bin` were two shards, doubling the data.
  REQUIRE(cli(tmp, {"data", "info", shard, (tmp.path / "." / "train.bin").string(), tmp.path.string() + "//train.bin"},
              &out) == 0);
  CHECK(out.find("total: 1 shards  tokens 2000") != std::string::npos);
  fs::create_symlink(shard, tmp.path / "link.bin");
  REQUIRE(cli(tmp, {"data", "info", (tmp.path / "*.bin").string()}, &out) == 0);
  CHECK(out.find("total: 1 shards") != std::string::npos);
  // Before: `run[1].bin` was the pattern matching run1.bin.
  text_shard(tmp.path, "run[1].bin", 3000, 2);
  text_shard(tmp.path, "run1.bin", 4000, 3);
  REQUIRE(cli(tmp, {"data", "info", tmp.file("run[1].bin")}, &out) == 0);
  CHECK(out.find("tokens 3000") != std::string::npos);
  CHECK(count_of(out, "run1.bin") == 0);
  // A pattern is still a pattern when no file has its literal name.
  REQUIRE(cli(tmp, {"data", "info", tmp.file("run[0-9].bin")}, &out) == 0);
  CHECK(out.find("tokens 4000") != std::string::npos);
}

TEST_CASE("init: a standard deviation that overflows float32 is refused, nothing written", "[reliability]") {
  TempDir tmp("init_inf");
  std::string out;
  // Before: a checkpoint of infinities, exit 0; only verify noticed later.
  CHECK(cli(tmp, {"init", "--preset", "tiny-llama", "--set", "model.initializer_range=1e300", "--out",
                  tmp.file("inf")}, &out) == 1);
  require_all(out, {"model.initializer_range", "non-finite"});
  CHECK_FALSE(fs::exists(tmp.path / "inf"));
  CHECK(cli(tmp, {"init", "--preset", "tiny-llama", "--attention", "sink", "--set", "attention.sink_init_std=1e300",
                  "--out", tmp.file("inf")}, &out) == 1);
  require_all(out, {"attention.sink_init_std"});
}

TEST_CASE("json: a NUL byte hides no second document, in a config or a safetensors header", "[reliability]") {
  TempDir tmp("json_nul");
  std::string out;
  write_bytes(tmp.path / "c.json", std::string("{\"train\": {\"steps\": 3}}\0{\"train\": {\"steps\": 99}}", 48));
  // Before: the config parsed as its first document.
  CHECK(cli(tmp, {"config", "--preset", "tiny-llama", "--config", tmp.file("c.json"), "--dump"}, &out) == 1);
  require_all(out, {tmp.file("c.json"), "NUL byte at line 1"});

  // A safetensors header padded with NULs (the safetensors library refuses it; padding is spaces).
  const fs::path model = tmp.path / "model";
  REQUIRE(cli(tmp, {"init", "--preset", "tiny-llama", "--out", model.string()}, &out) == 0);
  std::string bytes = read_bytes(model / "model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const uint64_t padded = n + 8;
  bytes.insert(8 + n, std::string(8, '\0'));
  std::memcpy(bytes.data(), &padded, 8);
  write_bytes(model / "model.safetensors", bytes);
  fs::remove(model / "checksums.json");
  CHECK(cli(tmp, {"verify", model.string()}, &out) == 1);
  require_all(out, {"model.safetensors", "NUL byte"});
}

TEST_CASE("limits: dist.timeout_s and every count key have a finite bound, named when passed", "[reliability]") {
  TempDir tmp("count_limits");
  std::string out;
  // Before: accepted; the watchdog's nanosecond deadline overflowed and the job aborted at step 1.
  CHECK(cli(tmp, {"config", "--preset", "tiny-llama", "--set", "dist.timeout_s=1e10", "--dump"}, &out) == 1);
  require_all(out, {"dist.timeout_s", "exceeds kdtrain's limit"});
  for (const char* key : {"checkpoint.interval", "checkpoint.keep", "log.interval", "eval.interval",
                          "train.max_consecutive_skips"}) {
    INFO(key);
    CHECK(cli(tmp, {"config", "--preset", "tiny-llama", "--set", std::string(key) + "=4611686018427387904", "--dump"},
              &out) == 1);
    require_all(out, {key, "exceeds kdtrain's limit"});
  }
  CHECK(cli(tmp, {"config", "--preset", "tiny-llama", "--set", "dist.timeout_s=31536000", "--dump"}, &out) == 0);
  // schedule.warmup is bounded by train.steps: clamped, with a notice.
  CHECK(cli(tmp, {"config", "--preset", "tiny-llama", "--set", "schedule.warmup=4611686018427387904", "--dump"},
            &out) == 0);
  require_all(out, {"warmup clamped to 100 steps"});
}

TEST_CASE("watchdog: a timeout beyond the clock's range never fires early", "[reliability][dist]") {
  // Before: 1e10 s overflowed the conversion to nanoseconds (undefined behaviour);
  // the deadline landed in the past and the watchdog ended this process.
  dist::Watchdog dog(1e300, 0);
  dog.arm("test collective");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  dog.disarm();
  SUCCEED("still running");
}

TEST_CASE("teacher: a config.json claiming more than its weights is refused before memory is reserved",
          "[reliability]") {
  TempDir tmp("teacher_claims");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 4);
  const fs::path teacher = tmp.path / "teacher";
  REQUIRE(cli(tmp, {"init", "--preset", "tiny-llama", "--out", teacher.string()}, &out) == 0);
  nlohmann::json config = nlohmann::json::parse(read_bytes(teacher / "config.json"));
  config["hidden_size"] = 4096;  // 0.3 MB of weights claiming 8.7 GB of parameters
  config["intermediate_size"] = 16384;
  config["num_hidden_layers"] = 8;
  write_bytes(teacher / "config.json", config.dump());
  fs::remove(teacher / "checksums.json");
  // Under a 2 GiB address-space limit. Before: the arena was reserved first (an OOM kill, or here "cannot allocate").
  std::string args = "ulimit -v 2097152; exec";
  for (const std::string& a : plus(tiny_train_args(shard, tmp.file("run"), 2, 2), {"--set", "kd.teacher=" + teacher.string()}))
    args += " '" + a + "'";
  CHECK(run({"/bin/sh", "-c", args}, &out, tmp.file("t.log")) == 1);
  require_all(out, {"model.safetensors", "has shape", "expected"});
  CHECK(out.find("cannot allocate") == std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path / "run"));
}

TEST_CASE("teacher: fewer positions than train.seq_len is refused before the run directory exists", "[reliability]") {
  TempDir tmp("teacher_positions");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 5);
  const fs::path teacher = tmp.path / "teacher";
  REQUIRE(cli(tmp, {"init", "--preset", "tiny-llama", "--set", "model.max_position_embeddings=16", "--set",
                    "train.seq_len=16", "--out", teacher.string()}, &out) == 0);
  // Before: the run directory existed and step 1 failed without naming the teacher.
  CHECK(run(plus(tiny_train_args(shard, tmp.file("run"), 2, 2), {"--set", "kd.teacher=" + teacher.string()}), &out,
            tmp.file("t.log")) == 1);
  require_all(out, {"kd.teacher", "max_position_embeddings 16", "train.seq_len 32"});
  CHECK_FALSE(fs::exists(tmp.path / "run"));
}

TEST_CASE("mapped files: a shard truncated while it is read ends with a message naming it, not a bare SIGBUS",
          "[reliability]") {
  TempDir tmp("sigbus");
  const std::string shard = text_shard(tmp.path, "train.bin", 100000, 6);
  const std::string log = tmp.file("child.log");
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // What `main` installs; the child then reads a page its file no longer has.
    io::install_mapped_file_fault_handler();
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    const io::MappedFile file(shard);
    if (::truncate(shard.c_str(), 0) != 0) ::_exit(3);
    volatile uint8_t x = file.data()[file.size() - 1];
    (void)x;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  // Before: killed by SIGBUS, nothing said.
  CHECK(WIFEXITED(status));
  CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) == 1);
  require_all(read_bytes(log), {shard, "shrank while kdtrain was reading it"});
}
