// Nothing lost, round three, through the CLI: a run killed between its first
// checkpoint and `latest` (a new train refuses it, --resume finds the newest
// verified checkpoint, also one newer than what `latest` names, and verify
// checks the same one; --rewind recovers from a `latest` naming a vanished one),
// resumes that change only what cannot change the trajectory, the documented
// remedy for an affine checkpoint older than attention.affine_bias_divisor, and
// commands interrupted by SIGINT / SIGTERM removing what they staged.
// docs/reliability.md has the rules.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/checksums.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

// Any staging leftover ("<name>.tmp.<pid>") under dir.
bool has_staging(const fs::path& dir) {
  if (!fs::exists(dir)) return false;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

void erase_key(const fs::path& file, const std::vector<std::string>& path) {
  nlohmann::json doc = nlohmann::json::parse(read_bytes(file));
  nlohmann::json* at = &doc;
  for (size_t i = 0; i + 1 < path.size(); ++i) at = &(*at)[path[i]];
  at->erase(path.back());
  write_bytes(file, doc.dump(2) + "\n");
}

}  // namespace

TEST_CASE("crash before latest: a new train refuses any step_* checkpoint, --resume finds the newest verified one",
          "[reliability][resume]") {
  FinishedRun r("no_latest", 2, 2);
  std::string out;
  fs::remove(r.dir / "checkpoints" / "latest");  // killed while step 2 was being verified
  const std::string checkpoint = read_bytes(step_dir(r.dir, 2) / "model.safetensors");
  // Before: a new train trained over step_00000002 and exited 0.
  CHECK(run(tiny_train_args(r.shard, r.dir.string(), 2, 2), &out, r.tmp.file("t2.log")) == 1);
  require_all(out, {"step_00000002", "--resume"});
  CHECK(read_bytes(step_dir(r.dir, 2) / "model.safetensors") == checkpoint);
  // Before: "neither a checkpoint directory nor a run directory".
  REQUIRE(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string(), "--set", "train.steps=4"}, &out) == 0);
  require_all(out, {"latest is missing", "step_00000002"});
  CHECK(metrics_of(r.dir).size() == 4);
  CHECK(read_bytes(r.dir / "checkpoints" / "latest") == "step_00000004\n");
}

TEST_CASE("crash before latest: --resume RUN continues from a checkpoint newer than latest, not a refusal to rewind",
          "[reliability][resume]") {
  FinishedRun r("behind_latest", 4, 2);
  std::string out;
  write_bytes(r.dir / "checkpoints" / "latest", "step_00000002\n");  // killed after step_4's rename, before latest
  // Before: "has a newer checkpoint (step_00000004 ...); resuming step 2 there would rewind the run".
  REQUIRE(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string(), "--set", "train.steps=6"}, &out) == 0);
  require_all(out, {"names step_00000002", step_dir(r.dir, 4).string()});
  CHECK(metrics_of(r.dir).size() == 6);
  CHECK(read_bytes(r.dir / "checkpoints" / "latest") == "step_00000006\n");
  // A checkpoint named explicitly still refuses to rewind past the newer one.
  CHECK(kdtrain_cli(r.tmp, {"train", "--resume", step_dir(r.dir, 4).string()}, &out) == 1);
  require_all(out, {"step_00000006", "--rewind"});
}

TEST_CASE("crash before latest: verify RUN and eval RUN take what --resume RUN continues from, without latest or behind it",
          "[reliability][resume]") {
  FinishedRun r("verify_head", 4, 2);
  std::string out;
  auto verify = [&] { return kdtrain_cli(r.tmp, {"verify", r.dir.string()}, &out); };
  auto resumes = [&](int step) { return "resume: " + step_dir(r.dir, step).string(); };
  // eval (as analyze, dump and export, which resolve a run the same way) prints the checkpoint it read.
  auto eval = [&] {
    return kdtrain_cli(r.tmp, {"eval", "--checkpoint", r.dir.string(), "--data", r.shard, "--max-windows", "1"}, &out);
  };
  auto evaluates = [&](int step) { return "eval " + step_dir(r.dir, step).string() + ":"; };
  // Killed after step 4's rename, before latest moved: --resume RUN takes step 4, and verify says so.
  write_bytes(r.dir / "checkpoints" / "latest", "step_00000002\n");
  // Before: "latest: .../step_00000002", as if a resume continued from there.
  CHECK(verify() == 0);
  require_all(out, {"names step_00000002", resumes(4)});
  CHECK(eval() == 0);  // before: it scored step 2
  require_all(out, {"names step_00000002", evaluates(4)});
  // Killed before latest was first written: every checkpoint verifies, and the newest is what a resume takes.
  fs::remove(r.dir / "checkpoints" / "latest");
  // Before: exit 1, "0 of 2 checkpoints failed verification and `latest` names no good checkpoint".
  CHECK(verify() == 0);
  require_all(out, {"latest is missing", resumes(4)});
  CHECK(eval() == 0);  // before: "neither a model checkpoint ... nor a run directory (checkpoints/latest)"
  require_all(out, {"latest is missing", evaluates(4)});
  // The newest checkpoint damaged: verify fails naming it, and names the older one --resume RUN takes instead.
  const fs::path weights = step_dir(r.dir, 4) / "model.safetensors";
  std::string bytes = read_bytes(weights);
  bytes[bytes.size() / 2] ^= 0x40;
  write_bytes(weights, bytes);
  CHECK(verify() == 1);
  require_all(out, {"FAIL  " + step_dir(r.dir, 4).string(), resumes(2)});
  kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string()}, &out);  // its exit is --resume's business, tested above
  require_all(out, {"resuming " + step_dir(r.dir, 2).string()});
}

TEST_CASE("crash before latest: latest naming a vanished checkpoint is named, and --resume CKPT --rewind recovers",
          "[reliability][resume]") {
  FinishedRun r("vanished_latest", 4, 2);
  std::string out;
  fs::remove_all(step_dir(r.dir, 4));
  CHECK(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string()}, &out) == 1);
  require_all(out, {"step_00000004", "no longer exists", step_dir(r.dir, 2).string(), "--rewind"});
  // Before: every resume failed reading `latest`, --rewind included.
  REQUIRE(kdtrain_cli(r.tmp, {"train", "--resume", step_dir(r.dir, 2).string(), "--rewind"}, &out) == 0);
  CHECK(fs::exists(step_dir(r.dir, 4) / "trainer_state.json"));
  CHECK(kdtrain_cli(r.tmp, {"verify", r.dir.string()}, &out) == 0);
}

TEST_CASE("resume: a change that cannot change the trajectory is accepted", "[reliability][resume]") {
  FinishedRun r("inert_change", 2, 2);
  std::string out;
  // Before: refused as a trajectory change, though recomputation is bit-identical by design.
  CHECK(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string(), "--set", "train.steps=3", "--set", "train.recompute=mlp",
                  "--set", "train.recompute_layers=1", "--set", "attention.alpha_momentum=0.5"}, &out) == 0);
  // A key that does change it is still refused, naming it.
  CHECK(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string(), "--set", "train.steps=4", "--set", "optimizer.lr=0.5"},
            &out) == 1);
  require_all(out, {"optimizer.lr", "--allow-config-change"});
}

TEST_CASE("resume: the documented remedy for an affine checkpoint older than affine_bias_divisor works as written",
          "[reliability][resume]") {
  FinishedRun r("old_affine", 2, 2, {"--attention", "affine"});
  std::string out;
  // As a kdtrain from before the key wrote it: no affine_bias_divisor anywhere (it divided by the visible keys).
  const fs::path ckpt = step_dir(r.dir, 2);
  erase_key(ckpt / "config.json", {"affine_bias_divisor"});
  erase_key(ckpt / "run_config.json", {"attention", "affine_bias_divisor"});
  erase_key(r.dir / "config.json", {"attention", "affine_bias_divisor"});
  io::write_checksums(ckpt.string());
  CHECK(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string(), "--set", "train.steps=3"}, &out) == 1);
  require_all(out, {"affine_bias_divisor", "visible"});
  // Before: refused unless --allow-config-change was given too.
  CHECK(kdtrain_cli(r.tmp, {"train", "--resume", r.dir.string(), "--set", "train.steps=3", "--set",
                  "attention.affine_bias_divisor=visible"}, &out) == 0);
  CHECK(metrics_of(r.dir).size() == 3);
}

TEST_CASE("signals: SIGTERM during export removes what it staged",
          "[reliability][signals]") {
  TempDir tmp("interrupt");
  std::string out;
  // A teacher large enough that the work takes a while on any machine.
  const fs::path model = tmp.path / "model";
  REQUIRE(kdtrain_cli(tmp, {"init", "--preset", "tiny-llama", "--set", "model.hidden_size=512", "--set",
                    "model.intermediate_size=1536", "--set", "model.num_hidden_layers=6", "--set",
                    "model.vocab_size=32000", "--out", model.string()}, &out) == 0);
  const std::string shard = text_shard(tmp.path, "train.bin", 200000, 3);
  struct Case {
    std::vector<std::string> args;
    fs::path out;
    int signal;
  };
  const std::vector<Case> cases = {
      {{"export", "--checkpoint", model.string(), "--dtype", "bf16", "--out", tmp.file("hf")}, tmp.path / "hf",
       SIGTERM}};
  for (const Case& c : cases) {
    INFO(c.args[0]);
    std::vector<std::string> args = c.args;
    args.insert(args.begin(), KDTRAIN_BINARY);
    const Process p = spawn(args, tmp.file(c.args[0] + ".log"));
    // Interrupt once it has staged something (the staging name is "<out>.tmp.<pid>" or inside <out>).
    const fs::path staged_dir = tmp.path / (c.out.filename().string() + ".tmp." + std::to_string(p.pid));
    for (int i = 0; i < 20000 && !has_staging(c.out) && !fs::exists(staged_dir); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    kill(p.pid, c.signal);
    const int code = wait_for(p);
    if (code == 0) {
      WARN("SKIPPED: " << c.args[0] << " finished before the signal reached it");
      continue;
    }
    // Before: killed at once, leaving the staging file or directory behind.
    CHECK(code == 128 + c.signal);
    CHECK_FALSE(has_staging(c.out));
    CHECK_FALSE(fs::exists(staged_dir));
  }
}
