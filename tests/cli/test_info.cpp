// Runs the kdtrain binary: `kdtrain info` must print the paper's ΔParams from the
// parameter table, in text and JSON.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

Run run_kdtrain(const std::string& args) {
  const std::string command = std::string(KDTRAIN_BINARY) + " " + args + " 2>&1";
  Run run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) run.output.append(buf, n);
  const int raw = pclose(pipe);
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return run;
}

json info_json(const std::string& args) {
  const Run run = run_kdtrain("info --json " + args);
  INFO(run.output);
  REQUIRE(run.status == 0);
  return json::parse(run.output);
}

}  // namespace

TEST_CASE("info: text output prints ΔParams like the paper", "[info]") {
  const Run run = run_kdtrain("info --preset llama3.2-1b --attention affine");
  INFO(run.output);
  REQUIRE(run.status == 0);
  CHECK(run.output.find("Δparams 1.0 M (1048576") != std::string::npos);
  CHECK(run.output.find("embedding") != std::string::npos);
  CHECK(run.output.find("lm_head") != std::string::npos);
  CHECK(run.output.find("MiB") != std::string::npos);
}

TEST_CASE("info: JSON ΔParams for every preset/variant of the paper's table", "[info]") {
  struct Row {
    const char* preset;
    const char* variant;
    double delta_m;
  };
  const Row rows[] = {
      {"qwen1.5-0.5b", "sink", 0.0},          {"llama3.2-1b", "sink", 0.0},
      {"llama3.2-3b", "sink", 0.0},           {"qwen1.5-0.5b", "affine", 0.4},
      {"llama3.2-1b", "affine", 1.0},         {"llama3.2-3b", "affine", 2.1},
      {"llama3.2-1b", "gated", 67.1},         {"llama3.2-3b", "gated", 264.2},
      {"llama3.2-1b", "affine-gated", 68.2},  {"llama3.2-3b", "affine-gated", 266.3},
  };
  for (const Row& row : rows) {
    INFO(row.preset << " " << row.variant);
    const json j = info_json(std::string("--preset ") + row.preset + " --attention " + row.variant);
    CHECK(j["delta_params_m"].get<double>() == row.delta_m);
    CHECK(j["attention"] == row.variant);
    CHECK(j["total_params"].get<int64_t>() - j["baseline_params"].get<int64_t>() ==
          j["delta_params"].get<int64_t>());
  }
}

TEST_CASE("info: JSON components add up and the memory plan is the one memory section", "[info]") {
  const json j = info_json("--preset tiny-qwen --attention affine-gated --micro-batch 2 --seq-len 33");
  int64_t sum = 0;
  for (const auto& item : j["components"].items()) sum += item.value().get<int64_t>();
  CHECK(sum == j["total_params"].get<int64_t>());
  CHECK(j["components"]["lm_head"].get<int64_t>() == 256 * 48);  // untied
  CHECK(j["components"]["variant"].get<int64_t>() > 0);
  CHECK(j["total_params"].get<int64_t>() < 1000000);
  CHECK(!j.contains("device_budget"));  // one memory model, printed once
  CHECK(!j.contains("recompute_choices"));
  const json& mem = j["memory"];
  CHECK(mem["micro_batch"] == 2);
  CHECK(mem["seq_len"] == 33);
  CHECK(mem["act_dtype"] == "bf16");  // the CUDA layout
  // The parameter arena: the trained parameters and, for the affine variants, each
  // layer's alpha_ma per head (a buffer); a bf16 compute copy, an fp32 master,
  // fp32 gradients and AdamW's m and v over all of it.
  const json& arch = j["architecture"];
  const int64_t arena = j["total_params"].get<int64_t>() +
                        arch["num_hidden_layers"].get<int64_t>() * arch["num_attention_heads"].get<int64_t>();
  CHECK(mem["student_compute_bytes"].get<int64_t>() == 2 * arena);
  CHECK(mem["student_master_bytes"].get<int64_t>() == 4 * arena);
  CHECK(mem["student_grads_bytes"].get<int64_t>() == 4 * arena);
  CHECK(mem["optimizer_bytes"].get<int64_t>() == 8 * arena);
  CHECK(mem["teacher_weights_bytes"].get<int64_t>() == 0);  // no teacher named
  // The total is the sum of the table's rows, each listed once.
  int64_t rows = 0;
  for (const json& item : mem["items"]) rows += mem[item["key"].get<std::string>() + "_bytes"].get<int64_t>();
  CHECK(mem["items"].size() == 10);
  CHECK(mem["total_bytes"].get<int64_t>() == rows);
  // Activations grow linearly with the token count, but for the RoPE tables (T rows
  // whatever B is) and each buffer's round-up to 256 bytes: a few percent at this size.
  const json j2 = info_json("--preset tiny-qwen --attention affine-gated --micro-batch 4 --seq-len 33");
  CHECK(double(j2["memory"]["student_activations_bytes"].get<int64_t>()) ==
        Approx(2.0 * double(mem["student_activations_bytes"].get<int64_t>())).epsilon(0.05));
  // The arena is the sum of its buffers, each listed once.
  int64_t buffers = 0;
  for (const json& b : mem["activation_buffers"]) buffers += b["bytes"].get<int64_t>();
  CHECK(buffers == mem["student_activations_bytes"].get<int64_t>());
  // The plan under each recomputation choice, inside the same section.
  REQUIRE(mem["recompute_choices"].size() >= 2);
  for (const json& c : mem["recompute_choices"])
    CHECK(c["total_bytes"].get<int64_t>() - c["student_activations_bytes"].get<int64_t>() ==
          mem["total_bytes"].get<int64_t>() - mem["student_activations_bytes"].get<int64_t>());
}

TEST_CASE("info: a teacher enters the plan with its weights, one layer of activations and its logits",
          "[info]") {
  const json alone = info_json("--preset tiny-llama --micro-batch 2 --seq-len 32");
  const json with = info_json("--preset tiny-llama --micro-batch 2 --seq-len 32 --teacher tiny-qwen");
  const json& a = alone["memory"];
  const json& m = with["memory"];
  CHECK(m["teacher_weights_bytes"].get<int64_t>() > 0);
  CHECK(m["teacher_activations_bytes"].get<int64_t>() > 0);
  CHECK(m["loss_buffers_bytes"].get<int64_t>() == 2 * a["loss_buffers_bytes"].get<int64_t>());
  CHECK(m["student_activations_bytes"] == a["student_activations_bytes"]);
}

TEST_CASE("info: reads a config file and --set", "[info]") {
  const std::string config = std::string(KDTRAIN_SOURCE_DIR) + "/configs/tiny-llama.json";
  const json j = info_json("--config " + config + " --set model.num_hidden_layers=3");
  CHECK(j["preset"] == "tiny-llama");
  CHECK(j["architecture"]["num_hidden_layers"] == 3);
  CHECK(j["attention"] == "affine");
}

TEST_CASE("info: bad input exits non-zero naming the problem", "[info]") {
  const Run bad_preset = run_kdtrain("info --preset llama-9000");
  CHECK(bad_preset.status != 0);
  CHECK(bad_preset.output.find("llama-9000") != std::string::npos);
  const Run bad_set = run_kdtrain("info --preset tiny-llama --set optimizer.beta2=2");
  CHECK(bad_set.status != 0);
  CHECK(bad_set.output.find("optimizer.beta2") != std::string::npos);
}
