// kdtrain bench: the report of every attention variant on tiny-llama (fields,
// phase times adding up to the step), and the FLOP formula on known shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "bench/bench.h"
#include "config/config.h"
#include "support/process_util.h"
#include "support/temp_dir.h"

using kdtrain::AttentionVariant;
using nlohmann::json;

namespace {

// The last line of the output that parses as a JSON object.
json last_json_line(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    size_t start = out.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    const std::string line = out.substr(start, end - start);
    if (!line.empty() && line[0] == '{') {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) return j;
    }
    if (start == 0) break;
    end = start - 1;
  }
  return json();
}

// Runs kdtrain with its output in a private temporary file, so tests that ctest
// runs in parallel never read each other's output.
int run_kdtrain(const std::vector<std::string>& args, std::string* out) {
  const kdtrain::testing::TempDir dir("bench");
  return kdtrain::testing::run(args, out, dir.file("output.log"));
}

json run_bench(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {KDTRAIN_BINARY, "bench", "--preset", "tiny-llama", "--device", "cpu",
                                   "--micro-batch", "2", "--seq-len", "32", "--steps", "2",
                                   "--warmup", "1", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::string out;
  const int code = run_kdtrain(args, &out);
  INFO(out);
  REQUIRE(code == 0);
  const json j = last_json_line(out);
  REQUIRE(j.is_object());
  return j;
}

}  // namespace

TEST_CASE("bench: FLOP formula on tiny-llama shapes", "[bench]") {
  const kdtrain::ModelConfig m = kdtrain::model_preset("tiny-llama");
  kdtrain::AttentionConfig a;
  // per layer: q 64*64 + k,v 2*64*32 + o 64*64 = 12288; MLP 3*64*176 = 33792; norms 128
  // two layers + final norm 64 + tied head 256*64 counted once (the embedding is not)
  const double n = 2 * (12288 + 33792 + 128) + 64 + 256 * 64;
  REQUIRE(kdtrain::bench::flop_params(kdtrain::make_param_layout(m, a), m) == int64_t(n));
  const double T = 32;
  CHECK(kdtrain::bench::student_train_flops_per_token(m, a, 32) == Approx(6 * n + 12 * 2 * 4 * 16 * T));
  CHECK(kdtrain::bench::teacher_forward_flops_per_token(m, a, 32) == Approx(2 * n + 4 * 2 * 4 * 16 * T));
  a.variant = kdtrain::AttentionVariant::gated;  // gate_proj (H*D, C) per layer adds 2*64*64
  CHECK(kdtrain::bench::flop_params(kdtrain::make_param_layout(m, a), m) == int64_t(n + 2 * 64 * 64));
}

TEST_CASE("bench: median", "[bench]") {
  CHECK(kdtrain::bench::median({}) == 0.0);
  CHECK(kdtrain::bench::median({3, 1, 2}) == 2.0);
  CHECK(kdtrain::bench::median({4, 1, 2, 3}) == 2.5);
}

TEST_CASE("bench: every variant on tiny-llama reports consistent JSON", "[bench]") {
  for (AttentionVariant v : kdtrain::all_attention_variants()) {
    const std::string variant = kdtrain::to_string(v);
    SECTION(variant) {
      const json r = run_bench({"--attention", variant});
      CHECK(r["attention"] == variant);
      CHECK(r["device"] == "cpu");
      CHECK(r["tokens_per_step"] == 64);
      CHECK(r["steps"] == 2);
      CHECK(r["tokens_per_s"].get<double>() > 0);
      CHECK(std::isfinite(r["final_loss"].get<double>()));
      CHECK(r["mfu"].is_null());  // no peak given on cpu
      const json& p = r["phase_ms"];
      for (const char* k : {"teacher_forward", "student_forward_loss", "backward", "optimizer"})
        REQUIRE(p.contains(k));
      // No teacher: none is named or counted. (Its phase's time is not checked: on a loaded
      // machine a descheduling lands in any phase; CI once saw 20 of a 68 ms step there.)
      CHECK(r["teacher"].is_null());
      CHECK(r["flops_per_token"]["teacher_forward"] == 0.0);
      // Medians of the phases need not add up exactly to the median step; with two
      // steps they are means of two, so the sum matches within rounding.
      const double sum = p["teacher_forward"].get<double>() + p["student_forward_loss"].get<double>() +
                         p["backward"].get<double>() + p["optimizer"].get<double>();
      CHECK(sum == Approx(r["step_ms"].get<double>()).epsilon(0.05).margin(0.05));
      const json& m = r["memory"];
      const json& plan = m["plan"];
      CHECK(plan["act_dtype"] == "fp32");
      CHECK(plan["student_master_bytes"].get<int64_t>() > 0);
      CHECK(plan["student_compute_bytes"] == 0);  // the master is the compute copy on cpu
      CHECK(plan["optimizer_bytes"].get<int64_t>() == 2 * plan["student_grads_bytes"].get<int64_t>());
      // The plan is what the run allocated: the model's own arena and the optimizer's moments.
      const json& measured = m["measured"];
      CHECK(measured["student_activations_bytes"] == plan["student_activations_bytes"]);
      CHECK(measured["optimizer_bytes"] == plan["optimizer_bytes"]);
      CHECK(m["peak_rss_bytes"].get<int64_t>() > 0);
      // The tracked peak holds at least the persistent state (master weights, which
      // are the compute copy on cpu, gradients, AdamW moments) plus activations.
      CHECK(m["peak_host_bytes"].get<int64_t>() >=
            plan["student_master_bytes"].get<int64_t>() + plan["student_grads_bytes"].get<int64_t>() +
                plan["optimizer_bytes"].get<int64_t>() + plan["student_activations_bytes"].get<int64_t>());
      CHECK(m["peak_host_bytes"].get<double>() < 1e9);
      // Which attention implementation ran, per distinct call: one shape here.
      REQUIRE(r["attention_paths"].size() == 1);
      const json& path = r["attention_paths"][0];
      CHECK(path["features"] == kdtrain::features_label(kdtrain::features_of(kdtrain::parse_attention_variant(variant))));
      CHECK((path["B"] == 2 && path["T"] == 32 && path["H"] == 4 && path["Hkv"] == 2 && path["D"] == 16));
      CHECK(path["forward"] == "cpu-reference");
      CHECK(path["backward"] == "cpu-reference");
      CHECK(r["attention_path"] == "cpu-reference");
      const double student = r["flops_per_token"]["student_train"].get<double>();
      const double expected = kdtrain::bench::student_train_flops_per_token(
          kdtrain::model_preset("tiny-llama"),
          kdtrain::AttentionConfig{kdtrain::parse_attention_variant(variant)}, 32);
      CHECK(student == Approx(expected));
    }
  }
}

TEST_CASE("bench: teacher from a preset and MFU from --peak-tflops", "[bench]") {
  const json r = run_bench({"--teacher", "tiny-llama", "--peak-tflops", "1"});
  CHECK(r["teacher_source"] == "preset (random init)");
  CHECK(r["flops_per_token"]["teacher_forward"].get<double>() > 0);
  CHECK(r["flops_per_token"]["total"].get<double>() ==
        Approx(r["flops_per_token"]["student_train"].get<double>() +
               r["flops_per_token"]["teacher_forward"].get<double>()));
  CHECK(r["mfu"].get<double>() == Approx(r["achieved_tflops"].get<double>() / 1.0));
  CHECK(r["memory"]["plan"]["teacher_weights_bytes"].get<int64_t>() > 0);
  CHECK(r["memory"]["measured"]["teacher_activations_bytes"] == r["memory"]["plan"]["teacher_activations_bytes"]);
}

// --teacher-cache times training's path: the rows come from a cache through the
// run's reader thread, which had each timed step's rows read ahead (a take read
// on the step's own thread would count as a miss).
TEST_CASE("bench: a cached teacher's rows come through the run's reader and enter the plan", "[bench]") {
  const json r = run_bench({"--teacher-cache", "8"});
  CHECK(r["teacher_cache_k"] == 8);
  const double loss = r["final_loss"].get<double>();
  CHECK(std::isfinite(loss));
  CHECK(loss > 0.0);  // KD and CE of a random student
  REQUIRE(r["cache_reader"].is_object());
  CHECK(r["cache_reader"]["hits"] == 2);  // --steps 2, one micro-batch each
  CHECK(r["cache_reader"]["misses"] == 0);
  CHECK(r["cache_reader"]["upload_lane"] == false);  // the CPU reads host rows
  // The take (and any wait for the reader) is timed in the teacher's phase; the
  // phases still make up the step (means of two steps: equal within rounding).
  const json& p = r["phase_ms"];
  const double sum = p["teacher_forward"].get<double>() + p["student_forward_loss"].get<double>() +
                     p["backward"].get<double>() + p["optimizer"].get<double>();
  CHECK(sum == Approx(r["step_ms"].get<double>()).epsilon(0.05).margin(0.05));
  const json& plan = r["memory"]["plan"];
  // 64 tokens x 8 cached ids: int32 ids and fp32 log-probabilities, plus the fp32 log tail.
  CHECK(plan["teacher_cache_bytes"] == 64 * 8 * 8 + 64 * 4);
  CHECK(plan["teacher_weights_bytes"] == 0);
}

TEST_CASE("bench: bad arguments fail with a message", "[bench]") {
  std::string out;
  const int code = run_kdtrain(
      {KDTRAIN_BINARY, "bench", "--preset", "tiny-llama", "--steps", "0", "--device", "cpu"}, &out);
  CHECK(code != 0);
  CHECK(code < 128);  // refused when the command line is parsed (CLI11's exit code), not killed
  CHECK(out.find("--steps") != std::string::npos);
}

TEST_CASE("bench --attention-only: every variant, FLOP convention, head-dim rescaling", "[bench]") {
  CHECK(kdtrain::bench::attention_fwd_bwd_flops(2, 4, 64, 16) == Approx(3.5 * 4 * 2 * 4 * 64 * 64 * 16 / 2));
  for (AttentionVariant v : kdtrain::all_attention_variants()) {
    const std::string variant = kdtrain::to_string(v);
    SECTION(variant) {
      std::string out;
      const int code = run_kdtrain(
          {KDTRAIN_BINARY, "bench", "--attention-only", "--preset", "tiny-llama", "--attention", variant,
           "--device", "cpu", "--micro-batch", "2", "--seq-len", "32", "--steps", "2", "--warmup", "1",
           "--json"},
          &out);
      INFO(out);
      REQUIRE(code == 0);
      const json r = last_json_line(out);
      CHECK(r["mode"] == "attention-only");
      CHECK(r["attention"] == variant);
      CHECK(r["H"] == 4);
      CHECK(r["Hkv"] == 2);
      CHECK(r["D"] == 16);
      CHECK(r["fwd_bwd_ms"].get<double>() > 0);
      CHECK(r["flops_fwd_bwd"].get<double>() == Approx(kdtrain::bench::attention_fwd_bwd_flops(2, 4, 32, 16)));
      CHECK(r["tflops"].get<double>() > 0);
      CHECK(r["attention_path"] == "cpu-reference");
    }
  }
  std::string out;
  REQUIRE(run_kdtrain({KDTRAIN_BINARY, "bench", "--attention-only", "--preset", "tiny-llama",
                                 "--head-dim", "32", "--device", "cpu", "--micro-batch", "1", "--seq-len",
                                 "16", "--steps", "1", "--json"},
                                &out) == 0);
  const json r = last_json_line(out);
  CHECK(r["H"] == 2);  // H*D = 64 kept
  CHECK(r["Hkv"] == 1);  // GQA ratio 2 kept
}

TEST_CASE("bench --attention-only --kernel-times: kernel_ms only when asked, empty on cpu", "[bench]") {
  const std::vector<std::string> base = {KDTRAIN_BINARY, "bench", "--attention-only", "--preset", "tiny-llama",
                                         "--attention", "affine", "--device", "cpu", "--micro-batch", "1",
                                         "--seq-len", "16", "--steps", "1", "--warmup", "0", "--json"};
  std::string out;
  REQUIRE(run_kdtrain(base, &out) == 0);
  CHECK_FALSE(last_json_line(out).contains("kernel_ms"));
  std::vector<std::string> args = base;
  args.push_back("--kernel-times");
  REQUIRE(run_kdtrain(args, &out) == 0);
  const json r = last_json_line(out);
  INFO(out);
  REQUIRE(r.contains("kernel_ms"));
  CHECK(r["kernel_ms"].is_object());
  CHECK(r["kernel_ms"].empty());  // the CPU backend's ops are host functions: no timed launches
  CHECK(r["backward_ms"].get<double>() > 0);
  args.pop_back();
  args.pop_back();  // --json: the human-readable report says so too
  args.push_back("--kernel-times");
  REQUIRE(run_kdtrain(args, &out) == 0);
  CHECK(out.find("kernels (mean ms per call): none timed") != std::string::npos);
  // Without --attention-only there is nothing it would time.
  const int code = run_kdtrain({KDTRAIN_BINARY, "bench", "--preset", "tiny-llama", "--device", "cpu",
                                "--kernel-times"},
                               &out);
  CHECK(code != 0);
  CHECK(code < 128);
  CHECK(out.find("--attention-only") != std::string::npos);
}

TEST_CASE("bench --attention-only --kernel-times on the GPU: every kernel of the affine backward", "[cuda][bench]") {
  if (!kdtrain::cuda_available()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  std::string out;
  const int code = run_kdtrain({KDTRAIN_BINARY, "bench", "--attention-only", "--preset", "tiny-llama", "--attention",
                                "affine", "--head-dim", "64", "--device", "cuda", "--micro-batch", "2", "--seq-len",
                                "256", "--steps", "3", "--warmup", "1", "--json", "--kernel-times"},
                               &out);
  INFO(out);
  REQUIRE(code == 0);
  const json r = last_json_line(out);
  REQUIRE(r["attention_path"] == "flash");
  const json& k = r["kernel_ms"];
  for (const char* name : {"fwd v_scan", "bwd_zero counters", "bwd v_scan", "bwd_prep", "bwd u_scan", "bwd_finalize"}) {
    INFO(name);
    REQUIRE(k.contains(name));
    CHECK(k[name].get<double>() > 0);
  }
  int forward = 0, main = 0;
  for (const auto& [name, ms] : k.items()) {
    forward += name == "fwd wgmma" || name == "fwd mma_sync";
    main += name.rfind("bwd_main", 0) == 0;
    CHECK(ms.get<double>() > 0);
  }
  CHECK(forward == 1);
  CHECK(main == 1);
}

TEST_CASE("bench on the GPU: the attention path and the measured peak device memory", "[cuda][bench]") {
  if (!kdtrain::cuda_available()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  // tiny-llama's head dim 16 takes the row kernels; 64 the fused ones.
  for (const char* head_dim : {"16", "64"}) {
    INFO("head_dim " << head_dim);
    const json r = run_bench({"--device", "cuda", "--attention", "sink", "--set",
                              std::string("model.head_dim=") + head_dim});
    CHECK(r["attention_path"] == (std::string(head_dim) == "64" ? "flash" : "row"));
    const json& m = r["memory"];
    // The tracked peak holds at least the fp32 master, bf16 copy, gradients and moments.
    const json& plan = m["plan"];
    const double persistent = plan["student_compute_bytes"].get<double>() + plan["student_master_bytes"].get<double>() +
                              plan["student_grads_bytes"].get<double>() + plan["optimizer_bytes"].get<double>();
    CHECK(m["peak_device_bytes"].get<double>() >= persistent);
    // Device-wide use, sampled after each allocation, includes everything tracked.
    CHECK(m["device_used_peak_bytes"].get<int64_t>() >= m["peak_device_bytes"].get<int64_t>());
    CHECK(m["device_total_bytes"].get<int64_t>() >= m["device_used_peak_bytes"].get<int64_t>());
  }
}
