// Sizes: absurd sizes are refused naming the key
// instead of wrapping the parameter count (a segfault before), out-of-memory
// errors name the keys that sized the buffer, everything a config can get
// wrong is refused before the run directory exists, and on_nonfinite=skip
// stops a run that skips step after step instead of exiting 0.
#include <catch2/catch.hpp>

#include <filesystem>

#include "config/config.h"
#include "config/limits.h"
#include "io/checkpoint_format.h"
#include "model/param_layout.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

TEST_CASE("limits: the red team's init with a 2.7e18 hidden size is refused, not a segfault", "[reliability][limits]") {
  TempDir tmp("init_overflow");
  std::string out;
  const fs::path dir = tmp.path / "x";
  const int code = run({KDTRAIN_BINARY, "init", "--preset", "tiny-llama", "--set",
                        "model.hidden_size=2689472386995866432", "--out", dir.string()},
                       &out, (tmp.path / "log").string());
  CHECK(code == 1);  // 139 (SIGSEGV) before
  require_all(out, {"model.hidden_size", "2689472386995866432", "limit"});
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("limits: every size key above its bound is refused naming the key", "[reliability][limits]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.hidden_size", "1000000"},
      {"model.intermediate_size", "100000000"},
      {"model.num_hidden_layers", "100000"},
      {"model.num_attention_heads", "4096"},
      {"model.num_key_value_heads", "4096"},
      {"model.head_dim", "65536"},
      {"model.vocab_size", "4294967296"},
      {"model.max_position_embeddings", "1099511627776"},
      {"train.seq_len", "2000000"},
      {"train.micro_batch", "2000000"},
      {"train.global_batch", "2000000"},
      {"train.threads", "1000000000"},
      {"train.steps", "9223372036854775807"},
      {"kd.chunk_tokens", "100000000"},
      {"kd.cache_verify_threads", "100000"},
  };
  for (const auto& [key, value] : cases) {
    DYNAMIC_SECTION(key) {
      require_all(error_message([&] { load_config("", "tiny-llama", "", {key + "=" + value}); }), {key, value});
    }
  }
  SECTION("tokens per micro-batch") {
    require_all(error_message([&] {
                  load_config("", "tiny-llama", "",
                              {"train.micro_batch=65536", "train.global_batch=65536", "train.seq_len=65536",
                               "model.max_position_embeddings=65536"});
                }),
                {"train.micro_batch x train.seq_len"});
  }
  SECTION("a Hugging Face config.json: the key as the file spells it, and the file") {
    TempDir tmp("hf_limits");
    Config c;
    c.model = model_preset("tiny-llama");
    nlohmann::json doc = io::hf_config_json(c.model, c.attention);
    doc["vocab_size"] = int64_t{1} << 40;
    write_bytes(tmp.path / "config.json", doc.dump());
    ModelConfig m;
    AttentionConfig a;
    require_all(error_message([&] { io::read_hf_config((tmp.path / "config.json").string(), &m, &a); }),
                {(tmp.path / "config.json").string(), "vocab_size", "1099511627776"});
  }
  SECTION("the parameter table itself refuses a wrapping count (defence in depth)") {
    ModelConfig m = model_preset("tiny-llama");
    m.hidden_size = int64_t{1} << 40;
    CHECK_THROWS_AS(make_param_layout(m, AttentionConfig{}), Error);
  }
}

TEST_CASE("limits: out of memory names the keys that sized the buffer", "[reliability][limits]") {
  // Within every per-key limit, but ~7e13 parameters: more than the address space.
  TempDir tmp("oom");
  std::string out;
  const int code = run({KDTRAIN_BINARY, "init", "--preset", "tiny-llama", "--set", "model.hidden_size=65536",
                        "--set", "model.intermediate_size=262144", "--set", "model.num_hidden_layers=1024",
                        "--set", "model.num_attention_heads=1024", "--set", "model.num_key_value_heads=1024",
                        "--set", "model.head_dim=64", "--out", (tmp.path / "x").string()},
                       &out, (tmp.path / "log").string());
  CHECK(code == 1);
  require_all(out, {"cannot allocate", "parameter", "model.hidden_size=65536", "model.num_hidden_layers=1024",
                    "model.intermediate_size=262144"});
}

TEST_CASE("validate before writing: what a config gets wrong is refused before the run directory exists", "[reliability][limits]") {
  TempDir tmp("prevalidate");
  const std::string shard = text_shard(tmp.path, "train.bin", 5000, 1);
  const fs::path run_dir = tmp.path / "run";
  struct Case {
    std::string set, must_name;
  };
  for (const Case& c : {Case{"model.max_position_embeddings=16", "model.max_position_embeddings"},
                        Case{"train.threads=1000000000", "train.threads"}}) {
    DYNAMIC_SECTION(c.set) {
      std::string out;
      const int code = run(plus(tiny_train_args(shard, run_dir.string()), {"--set", c.set}), &out,
                           (tmp.path / "log").string());
      CHECK(code == 1);
      require_all(out, {c.must_name});
      CHECK_FALSE(fs::exists(run_dir));
    }
  }
}

TEST_CASE("on_nonfinite=skip: a run that skips step after step stops with an error", "[reliability][nonfinite]") {
  TempDir tmp("skiplimit");
  const std::string shard = text_shard(tmp.path, "train.bin", 20000, 2);
  // 30 steps in tmp/<name>, every one non-finite after the first update; the exit code.
  auto diverge = [&](const std::string& name, const std::vector<std::string>& more, std::string* out) {
    const std::vector<std::string> skip = plus(diverging_run(), {"--set", "train.on_nonfinite=skip"});
    return run(plus(plus(tiny_train_args(shard, tmp.file(name), 30, 5), skip), more), out, tmp.file(name + ".log"));
  };
  std::string out;
  SECTION("the default limit") {
    CHECK(diverge("default", {}, &out) == 1);  // 0 before: 29 of 30 steps skipped and "success"
    require_all(out, {"10 steps in a row", "train.max_consecutive_skips"});
  }
  SECTION("a configured limit") {
    CHECK(diverge("three", {"--set", "train.max_consecutive_skips=3"}, &out) == 1);
    require_all(out, {"3 steps in a row", "train.max_consecutive_skips = 3"});
    const auto rows = metrics_of(tmp.path / "three");
    REQUIRE(rows.size() >= 3);
    for (size_t i = rows.size() - 2; i < rows.size(); ++i) CHECK_FALSE(rows[i]["applied"].get<bool>());
  }
}
