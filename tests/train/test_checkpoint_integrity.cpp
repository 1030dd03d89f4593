// Checkpoint integrity. The red team's attacks, each
// of which loaded silently before: a flipped exponent bit in model.safetensors
// (eval printed a perplexity of inf, a resume trained on it), a flipped
// optimizer byte, an optimizer file from another step, trainer_state.json with
// "step": -1 (a NaN checkpoint became `latest`, metrics.jsonl cut to one line),
// a changed global_batch, `latest` naming another run's checkpoint, a changed
// teacher. Each is now refused, naming the file, and leaves the run untouched.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>

#include "io/checksums.h"
#include "io/safetensors.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

const char* kStep4 = "step_00000004";
const char* kStep8 = "step_00000008";

// A finished run (8 steps, checkpoints at 4 and 8), trained once per test
// binary; each test works on its own copy.
struct TemplateRun {
  TempDir tmp{"integrity_template"};
  std::string shard = text_shard(tmp.path, "train.bin", 20000, 11);
  fs::path dir = tmp.path / "R";
  TemplateRun() {
    std::string out;
    REQUIRE(run(tiny_train_args(shard, dir.string(), 8, 4), &out, (tmp.path / "init.log").string()) == 0);
  }
};

const TemplateRun& template_run() {
  static const TemplateRun run;
  return run;
}

struct Run {
  TempDir tmp{"integrity"};
  std::string shard = template_run().shard;
  fs::path dir = tmp.path / "R";
  Run() { fs::copy(template_run().dir, dir, fs::copy_options::recursive); }
  fs::path checkpoint(const char* name) const { return dir / "checkpoints" / name; }
  // Runs kdtrain with `args`; returns the exit code, output in *out.
  int kdtrain(std::vector<std::string> args, std::string* out) const {
    args.insert(args.begin(), KDTRAIN_BINARY);
    return run(args, out, (tmp.path / "cmd.log").string());
  }
};

// Offset of the data buffer (after the header) of a safetensors file.
size_t data_start(const std::string& bytes) {
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<uint8_t>(bytes[i]);
  return 8 + header;
}

// XORs `mask` into byte `offset` of the data buffer of a safetensors file.
void flip_data_byte(const fs::path& file, size_t offset, uint8_t mask) {
  std::string bytes = read_bytes(file);
  const size_t at = data_start(bytes) + offset;
  bytes[at] = static_cast<char>(bytes[at] ^ mask);
  write_bytes(file, bytes);
}

// Overwrites the first fp32 value of the data buffer of a safetensors file.
void poke_first_float(const fs::path& file, float value) {
  std::string bytes = read_bytes(file);
  std::memcpy(&bytes[data_start(bytes)], &value, 4);
  write_bytes(file, bytes);
}

void edit_state(const fs::path& checkpoint, const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json state = nlohmann::json::parse(read_bytes(checkpoint / "trainer_state.json"));
  change(state);
  write_bytes(checkpoint / "trainer_state.json", state.dump(2));
  io::write_checksums(checkpoint.string());  // so what is tested is the range check, not the checksum
}

}  // namespace

TEST_CASE("integrity: every checkpoint lists checksums of all its files, as xxh64sum computes them", "[reliability][integrity]") {
  Run r;
  for (const char* name : {kStep4, kStep8}) {
    const fs::path ckpt = r.checkpoint(name);
    const nlohmann::json manifest = nlohmann::json::parse(read_bytes(ckpt / "checksums.json"));
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(ckpt)) {
      if (e.path().filename() == "checksums.json") continue;
      const auto& entry = manifest["files"][e.path().filename().string()];
      REQUIRE(entry.is_object());
      CHECK(entry["bytes"].get<uint64_t>() == fs::file_size(e.path()));
      CHECK(entry["xxh64"] == io::hex64(io::xxh64_file(e.path().string())));
      ++files;
    }
    CHECK(files == manifest["files"].size());
    CHECK(files >= 5);  // config, model, optimizer, trainer state, run config
  }
  // An independent implementation agrees (where the xxhash tool is installed).
  const fs::path model = r.checkpoint(kStep8) / "model.safetensors";
  std::string out;
  if (fs::exists("/usr/bin/xxh64sum") && run({"/usr/bin/xxh64sum", model.string()}, &out, (r.tmp.path / "x").string()) == 0)
    CHECK(out.find(io::hex64(io::xxh64_file(model.string())) + "  " + model.string()) != std::string::npos);
  else
    WARN("xxh64sum not installed: cross-check skipped");
  CHECK(r.kdtrain({"verify", r.dir.string()}, &out) == 0);
  require_all(out, {"ok", kStep4, kStep8, "latest"});
}

TEST_CASE("integrity: corrupt or swapped files are refused by resume, eval, info and verify", "[reliability][integrity]") {
  Run r;
  const fs::path ckpt = r.checkpoint(kStep8);
  std::string file;
  SECTION("a flipped exponent bit in model.safetensors") {
    flip_data_byte(ckpt / "model.safetensors", 3, 0x40);
    file = "model.safetensors";
  }
  SECTION("a flipped optimizer byte") {
    flip_data_byte(ckpt / "optimizer.safetensors", 1001, 0x01);
    file = "optimizer.safetensors";
  }
  SECTION("optimizer.safetensors copied from another step") {
    fs::copy_file(r.checkpoint(kStep4) / "optimizer.safetensors", ckpt / "optimizer.safetensors",
                  fs::copy_options::overwrite_existing);
    file = "optimizer.safetensors";
  }
  SECTION("trainer_state.json edited") {
    write_bytes(ckpt / "trainer_state.json",
                read_bytes(ckpt / "trainer_state.json").replace(0, 1, "{ "));
    file = "trainer_state.json";
  }
  const std::string metrics_before = read_bytes(r.dir / "metrics.jsonl");
  std::string out;
  CHECK(r.kdtrain({"train", "--resume", r.dir.string()}, &out) == 1);
  require_all(out, {(ckpt / file).string()});
  CHECK((out.find("checksum") != std::string::npos || out.find("bytes but") != std::string::npos));
  CHECK(read_bytes(r.dir / "metrics.jsonl") == metrics_before);
  CHECK(read_bytes(r.dir / "checkpoints" / "latest") == std::string(kStep8) + "\n");
  CHECK(r.kdtrain({"verify", ckpt.string()}, &out) == 1);
  require_all(out, {(ckpt / file).string()});
  CHECK(r.kdtrain({"verify", r.dir.string()}, &out) == 1);
  require_all(out, {"FAIL", kStep8});
  if (file == "model.safetensors") {
    CHECK(r.kdtrain({"eval", "--checkpoint", ckpt.string(), "--data", r.shard, "--seq-len", "32", "--max-windows", "4"},
                    &out) == 1);
    require_all(out, {(ckpt / file).string(), "checksum"});
    CHECK(r.kdtrain({"info", "--checkpoint", ckpt.string()}, &out) == 1);
    require_all(out, {(ckpt / file).string(), "checksum"});
  }
}

TEST_CASE("integrity: non-finite tensors are refused at load even with matching checksums", "[reliability][integrity]") {
  Run r;
  const fs::path ckpt = r.checkpoint(kStep8);
  std::string tensor_file;
  SECTION("a NaN in the weights") {
    poke_first_float(ckpt / "model.safetensors", std::numeric_limits<float>::quiet_NaN());
    tensor_file = "model.safetensors";
  }
  SECTION("an infinity in the moments") {
    poke_first_float(ckpt / "optimizer.safetensors", std::numeric_limits<float>::infinity());
    tensor_file = "optimizer.safetensors";
  }
  io::write_checksums(ckpt.string());
  std::string out;
  CHECK(r.kdtrain({"train", "--resume", ckpt.string(), "--run-dir", (r.tmp.path / "branch").string()}, &out) == 1);
  require_all(out, {(ckpt / tensor_file).string(), "non-finite"});
  CHECK(r.kdtrain({"verify", ckpt.string()}, &out) == 1);
  require_all(out, {"non-finite"});
}

TEST_CASE("trainer_state.json: every field is range-checked; nothing moves when one is off", "[reliability][state]") {
  Run r;
  const fs::path ckpt = r.checkpoint(kStep8);
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> change;
    const char* must_name;
  };
  const std::vector<Case> cases = {
      {"step -1", [](nlohmann::json& s) { s["step"] = -1; }, "'step' is -1"},
      {"step 0", [](nlohmann::json& s) { s["step"] = 0; }, "'step' is 0"},
      {"step not its directory's", [](nlohmann::json& s) { s["step"] = 7; }, "does not match"},
      {"step a string", [](nlohmann::json& s) { s["step"] = "8"; }, "'step' must be an integer"},
      {"more skipped than steps", [](nlohmann::json& s) { s["skipped_steps"] = 9; }, "'skipped_steps'"},
      {"fingerprint not a number", [](nlohmann::json& s) { s["data_fingerprint"] = "abc"; }, "'data_fingerprint'"},
      {"sampler ahead of the step", [](nlohmann::json& s) { s["sampler"]["index"] = 40; }, "sampler"},
      {"unknown key", [](nlohmann::json& s) { s["stpe"] = 8; }, "unknown key 'stpe'"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      edit_state(ckpt, c.change);
      const std::string metrics_before = read_bytes(r.dir / "metrics.jsonl");
      std::string out;
      CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "train.steps=8"}, &out) == 1);
      require_all(out, {"trainer_state.json", c.must_name});
      // Before: "step": -1 wrote a NaN checkpoint step_00000000, moved `latest` onto it
      // and cut metrics.jsonl to one line.
      CHECK(read_bytes(r.dir / "checkpoints" / "latest") == std::string(kStep8) + "\n");
      CHECK(read_bytes(r.dir / "metrics.jsonl") == metrics_before);
      CHECK_FALSE(fs::exists(r.dir / "checkpoints" / "step_00000000"));
    }
  }
}

TEST_CASE("resume: a trajectory-changing config is refused unless allowed", "[reliability][state]") {
  Run r;
  std::string out;
  SECTION("global_batch") {
    CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "train.global_batch=8", "--set",
                     "train.steps=10"}, &out) == 1);
    require_all(out, {"train.global_batch: 4 -> 8", "--allow-config-change"});
    CHECK(out.find("train.steps") == std::string::npos);  // extending a run needs no flag
    CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "train.global_batch=8", "--set",
                     "train.steps=10", "--allow-config-change"}, &out) == 0);
    CHECK(metrics_of(r.dir).size() == 10);
  }
  SECTION("learning rate") {
    CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "optimizer.lr=0.01"}, &out) == 1);
    require_all(out, {"optimizer.lr"});
  }
  SECTION("operational keys may change") {
    CHECK(r.kdtrain({"train", "--resume", (r.checkpoint(kStep4)).string(), "--run-dir",
                     (r.tmp.path / "branch").string(), "--set", "checkpoint.interval=1", "--set", "log.interval=2",
                     "--set", "train.threads=1"}, &out) == 0);
    INFO(out);
  }
}

TEST_CASE("resume: latest only moves forward; rewinding a run needs --rewind", "[reliability][state]") {
  Run r;
  std::string out;
  const std::string metrics_before = read_bytes(r.dir / "metrics.jsonl");
  CHECK(r.kdtrain({"train", "--resume", r.checkpoint(kStep4).string()}, &out) == 1);
  require_all(out, {"newer checkpoint", kStep8, "--rewind"});
  CHECK(read_bytes(r.dir / "checkpoints" / "latest") == std::string(kStep8) + "\n");
  CHECK(read_bytes(r.dir / "metrics.jsonl") == metrics_before);
  // With --rewind: steps 5..8 are redone, ending exactly as before.
  CHECK(r.kdtrain({"train", "--resume", r.checkpoint(kStep4).string(), "--rewind"}, &out) == 0);
  CHECK(read_bytes(r.dir / "checkpoints" / "latest") == std::string(kStep8) + "\n");
  const auto rows = metrics_of(r.dir);
  REQUIRE(rows.size() == 8);
  size_t line = 0;
  std::istringstream old_lines(metrics_before);
  std::string old;
  while (std::getline(old_lines, old)) {
    const auto row = nlohmann::json::parse(old);
    CHECK(rows[line]["loss"] == row["loss"]);
    ++line;
  }
}

TEST_CASE("metrics.jsonl: a resume drops only the records after its step", "[reliability][state]") {
  Run r;
  // A stray line in the middle and a torn line at the end (a kill mid-write).
  std::string text = read_bytes(r.dir / "metrics.jsonl");
  const size_t third = text.find('\n', text.find('\n', text.find('\n') + 1) + 1) + 1;
  text.insert(third, "not a record\n");
  text += "{\"step\": 9, \"lo";
  write_bytes(r.dir / "metrics.jsonl", text);
  std::string out;
  CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "train.steps=10", "--allow-config-change"}, &out) == 0);
  const std::string after = read_bytes(r.dir / "metrics.jsonl");
  CHECK(after.find("not a record\n") == third);
  CHECK(after.find("\"lo\n") == std::string::npos);
  CHECK(after.substr(0, third) == text.substr(0, third));
}

TEST_CASE("latest: must name a checkpoint inside its run directory", "[reliability][state]") {
  Run r;
  // Another run with the same config: before, a resume silently continued it.
  const fs::path other = r.tmp.path / "other";
  fs::copy(template_run().dir, other, fs::copy_options::recursive);
  std::string out;
  const std::vector<std::string> targets = {"../../other/checkpoints/step_00000008",
                                            (other / "checkpoints" / kStep8).string(),
                                            "step_00000008/../step_00000004", "."};
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string& target = targets[i];
    DYNAMIC_SECTION("target " << i) {  // a stable name: the absolute path changes with each pass
      write_bytes(r.dir / "checkpoints" / "latest", target + "\n");
      CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "train.steps=10", "--allow-config-change"},
                      &out) == 1);
      require_all(out, {(r.dir / "checkpoints" / "latest").string(), "not a checkpoint of this run"});
      CHECK(metrics_of(other).size() == 8);
    }
  }
}

TEST_CASE("staging leftovers: *.tmp.<pid> and *.old.<pid> are never checkpoints and are removed", "[reliability][state]") {
  Run r;
  const fs::path root = r.dir / "checkpoints";
  fs::copy(root / kStep8, root / "step_00000009.old.12345", fs::copy_options::recursive);
  fs::copy(root / kStep8, root / "step_00000010.tmp.12345", fs::copy_options::recursive);
  std::string out;
  CHECK(r.kdtrain({"train", "--resume", r.dir.string(), "--set", "train.steps=9", "--allow-config-change"}, &out) == 0);
  INFO(out);
  CHECK_FALSE(fs::exists(root / "step_00000009.old.12345"));
  CHECK_FALSE(fs::exists(root / "step_00000010.tmp.12345"));
  CHECK(read_bytes(root / "latest") == "step_00000009\n");
  CHECK(r.kdtrain({"verify", r.dir.string()}, &out) == 0);
}

TEST_CASE("teacher: a resume refuses a teacher whose weights changed", "[reliability][state][kd]") {
  TempDir tmp("teacher_fp");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 12);
  const std::string teacher = (tmp.path / "teacher").string();
  std::string out;
  REQUIRE(run({KDTRAIN_BINARY, "init", "--preset", "tiny-qwen", "--seed", "1", "--out", teacher}, &out,
              (tmp.path / "i.log").string()) == 0);
  const fs::path run_dir = tmp.path / "R";
  REQUIRE(run(plus(tiny_train_args(shard, run_dir.string(), 4, 2), {"--set", "kd.teacher=" + teacher}), &out,
              (tmp.path / "t.log").string()) == 0);
  // Same path, other weights.
  REQUIRE(run({KDTRAIN_BINARY, "init", "--preset", "tiny-qwen", "--seed", "2", "--out", teacher, "--force"}, &out,
              (tmp.path / "i.log").string()) == 0);
  CHECK(run({KDTRAIN_BINARY, "train", "--resume", (run_dir / "checkpoints" / "step_00000002").string(), "--run-dir",
             (tmp.path / "B").string()}, &out, (tmp.path / "r.log").string()) == 1);
  require_all(out, {"the teacher (fingerprint model:", "--allow-config-change"});
  CHECK(run({KDTRAIN_BINARY, "train", "--resume", (run_dir / "checkpoints" / "step_00000002").string(), "--run-dir",
             (tmp.path / "B").string(), "--allow-config-change"}, &out, (tmp.path / "r.log").string()) == 0);
}
