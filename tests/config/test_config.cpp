// Precedence (CLI > file > preset > defaults), overrides, and the to_json round trip.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "config/config.h"
#include "core/error.h"

using namespace kdtrain;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
std::string write_config(const std::string& name, const std::string& text) {
  fs::path dir = fs::temp_directory_path() / ("kdtrain_test_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}
}  // namespace

TEST_CASE("config: defaults", "[config]") {
  Config c = load_config("", "tiny-llama", "", {});
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.optimizer.beta1 == 0.9);
  CHECK(c.optimizer.beta2 == 0.95);
  CHECK(c.optimizer.eps == 1e-8);
  CHECK(c.optimizer.weight_decay == 0.1);
  CHECK(c.optimizer.grad_clip == 1.0);
  CHECK(c.schedule.kind == ScheduleKind::wsd);
  CHECK(c.schedule.warmup == 100);
  CHECK(c.attention.variant == AttentionVariant::baseline);
  CHECK(c.attention.alpha_momentum == 0.9);
  CHECK(c.kd.loss == KdLoss::forward_kl);
  CHECK(c.model.preset == "tiny-llama");
}

TEST_CASE("config: precedence is CLI > file > preset > defaults", "[config]") {
  const std::string path = write_config("precedence.json", R"({
    "model": {"preset": "tiny-qwen", "max_position_embeddings": 1024},
    "attention": {"variant": "sink"},
    "optimizer": {"lr": 5e-4, "beta2": 0.99},
    "schedule": {"warmup": 3},
    "train": {"steps": 20}
  })");

  SECTION("file over defaults and over its own preset") {
    Config c = load_config(path, "", "", {});
    CHECK(c.model.preset == "tiny-qwen");
    CHECK(c.model.hidden_size == 48);
    CHECK(c.model.max_position_embeddings == 1024);  // file key over preset value
    CHECK(c.optimizer.lr == 5e-4);
    CHECK(c.optimizer.beta1 == 0.9);  // untouched default
    CHECK(c.attention.variant == AttentionVariant::sink);
  }
  SECTION("--preset over the file's model.preset; the file's other model keys still apply") {
    Config c = load_config(path, "tiny-llama", "", {});
    CHECK(c.model.preset == "tiny-llama");
    CHECK(c.model.hidden_size == 64);
    CHECK(c.model.max_position_embeddings == 1024);
  }
  SECTION("--attention over the file") {
    Config c = load_config(path, "", "affine", {});
    CHECK(c.attention.variant == AttentionVariant::affine);
  }
  SECTION("--set over --attention and the file") {
    Config c = load_config(path, "", "affine", {"attention.variant=gated", "optimizer.lr=2e-4"});
    CHECK(c.attention.variant == AttentionVariant::gated);
    CHECK(c.optimizer.lr == 2e-4);
    CHECK(c.optimizer.beta2 == 0.99);
  }
  SECTION("later --set wins") {
    Config c = load_config(path, "", "", {"optimizer.lr=0.1", "optimizer.lr=0.2"});
    CHECK(c.optimizer.lr == 0.2);
  }
}

TEST_CASE("config: preset key order inside the file does not matter", "[config]") {
  // hidden_size is written before preset; the preset still applies first.
  const std::string path =
      write_config("order.json", R"({"model": {"hidden_size": 96, "preset": "tiny-qwen"}})");
  Config c = load_config(path, "", "", {});
  CHECK(c.model.hidden_size == 96);
  CHECK(c.model.intermediate_size == 128);
}

TEST_CASE("config: --set values", "[config]") {
  Config c;
  c.model = model_preset("tiny-llama");
  apply_override(c, "model.rope_scaling.factor=16");
  CHECK(c.model.rope_scaling.factor == 16.0);
  apply_override(c, "kd.teacher=/runs/teacher/step_100");  // not JSON: taken as a string
  CHECK(c.kd.teacher == "/runs/teacher/step_100");
  apply_override(c, "kd.teacher=\"quoted\"");
  CHECK(c.kd.teacher == "quoted");
  apply_override(c, "model.tie_word_embeddings=false");
  CHECK_FALSE(c.model.tie_word_embeddings);
  apply_override(c, "data.train=[\"a.bin\",\"b.bin\"]");
  CHECK(c.data.train == std::vector<std::string>{"a.bin", "b.bin"});
  apply_override(c, "data.val=v.bin");
  CHECK(c.data.val == std::vector<std::string>{"v.bin"});
  apply_override(c, "train.seed=18446744073709551615");
  CHECK(c.train.seed == 18446744073709551615ull);
  apply_override(c, "schedule.decay_shape=1-sqrt");
  CHECK(c.schedule.decay_shape == DecayShape::one_minus_sqrt);
  apply_override(c, "model.init=ckpt/dir");
  apply_override(c, "model.preset=tiny-qwen");  // a preset keeps model.init
  CHECK(c.model.hidden_size == 48);
  CHECK(c.model.init == "ckpt/dir");
}

TEST_CASE("config: data paths accept a string or a list", "[config]") {
  Config c;
  apply_json(c, json::parse(R"({"data": {"train": "shard_*.bin", "val": ["v0.bin", "v1.bin"]}})"),
             "inline");
  CHECK(c.data.train == std::vector<std::string>{"shard_*.bin"});
  CHECK(c.data.val.size() == 2);
}

TEST_CASE("config: to_json writes every key and round-trips exactly", "[config]") {
  Config c = load_config("", "llama3.2-1b", "affine-gated", {});
  c.model.init = "init/dir";
  c.model.rms_norm_eps = 1.2345678901234567e-6;
  c.attention.alpha_activation = AlphaActivation::sigmoid;
  c.attention.alpha_momentum = 0.873;
  c.kd.teacher_cache = "cache/";
  c.kd.cache_tail = CacheTail::bucket;
  c.kd.loss = KdLoss::reverse_kl;
  c.kd.temperature = 2.5;
  c.kd.weight = 0.3;
  c.optimizer.lr = 1.0 / 3.0;
  c.schedule.kind = ScheduleKind::cosine;
  c.schedule.decay_shape = DecayShape::one_minus_sqrt;
  c.schedule.min_lr_ratio = 0.05;
  c.data.train = {"a.bin", "b.bin"};
  c.data.val = {"v.bin"};
  c.train.seed = 12345678901234567890ull;
  c.train.device = Device::cuda;
  c.train.on_nonfinite = NonFinitePolicy::skip;
  c.train.max_consecutive_skips = 3;
  c.train.attention_backward = AttentionBackward::wgmma;
  c.checkpoint.interval = 250;
  c.log.interval = 10;
  c.eval.batches = 7;
  c.dist.zero1 = false;
  c.dist.timeout_s = 12.5;

  const json doc = to_json(c);
  for (const char* section : {"model", "attention", "kd", "optimizer", "schedule", "data", "train",
                              "checkpoint", "log", "eval", "dist"})
    CHECK(doc.contains(section));
  CHECK(doc["model"].size() == 17);
  CHECK(doc["model"]["rope_scaling"].size() == 5);
  CHECK(doc["train"].size() == 13);

  // Through text, as it is written into a run directory.
  Config back;
  apply_json(back, json::parse(doc.dump(2)), "resolved.json");
  CHECK(to_json(back) == doc);
  CHECK(back.optimizer.lr == c.optimizer.lr);
  CHECK(back.model.rms_norm_eps == c.model.rms_norm_eps);
  CHECK(back.train.seed == c.train.seed);
  CHECK(back.train.max_consecutive_skips == 3);
  CHECK(back.train.attention_backward == AttentionBackward::wgmma);
  CHECK(back.attention.variant == AttentionVariant::affine_gated);
  CHECK(back.model.rope_scaling.factor == 32.0);

  // Every preset round-trips too.
  for (const std::string& name : preset_names()) {
    Config p;
    p.model = model_preset(name);
    Config q;
    apply_json(q, to_json(p), "roundtrip");
    CHECK(to_json(q) == to_json(p));
  }
}

TEST_CASE("config: enum spellings round-trip", "[config]") {
  for (AttentionVariant v : all_attention_variants())
    CHECK(parse_attention_variant(to_string(v)) == v);
  CHECK(std::string(to_string(AttentionVariant::affine_gated)) == "affine-gated");
  CHECK(std::string(to_string(DecayShape::one_minus_sqrt)) == "1-sqrt");
  CHECK(parse_alpha_activation("sigmoid") == AlphaActivation::sigmoid);
  CHECK(parse_kd_loss("soft_ce") == KdLoss::soft_ce);
  CHECK(parse_schedule_kind("constant") == ScheduleKind::constant);
  CHECK(parse_nonfinite_policy("skip") == NonFinitePolicy::skip);
  CHECK_THROWS_AS(parse_decay_shape("exp"), Error);
}

TEST_CASE("config: the example configs load", "[config]") {
  for (const char* name : {"tiny-llama.json", "tiny-qwen.json"}) {
    const std::string path = std::string(KDTRAIN_SOURCE_DIR) + "/configs/" + name;
    INFO(path);
    CHECK_NOTHROW(load_config(path, "", "", {}));
  }
}
