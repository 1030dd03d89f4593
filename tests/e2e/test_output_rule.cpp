// Nothing lost, round three, through the CLI: `--force` replaces only the same
// command's earlier output, recognised by its manifest; no command but train
// writes anywhere inside a run directory or a checkpoint, whatever
// the path's spelling (a folder holding a run, RUN/.., RUN/checkpoints/step_N); paths mean
// what the OS resolves (`lnk/..`), a run never writes through a link or a
// shared inode; every command's file outputs pass the same check; a 255-byte
// name works; flags are range-checked before anything is written. The rules:
// io/output_dir.h and docs/reliability.md ("The whole directory").
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

std::vector<std::string> init_args(const fs::path& out, bool force = false) {
  std::vector<std::string> a = {"init", "--preset", "tiny-llama", "--out", out.string()};
  if (force) a.push_back("--force");
  return a;
}

// A finished two-step run (one checkpoint) under tmp/<name>.
fs::path small_run(const TempDir& tmp, const std::string& name, const std::string& shard) {
  std::string out;
  const fs::path dir = tmp.path / name;
  REQUIRE(run(tiny_train_args(shard, dir.string(), 2, 2), &out, tmp.file(name + ".log")) == 0);
  return dir;
}

}  // namespace

TEST_CASE("force: never a run's checkpoints folder, a folder holding a run, RUN/.. or a path under checkpoints/",
          "[reliability][force]") {
  TempDir tmp("force_run");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  fs::create_directories(tmp.path / "exp");
  const fs::path run_dir = small_run(tmp, "exp/run", shard);
  const auto before = snapshot(tmp.path / "exp");
  // Before: each of these exited 0 and deleted the run's checkpoints (or the whole run).
  for (const fs::path& target : {run_dir / "checkpoints", tmp.path / "exp", run_dir / "..",
                                 run_dir / "checkpoints" / "step_00000099"}) {
    INFO(target);
    CHECK(kdtrain_cli(tmp, init_args(target, true), &out) == 1);
    require_all(out, {"--out"});
    CHECK(kdtrain_cli(tmp, {"export", "--checkpoint", run_dir.string(), "--out", target.string(), "--force"}, &out) == 1);
  }
  CHECK(kdtrain_cli(tmp, init_args(tmp.path / "exp", true), &out) == 1);
  require_all(out, {"kdtrain_output.json", "--force or not"});
  CHECK(snapshot(tmp.path / "exp") == before);
  CHECK(kdtrain_cli(tmp, {"verify", run_dir.string()}, &out) == 0);
}

TEST_CASE("force: replaces only an earlier output of the same command, recognised by its manifest",
          "[reliability][force]") {
  TempDir tmp("force_own");
  std::string out;
  const fs::path model = tmp.path / "model", exported = tmp.path / "hf";
  REQUIRE(kdtrain_cli(tmp, init_args(model), &out) == 0);
  REQUIRE(kdtrain_cli(tmp, {"export", "--checkpoint", model.string(), "--out", exported.string()}, &out) == 0);
  const auto hf = snapshot(exported), teacher = snapshot(model);
  // Before: init --force replaced the exported model; teacher-cache and analyze wrote into the model.
  CHECK(kdtrain_cli(tmp, init_args(exported, true), &out) == 1);
  require_all(out, {"`kdtrain export`", "not of `kdtrain init`"});
  CHECK(snapshot(exported) == hf);
  const std::string shard = text_shard(tmp.path, "train.bin", 4000, 5);
  CHECK(kdtrain_cli(tmp, {"teacher-cache", "--teacher", model.string(), "--data", shard, "--seq-len", "16", "--top-k", "4",
                  "--out", model.string(), "--force"}, &out) == 1);
  CHECK(kdtrain_cli(tmp, {"analyze", "--checkpoint", model.string(), "--data", shard, "--num-seqs", "1", "--seq-len", "16",
                  "--out", model.string(), "--force"}, &out) == 1);
  CHECK(snapshot(model) == teacher);
  // The same command's own output: --force replaces it.
  CHECK(kdtrain_cli(tmp, {"export", "--checkpoint", model.string(), "--out", exported.string(), "--force"}, &out) == 0);
  CHECK(kdtrain_cli(tmp, init_args(model, true), &out) == 0);
  // A file the earlier output did not hold is in the way, --force or not.
  write_bytes(model / "notes.txt", "mine");
  CHECK(kdtrain_cli(tmp, init_args(model, true), &out) == 1);
  require_all(out, {"notes.txt"});
  CHECK(read_bytes(model / "notes.txt") == "mine");
}

TEST_CASE("paths: lnk/../x is where the OS puts it, not where the string says", "[reliability][paths]") {
  TempDir tmp("dotdot_link");
  std::string out;
  fs::create_directories(tmp.path / "a" / "deep");
  fs::create_directory_symlink(tmp.path / "a" / "deep", tmp.path / "lnk");
  // Before: normalised to tmp/m, ignoring that lnk/.. is tmp/a.
  REQUIRE(kdtrain_cli(tmp, init_args(tmp.path / "lnk" / ".." / "m"), &out) == 0);
  CHECK(fs::exists(tmp.path / "a" / "m" / "model.safetensors"));
  CHECK_FALSE(fs::exists(tmp.path / "m"));
}

TEST_CASE("paths: a run never writes through a symlinked metrics.jsonl", "[reliability][paths]") {
  TempDir tmp("metrics_link");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  write_bytes(tmp.path / "victim.txt", "precious\n");
  const fs::path run_dir = tmp.path / "run";
  fs::create_directories(run_dir);
  write_bytes(run_dir / "kdtrain.lock", "");
  fs::create_symlink(tmp.path / "victim.txt", run_dir / "metrics.jsonl");
  // Before: the new run truncated victim.txt and wrote its records there.
  CHECK(run(tiny_train_args(shard, run_dir.string(), 2, 2), &out, tmp.file("t.log")) == 1);
  require_all(out, {"metrics.jsonl", "symbolic link"});
  CHECK(read_bytes(tmp.path / "victim.txt") == "precious\n");
}

TEST_CASE("paths: resuming a hard-linked copy of a run (cp -al) leaves the original's files alone",
          "[reliability][paths]") {
  TempDir tmp("hardlink_copy");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path a = small_run(tmp, "a", shard), b = tmp.path / "b";
  fs::copy(a, b, fs::copy_options::recursive | fs::copy_options::create_hard_links);
  const auto original = snapshot(a);
  // Before: the resumed copy appended its records to a's metrics.jsonl (one inode for both).
  CHECK(kdtrain_cli(tmp, {"train", "--resume", b.string(), "--set", "train.steps=4"}, &out) == 0);
  CHECK(snapshot(a) == original);
  CHECK(metrics_of(b).size() == 4);
  CHECK(metrics_of(a).size() == 2);
}

TEST_CASE("outputs: eval --out, dump --out and data write --out never replace a run's files or an input",
          "[reliability][outputs]") {
  TempDir tmp("other_outputs");
  std::string out;
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path run_dir = small_run(tmp, "run", shard);
  const auto before = snapshot(run_dir);
  const std::string ckpt = (run_dir / "checkpoints" / "step_00000002").string();
  // Before: eval --out RUN/metrics.jsonl and dump --out RUN/config.json replaced the run's own files, exit 0.
  CHECK(kdtrain_cli(tmp, {"eval", "--checkpoint", run_dir.string(), "--data", shard, "--max-windows", "1", "--out",
                  (run_dir / "metrics.jsonl").string()}, &out) == 1);
  require_all(out, {"--out", "training run"});
  CHECK(kdtrain_cli(tmp, {"dump", "--checkpoint", ckpt, "--data", shard, "--batch-size", "1", "--seq-len", "8", "--out",
                  (run_dir / "config.json").string()}, &out) == 1);
  CHECK(kdtrain_cli(tmp, {"data", "write", "--bytes", shard, "--out", (run_dir / "kdtrain.lock").string()}, &out) == 1);
  CHECK(kdtrain_cli(tmp, {"data", "write", "--bytes", shard, "--out", (run_dir / "checkpoints" / "x.bin").string()}, &out) == 1);
  CHECK(snapshot(run_dir) == before);
  // The eval's own shard is an input, never its output.
  const std::string data_before = read_bytes(shard);
  CHECK(kdtrain_cli(tmp, {"eval", "--checkpoint", run_dir.string(), "--data", shard, "--max-windows", "1", "--out", shard},
            &out) == 1);
  require_all(out, {"is the input file"});
  CHECK(read_bytes(shard) == data_before);
}

TEST_CASE("place rule: no command but train writes anywhere inside a run directory", "[reliability][outputs]") {
  TempDir tmp("inside_run");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 3);
  const fs::path run_dir = small_run(tmp, "run", shard);
  std::string out;
  const std::string ckpt = (run_dir / "checkpoints" / "step_00000002").string();
  fs::create_directory_symlink(run_dir, tmp.path / "lnk");
  const auto before = snapshot(run_dir);
  const std::string run_real = fs::canonical(run_dir).string();
  const std::string beside = fs::canonical(tmp.path).string();
  const std::string r = run_dir.string(), lnk = (tmp.path / "lnk").string();
  // Before: each exited 0 and left its output inside the run (derived results were allowed
  // beside the run's own files), where `verify` does not look and --force could later delete them.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"eval", "--checkpoint", r, "--data", shard, "--max-windows", "1", "--out", r + "/eval.json"}, "/eval.json"},
      {{"export", "--checkpoint", r, "--out", r + "/hf"}, "/hf"},
      {{"analyze", "--checkpoint", r, "--data", shard, "--num-seqs", "1", "--out", r + "/analysis"}, "/analysis"},
      {{"init", "--preset", "tiny-llama", "--out", r + "/sub"}, "/sub"},
      {{"init", "--preset", "tiny-llama", "--out", r + "/a/b", "--force"}, "/a/b"},
      {{"init", "--preset", "tiny-llama", "--out", lnk + "/sub"}, "/sub"},
      {{"dump", "--checkpoint", ckpt, "--data", shard, "--batch-size", "1", "--seq-len", "8", "--out",
        r + "/dump.safetensors"}, "/dump.safetensors"},
      {{"data", "write", "--bytes", shard, "--out", r + "/x.bin"}, "/x.bin"},
      {{"data", "write", "--bytes", shard, "--out", tmp.file("t.bin"), "--val-out", r + "/v.bin"}, "/v.bin"},
      {{"teacher-cache", "--teacher", ckpt, "--data", shard, "--seq-len", "16", "--top-k", "4", "--out",
        r + "/cache"}, "/cache"},
  };
  for (const auto& [args, rel] : cases) {
    INFO(args[0] << " ... " << args.back());
    CHECK(kdtrain_cli(tmp, args, &out) == 1);
    require_all(out, {"is inside " + run_real, "a training run directory", "no command but `train` writes anywhere inside",
                      "beside the run instead, e.g.", beside + rel});
    CHECK(snapshot(run_dir) == before);
  }
  CHECK_FALSE(fs::exists(tmp.file("t.bin")));
  // A second run nested in the first is refused as well; beside it, every command writes.
  CHECK(run(tiny_train_args(shard, r + "/inner", 2, 2), &out, tmp.file("inner.log")) == 1);
  require_all(out, {"--run-dir " + r + "/inner", "never inside another run"});
  CHECK(snapshot(run_dir) == before);
  CHECK(kdtrain_cli(tmp, {"export", "--checkpoint", r, "--out", tmp.file("hf")}, &out) == 0);
  CHECK(kdtrain_cli(tmp, {"verify", r}, &out) == 0);
}

TEST_CASE("names: init and export write a 255-byte output name", "[reliability][paths]") {
  TempDir tmp("long_name");
  std::string out;
  const fs::path model = tmp.path / std::string(255, 'm'), hf = tmp.path / std::string(255, 'h');
  // Before: the staging name "<name>.tmp.<pid>" was longer than the file system allows.
  REQUIRE(kdtrain_cli(tmp, init_args(model), &out) == 0);
  CHECK(fs::exists(model / "model.safetensors"));
  REQUIRE(kdtrain_cli(tmp, {"export", "--checkpoint", model.string(), "--out", hf.string()}, &out) == 0);
  CHECK(fs::exists(hf / "config.json"));
  CHECK(kdtrain_cli(tmp, {"data", "write", "--bytes", (model / "config.json").string(), "--out",
                  (tmp.path / std::string(255, 'd')).string()}, &out) == 0);
}

namespace {

// `args` with `flag` set to `value`: replaced where args has it (a second
// --seq-len would be refused for being repeated, not for its range), else appended.
std::vector<std::string> with_flag(std::vector<std::string> args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) {
      args[i + 1] = value;
      return args;
    }
  return plus(args, {flag, value});
}

// A command line that runs, and each count flag it takes with values out of range.
struct FlagCheck {
  std::vector<std::string> args;
  fs::path writes;  // what the command writes ("" for nothing)
  std::vector<std::pair<std::string, std::vector<std::string>>> bad;
};

}  // namespace

TEST_CASE("flags: out-of-range counts and unknown choices are refused before anything is written",
          "[reliability][flags]") {
  TempDir tmp("flag_ranges");
  std::string out;
  const fs::path model = tmp.path / "model";
  REQUIRE(kdtrain_cli(tmp, init_args(model), &out) == 0);
  const std::string shard = text_shard(tmp.path, "train.bin", 4000, 5), m = model.string();
  const std::string too_many = "2000000", beyond_windows = "2199023255553";  // > 2^20; > 2^40
  const std::vector<FlagCheck> checks = {
      // Before: --micro-batch 0 and the huge values were accepted, --device-memory 0 was refused only
      // after the config was read.
      {{"info", "--preset", "tiny-llama"}, "",
       {{"--micro-batch", {"0", "-1", too_many}}, {"--seq-len", {"0", "-1", too_many}},
        {"--world-size", {"0", "-1", too_many}}, {"--device-memory", {"0", "-1", "1e12", "nan"}}}},
      // Before: every one of these ran a benchmark, or failed after it started.
      {{"bench", "--preset", "tiny-llama", "--micro-batch", "1", "--seq-len", "16", "--steps", "1", "--warmup", "0"},
       "",
       {{"--micro-batch", {"0", "-1"}}, {"--seq-len", {"0", "-1"}}, {"--steps", {"0", "-1"}}, {"--warmup", {"-1"}},
        {"--seed", {"-1", "99999999999999999999999"}},
        {"--teacher-cache", {"0", "-1"}}, {"--peak-tflops", {"0", "-1"}}, {"--head-dim", {"0", "-1"}},
        {"--project-world-size", {"0", "-1"}}, {"--nvlink-gb-s", {"0", "-1"}}, {"--network-gb-s", {"0", "-1"}},
        {"--gpus-per-node", {"0", "-1"}}, {"--cache-vocab", {"0", "-1", "16777217"}}, {"--device", {"gpu"}},
        {"--attention-forward", {"fast"}}}},
      // Before: --threads 100000 crashed, --threads -1 was accepted.
      {{"teacher-cache", "--teacher", m, "--data", shard, "--seq-len", "16", "--top-k", "4", "--out",
        tmp.file("cache")},
       tmp.path / "cache",
       {{"--threads", {"100000", "-1"}}, {"--batch-size", {"0", "-1"}}, {"--chunk-tokens", {"0", "-1"}},
        {"--top-k", {"0", "-1"}}, {"--seq-len", {"0", "-1", too_many}}, {"--shard-windows", {"-1", beyond_windows}},
        // Before: refused naming no flag, after --out was created.
        {"--device", {"gpu"}}}},
      // Before: --max-windows 0 and -1 scored every window.
      {{"eval", "--checkpoint", m, "--data", shard, "--seq-len", "16", "--max-windows", "2", "--out",
        tmp.file("eval.json")},
       tmp.path / "eval.json",
       {{"--max-windows", {"0", "-1", beyond_windows}}, {"--batch-size", {"0", "-1", too_many}},
        {"--chunk-tokens", {"0", "-1"}}, {"--seq-len", {"0", "-1", too_many}}, {"--device", {"gpu"}},
        {"--affine-n", {"all"}}}},
      {{"analyze", "--checkpoint", m, "--data", shard, "--seq-len", "16", "--num-seqs", "1", "--out",
        tmp.file("analysis")},
       tmp.path / "analysis",
       {{"--num-seqs", {"0", "-1", too_many}}, {"--layer-map", {"0", "-1"}}, {"--map-size", {"0", "-1", "5000"}},
        {"--bins", {"0", "-1", too_many}}, {"--seq-len", {"0", "-1"}}}},
      {{"dump", "--checkpoint", m, "--data", shard, "--batch-size", "1", "--seq-len", "16", "--out",
        tmp.file("dump.safetensors")},
       tmp.path / "dump.safetensors",
       {{"--batch-size", {"0", "-1", too_many}}, {"--seq-len", {"0", "-1", too_many}}, {"--device", {"gpu"}}}},
      {{"data", "write", "--bytes", (model / "config.json").string(), "--out", tmp.file("w.bin"), "--val-out",
        tmp.file("v.bin")},
       tmp.path / "w.bin", {{"--val-tokens", {"0", "-1"}}, {"--version", {"0", "2"}}}},
      // Before: both seeded with 2^64 - 1 (strtoull wraps -1 and saturates the other).
      {{"init", "--preset", "tiny-llama", "--out", tmp.file("seeded")}, tmp.path / "seeded",
       {{"--seed", {"-1", "99999999999999999999999", "nan"}}, {"--attention", {"linear"}}}},
  };
  for (const FlagCheck& c : checks) {
    // The command line itself is good: each refusal below is the flag's.
    REQUIRE(kdtrain_cli(tmp, c.args, &out) == 0);
    if (!c.writes.empty()) fs::remove_all(c.writes);
    fs::remove_all(tmp.path / "v.bin");
    for (const auto& [flag, values] : c.bad)
      for (const std::string& value : values) {
        INFO(c.args[0] << " " << flag << " " << value);
        const int code = kdtrain_cli(tmp, with_flag(c.args, flag, value), &out);
        CHECK(code != 0);
        CHECK(code < 128);  // refused, not killed by a signal
        require_all(out, {flag});
        if (!c.writes.empty()) CHECK_FALSE(fs::exists(c.writes));
      }
  }
}
