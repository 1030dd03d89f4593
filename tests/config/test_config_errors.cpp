// Bad configs: every one must fail with a message naming the key path, and the
// file for file errors. The table below is the list of what a user can get wrong.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "config/config.h"
#include "core/error.h"

using namespace kdtrain;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir() {
  fs::path dir = fs::temp_directory_path() / ("kdtrain_test_config_errors_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path path = scratch_dir() / name;
  std::ofstream(path) << text;
  return path.string();
}

// Runs `action`, requires it to throw kdtrain::Error containing every `parts`.
template <typename F>
void require_error(F action, const std::vector<std::string>& parts) {
  std::string message;
  try {
    action();
  } catch (const Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (const std::string& part : parts) CHECK(message.find(part) != std::string::npos);
}

struct BadConfig {
  const char* name;
  const char* json;
  const char* key;  // the key path the message must name
};

const BadConfig kBad[] = {
    {"unknown_section", R"({"modle": {}})", "modle"},
    {"unknown_model_key", R"({"model": {"hiden_size": 64}})", "model.hiden_size"},
    {"unknown_rope_key", R"({"model": {"rope_scaling": {"rope_type": "llama3"}}})",
     "model.rope_scaling.rope_type"},
    {"unknown_attention_key", R"({"attention": {"varient": "affine"}})", "attention.varient"},
    {"unknown_kd_key", R"({"kd": {"temp": 2.0}})", "kd.temp"},
    {"unknown_optimizer_key", R"({"optimizer": {"learning_rate": 0.1}})", "optimizer.learning_rate"},
    {"unknown_schedule_key", R"({"schedule": {"warmup_steps": 5}})", "schedule.warmup_steps"},
    {"unknown_data_key", R"({"data": {"tain": "x.bin"}})", "data.tain"},
    {"unknown_train_key", R"({"train": {"batch": 4}})", "train.batch"},
    {"unknown_checkpoint_key", R"({"checkpoint": {"every": 4}})", "checkpoint.every"},
    {"unknown_log_key", R"({"log": {"file": "x"}})", "log.file"},
    {"unknown_eval_key", R"({"eval": {"steps": 3}})", "eval.steps"},
    {"unknown_dist_key", R"({"dist": {"bucket_size": 4}})", "dist.bucket_size"},
    {"bad_dist_backend", R"({"dist": {"backend": "gloo"}})", "dist.backend"},
    {"zero_bucket", R"({"dist": {"bucket_mb": 0}})", "dist.bucket_mb"},
    {"bad_reduce_dtype", R"({"dist": {"reduce_dtype": "fp8"}})", "dist.reduce_dtype"},
    {"section_not_object", R"({"train": 5})", "train"},
    {"string_for_number", R"({"optimizer": {"lr": "fast"}})", "optimizer.lr"},
    {"float_for_integer", R"({"train": {"seq_len": 12.5}})", "train.seq_len"},
    {"negative_count", R"({"train": {"micro_batch": -2}})", "train.micro_batch"},
    {"string_for_bool", R"({"model": {"tie_word_embeddings": "yes"}})", "model.tie_word_embeddings"},
    {"number_in_path_list", R"({"data": {"train": ["a.bin", 3]}})", "data.train"},
    {"negative_seed", R"({"train": {"seed": -1}})", "train.seed"},
    {"lr_zero", R"({"optimizer": {"lr": 0}})", "optimizer.lr"},
    {"beta1_negative", R"({"optimizer": {"beta1": -0.1}})", "optimizer.beta1"},
    {"beta2_one", R"({"optimizer": {"beta2": 1.0}})", "optimizer.beta2"},
    {"eps_zero", R"({"optimizer": {"eps": 0.0}})", "optimizer.eps"},
    {"temperature_zero", R"({"kd": {"temperature": 0}})", "kd.temperature"},
    {"kd_weight_above_one", R"({"kd": {"weight": 1.5}})", "kd.weight"},
    {"alpha_momentum_one", R"({"attention": {"alpha_momentum": 1.0}})", "attention.alpha_momentum"},
    {"seq_len_zero", R"({"train": {"seq_len": 0}})", "train.seq_len"},
    {"decay_fraction_above_one", R"({"schedule": {"decay_fraction": 1.2}})", "schedule.decay_fraction"},
    {"unknown_preset", R"({"model": {"preset": "gpt-5"}})", "model.preset"},
    {"unknown_variant", R"({"attention": {"variant": "linear"}})", "attention.variant"},
    {"unknown_alpha_activation", R"({"attention": {"alpha_activation": "tanh"}})",
     "attention.alpha_activation"},
    {"unknown_kd_loss", R"({"kd": {"loss": "mse"}})", "kd.loss"},
    {"unknown_schedule_kind", R"({"schedule": {"kind": "step"}})", "schedule.kind"},
    {"unknown_decay_shape", R"({"schedule": {"decay_shape": "exp"}})", "schedule.decay_shape"},
    {"unknown_nonfinite", R"({"train": {"on_nonfinite": "ignore"}})", "train.on_nonfinite"},
    {"unknown_family", R"({"model": {"family": "gpt2"}})", "model.family"},
    {"unknown_rope_type", R"({"model": {"rope_scaling": {"type": "yarn"}}})", "model.rope_scaling.type"},
    {"unknown_device", R"({"train": {"device": "tpu"}})", "train.device"},
    {"unknown_cache_tail", R"({"kd": {"cache_tail": "drop"}})", "kd.cache_tail"},
    {"negative_cache_verify_threads", R"({"kd": {"cache_verify_threads": -1}})", "kd.cache_verify_threads"},
    {"batch_not_divisible", R"({"train": {"global_batch": 10, "micro_batch": 4}})", "train.global_batch"},
    {"heads_not_divisible", R"({"model": {"num_key_value_heads": 3}})", "model.num_key_value_heads"},
    {"odd_head_dim", R"({"model": {"head_dim": 15}})", "model.head_dim"},
    {"teacher_and_cache", R"({"kd": {"teacher": "t", "teacher_cache": "c"}})", "kd.teacher_cache"},
    {"rope_high_below_low",
     R"({"model": {"rope_scaling": {"low_freq_factor": 4.0, "high_freq_factor": 2.0}}})",
     "model.rope_scaling.high_freq_factor"},
};

}  // namespace

TEST_CASE("config errors: each bad file names its key path and the file", "[config]") {
  STATIC_REQUIRE(sizeof(kBad) / sizeof(kBad[0]) >= 25);
  for (const BadConfig& bad : kBad) {
    SECTION(bad.name) {
      const std::string path = write_file(std::string(bad.name) + ".json", bad.json);
      require_error([&] { load_config(path, "tiny-llama", "", {}); },
                    {bad.key, std::string(bad.name) + ".json"});
    }
  }
}

TEST_CASE("config errors: an enum error lists the choices", "[config]") {
  const std::string path = write_file("variant_choices.json", R"({"attention": {"variant": "linear"}})");
  std::vector<std::string> expected = {"'linear'"};
  for (AttentionVariant v : all_attention_variants()) expected.push_back(to_string(v));
  require_error([&] { load_config(path, "tiny-llama", "", {}); }, expected);
}

TEST_CASE("config errors: malformed JSON names the file and the position", "[config]") {
  const std::string path = write_file("malformed.json", "{\n  \"train\": {\"steps\": 10,}\n}\n");
  require_error([&] { load_config(path, "tiny-llama", "", {}); }, {"malformed.json", "line 2"});
}

TEST_CASE("config errors: top level must be an object", "[config]") {
  const std::string path = write_file("array.json", "[1, 2]");
  require_error([&] { load_config(path, "tiny-llama", "", {}); }, {"array.json", "object"});
}

TEST_CASE("config errors: a missing file is named", "[config]") {
  require_error([] { load_config("/nonexistent/dir/run.json", "tiny-llama", "", {}); },
                {"/nonexistent/dir/run.json"});
}

TEST_CASE("config errors: model sizes must be set", "[config]") {
  require_error([] { load_config("", "", "", {}); }, {"model.hidden_size", "model.preset"});
}

TEST_CASE("config errors: bad --set", "[config]") {
  SECTION("no '='") {
    require_error([] { load_config("", "tiny-llama", "", {"optimizer.lr"}); },
                  {"--set", "optimizer.lr", "="});
  }
  SECTION("unknown key") {
    require_error([] { load_config("", "tiny-llama", "", {"optimizer.lrr=0.1"}); },
                  {"--set", "optimizer.lrr"});
  }
  SECTION("unknown section") {
    require_error([] { load_config("", "tiny-llama", "", {"optim.lr=0.1"}); }, {"--set", "optim"});
  }
  SECTION("no section") {
    require_error([] { load_config("", "tiny-llama", "", {"lr=0.1"}); }, {"--set", "lr"});
  }
  SECTION("bad value") {
    require_error([] { load_config("", "tiny-llama", "", {"optimizer.lr=abc"}); },
                  {"--set", "optimizer.lr"});
  }
  SECTION("out of range") {
    require_error([] { load_config("", "tiny-llama", "", {"optimizer.beta2=1.5"}); },
                  {"--set", "optimizer.beta2"});
  }
}

TEST_CASE("config errors: bad --preset and --attention", "[config]") {
  require_error([] { load_config("", "gpt-5", "", {}); }, {"--preset", "gpt-5", "llama3.2-1b"});
  require_error([] { load_config("", "tiny-llama", "softmax1", {}); },
                {"--attention", "softmax1", "affine-gated"});
}

TEST_CASE("config errors: global batch divisibility counts the world size", "[config]") {
  Config c = load_config("", "tiny-llama", "", {"train.global_batch=8", "train.micro_batch=2"});
  CHECK_NOTHROW(validate(c, 4));
  require_error([&] { validate(c, 3); }, {"train.global_batch", "world size"});
}
