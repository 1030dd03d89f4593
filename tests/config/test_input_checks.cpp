// Hostile or mistaken inputs: repeated JSON keys,
// shard indexes naming paths, FIFOs and devices as shards, and the messages for
// a directory given as a file, a missing data directory and a run directory
// given as a checkpoint. Each case is one a red-team pass found: before the fix
// the run hung, trained on the wrong value or printed a misleading message.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"
#include "core/json_parse.h"
#include "io/safetensors.h"
#include "model/param_layout.h"
#include "support/model_fixtures.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

TEST_CASE("json: a repeated key is refused with its key path and both lines", "[reliability][json]") {
  SECTION("a whole section appended twice") {
    const std::string text = "{\n  \"train\": {\"steps\": 3},\n  \"model\": {},\n  \"train\": {\"steps\": 5}\n}\n";
    require_all(error_message([&] { parse_json(text, "c.json"); }),
                {"c.json", "duplicate key 'train'", "line 4", "first at line 2"});
  }
  SECTION("a key twice inside a section, nested in a list") {
    const std::string text = R"({"a": [{"x": 1}, {"b": {"steps": 1,
"steps": 2}}]})";
    require_all(error_message([&] { parse_json(text, "s"); }),
                {"duplicate key 'a[1].b.steps'", "line 2", "first at line 1"});
  }
  SECTION("the same key in different objects is fine; values and order survive") {
    const nlohmann::json doc = parse_json(R"({"a": {"k": 1}, "b": {"k": [1, {"k": 2}]}, "c": 1.5})", "s");
    CHECK(doc["b"]["k"][1]["k"] == 2);
    CHECK(doc["c"] == 1.5);
    CHECK(doc == nlohmann::json::parse(R"({"a": {"k": 1}, "b": {"k": [1, {"k": 2}]}, "c": 1.5})"));
  }
  SECTION("syntax errors name line and column; absurd nesting is refused") {
    require_all(error_message([&] { parse_json("{\n\"a\": tru}", "s"); }), {"s: invalid JSON", "line 2"});
    require_all(error_message([&] { parse_json(std::string(100000, '['), "deep"); }), {"deep", "nesting"});
  }
}

TEST_CASE("json: duplicate keys are refused in every file kdtrain reads", "[reliability][json]") {
  TempDir tmp("dupkeys");
  SECTION("config file: the later section would silently replace the earlier") {
    const fs::path config = tmp.path / "c.json";
    write_bytes(config, "{\"model\": {\"preset\": \"tiny-llama\"},\n \"train\": {\"steps\": 3},\n \"train\": {\"steps\": 5}}\n");
    require_all(error_message([&] { load_config(config.string(), "", "", {}); }),
                {config.string(), "duplicate key 'train'", "line 3"});
    write_bytes(config, "{\"model\": {\"preset\": \"tiny-llama\"},\n \"train\": {\"steps\": 3,\n \"steps\": 5}}\n");
    require_all(error_message([&] { load_config(config.string(), "", "", {}); }),
                {config.string(), "duplicate key 'train.steps'", "line 3"});
  }
  SECTION("--set with an object value") {
    require_all(error_message([&] {
                  load_config("", "tiny-llama", "", {R"(model.rope_scaling={"type": "default", "type": "llama3"})"});
                }),
                {"--set", "duplicate key 'type'"});
  }
  SECTION("safetensors header naming one tensor twice") {
    const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes += header + std::string(4, '\0');
    const fs::path file = tmp.path / "dup.safetensors";
    write_bytes(file, bytes);
    require_all(error_message([&] { io::SafetensorsFile f(file.string()); }),
                {file.string(), "duplicate key 'w'"});
  }
  SECTION("through the binary: train --config with a repeated section exits 1 before writing") {
    const fs::path config = tmp.path / "twice.json";
    write_bytes(config, "{\"train\": {\"steps\": 3},\n\"train\": {\"steps\": 5}}\n");
    std::string out;
    const fs::path run_dir = tmp.path / "run";
    CHECK(run({KDTRAIN_BINARY, "train", "--config", config.string(), "--preset", "tiny-llama", "--run-dir",
               run_dir.string()}, &out, (tmp.path / "log").string()) == 1);
    require_all(out, {"twice.json", "duplicate key 'train'", "line 2"});
    CHECK_FALSE(fs::exists(run_dir));
  }
}

namespace {

// A kdtrain model checkpoint with sharded weights: model.safetensors.index.json
// naming `shard_name` for every tensor, the tensors in shard.safetensors.
void write_sharded(const fs::path& dir, const std::string& shard_name) {
  const ModelConfig m = llama_like();
  const AttentionConfig a;
  const ParamLayout layout = make_param_layout(m, a);
  std::vector<float> arena(static_cast<size_t>(layout.total), 0.5f);
  io::write_model_checkpoint(dir.string(), m, a, layout, arena.data());
  fs::rename(dir / "model.safetensors", dir / "shard.safetensors");
  fs::remove(dir / "checksums.json");  // as a Hugging Face sharded checkpoint has none
  nlohmann::json map;
  for (const ParamSpec& s : layout.specs) map[s.name] = shard_name;
  write_bytes(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
}

}  // namespace

TEST_CASE("hf index: a shard name that is a path is refused, naming the index", "[reliability][checkpoint]") {
  TempDir tmp("index");
  const fs::path dir = tmp.path / "ckpt";
  const ParamLayout layout = make_param_layout(llama_like(), AttentionConfig{});
  std::vector<float> arena(static_cast<size_t>(layout.total));
  for (const std::string bad : {"../../../etc/passwd", "/etc/passwd", "sub/shard.safetensors", ".."}) {
    DYNAMIC_SECTION(bad) {
      write_sharded(dir, bad);
      require_all(error_message([&] { io::load_model_weights(dir.string(), layout, arena.data()); }),
                  {"model.safetensors.index.json", bad, "not a file name"});
      // Through the binary (before: `info` opened and parsed /etc/passwd as a shard).
      std::string out;
      CHECK(run({KDTRAIN_BINARY, "info", "--checkpoint", dir.string()}, &out, (tmp.path / "log").string()) == 1);
      require_all(out, {"model.safetensors.index.json", "not a file name"});
    }
  }
  SECTION("a plain shard name still loads") {
    write_sharded(dir, "shard.safetensors");
    io::load_model_weights(dir.string(), layout, arena.data());
    CHECK(arena[0] == 0.5f);
  }
}

TEST_CASE("shards: a FIFO or a device is refused at once, not waited on", "[reliability][data]") {
  TempDir tmp("fifo");
  const fs::path fifo = tmp.path / "shard.bin";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  SECTION("FIFO (opening it for reading used to block forever)") {
    std::string out;
    const int code = run(tiny_train_args(fifo.string(), (tmp.path / "run").string()), &out,
                         (tmp.path / "log").string());  // run() kills after 120 s and returns -1
    CHECK(code == 1);
    require_all(out, {fifo.string(), "FIFO"});
    require_all(error_message([&] { io::MappedFile f(fifo.string()); }), {fifo.string(), "FIFO"});
  }
  SECTION("character device") {
    std::string out;
    CHECK(run(tiny_train_args("/dev/zero", (tmp.path / "run").string()), &out, (tmp.path / "log").string()) == 1);
    require_all(out, {"/dev/zero", "character device"});
  }
  SECTION("a directory given as the config is named as such") {
    std::string out;
    CHECK(run({KDTRAIN_BINARY, "train", "--config", tmp.path.string()}, &out, (tmp.path / "../log_dir").string()) == 1);
    require_all(out, {tmp.path.string(), "is a directory"});
    CHECK(out.find("unexpected end of input") == std::string::npos);
    fs::remove(tmp.path / "../log_dir");
  }
  SECTION("a FIFO given as the config is refused too") {
    std::string out;
    CHECK(run({KDTRAIN_BINARY, "train", "--config", fifo.string()}, &out, (tmp.path / "log").string()) == 1);
    require_all(out, {fifo.string(), "FIFO"});
  }
}

TEST_CASE("messages: a missing data directory and a run directory as a checkpoint", "[reliability][messages]") {
  TempDir tmp("messages");
  SECTION("a data directory that does not exist is named, not 'glob failed (read error)'") {
    std::string out;
    const std::string pattern = (tmp.path / "nowhere" / "*.bin").string();
    CHECK(run(tiny_train_args(pattern, (tmp.path / "run").string()), &out, (tmp.path / "log").string()) == 1);
    require_all(out, {(tmp.path / "nowhere").string(), "does not exist"});
    CHECK(out.find("glob failed") == std::string::npos);
  }
  SECTION("a run directory where a checkpoint is expected names the latest checkpoint") {
    // A run directory as the trainer leaves it: its resolved config and checkpoints/latest.
    const fs::path run_dir = tmp.path / "run";
    fs::create_directories(run_dir / "checkpoints" / "step_00000004");
    Config c;
    c.model = model_preset("tiny-llama");
    write_bytes(run_dir / "config.json", to_json(c).dump(2));
    write_bytes(run_dir / "checkpoints" / "latest", "step_00000004\n");
    const std::string expected = (run_dir / "checkpoints" / "step_00000004").string();
    std::string out;
    const std::string shard = text_shard(tmp.path, "train.bin", 5000, 3);
    CHECK(run(plus(tiny_train_args(shard, (tmp.path / "student").string()), {"--set", "kd.teacher=" + run_dir.string()}),
              &out, (tmp.path / "log").string()) == 1);
    require_all(out, {"training run directory", expected});
    CHECK(out.find("model_type") == std::string::npos);
    CHECK(run({KDTRAIN_BINARY, "info", "--checkpoint", run_dir.string()}, &out, (tmp.path / "log").string()) == 1);
    require_all(out, {"run directory", "not a model checkpoint"});
    CHECK(out.find("missing key 'model_type'") == std::string::npos);
  }
}
