// Helpers for the reliability tests: expected errors (and, through
// test_common.h, their messages), small training runs through the binary, files
// written byte by byte.
#pragma once
#include <catch2/catch.hpp>

#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"
#include "support/process_util.h"
#include "support/temp_dir.h"
#include "support/test_common.h"

namespace kdtrain::testing {

// Requires every part in `message`, printing the message on failure.
inline void require_all(const std::string& message, const std::vector<std::string>& parts) {
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (const std::string& part : parts) CHECK(message.find(part) != std::string::npos);
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A uint16 shard of pseudo-text bytes (ids < 128), enough for tiny-llama to train on.
inline std::string text_shard(const std::filesystem::path& dir, const std::string& name, int64_t n,
                              uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  uint32_t prev = 'a';
  for (auto& t : tokens) {
    const uint64_t r = rng.next();
    t = (r % 4 == 0) ? uint32_t(' ') : uint32_t('a' + (prev * 7 + r % 5) % 26);
    prev = t;
  }
  const std::string path = (dir / name).string();
  data::write_shard(path, tokens, 1);
  return path;
}

// `kdtrain train` of tiny-llama on `shard` for `steps` steps, a checkpoint every `interval`.
inline std::vector<std::string> tiny_train_args(const std::string& shard, const std::string& run_dir,
                                                int steps = 6, int interval = 2) {
  return {KDTRAIN_BINARY, "train", "--preset", "tiny-llama",
          "--set", "data.train=" + shard, "--set", "train.seq_len=32",
          "--set", "train.global_batch=4", "--set", "train.micro_batch=2",
          "--set", "train.steps=" + std::to_string(steps), "--set", "schedule.warmup=1",
          "--set", "checkpoint.interval=" + std::to_string(interval), "--set", "checkpoint.keep=10",
          "--run-dir", run_dir};
}

// Overrides that make a run diverge: lr 1e30 from the first step, no clipping, so the
// first update makes the weights overflow and every later loss is not finite.
inline std::vector<std::string> diverging_run() {
  return {"--set", "optimizer.lr=1e30", "--set", "optimizer.grad_clip=0",
          "--set", "schedule.kind=constant", "--set", "schedule.warmup=0"};
}

inline std::vector<std::string> plus(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Every non-empty line of a JSON-lines file, parsed.
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

inline std::vector<nlohmann::json> metrics_of(const std::filesystem::path& run_dir) {
  return read_jsonl(run_dir / "metrics.jsonl");
}

// Every file under `dir`, with its bytes: what must not change.
inline std::map<std::string, std::string> snapshot(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[std::filesystem::relative(e.path(), dir).string()] = read_bytes(e.path());
  return files;
}

// <run>/checkpoints/step_<8 digits>.
inline std::filesystem::path step_dir(const std::filesystem::path& run, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  return run / "checkpoints" / name;
}

// Runs the kdtrain binary with `args`, its output in `out` and a log file of its own
// under `tmp`; returns the exit code.
inline int kdtrain_cli(const TempDir& tmp, std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), KDTRAIN_BINARY);
  static int n = 0;
  return run(args, out, tmp.file("cmd" + std::to_string(n++) + ".log"));
}

// A finished tiny run in tmp/run: `steps` steps on a pseudo-text shard, a checkpoint
// every `interval`, `more` arguments added to the train command.
struct FinishedRun {
  TempDir tmp;
  std::string shard;
  std::filesystem::path dir;
  FinishedRun(const char* name, int steps, int interval, const std::vector<std::string>& more = {})
      : tmp(name), shard(text_shard(tmp.path, "train.bin", 20000, 3)), dir(tmp.path / "run") {
    std::string out;
    REQUIRE(run(plus(tiny_train_args(shard, dir.string(), steps, interval), more), &out, tmp.file("t.log")) == 0);
  }
};

}  // namespace kdtrain::testing
