// The data-parallel scaling model (bench/scaling.h): its collective costs, the
// backward's readiness profile against the model's own "gradients final"
// hook, the timeline of one step computed by hand, the measured step read
// from a bench report, and `kdtrain bench --project-world-size`. The MPI
// validation (`bench --collectives`) runs under mpirun in the last case.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "bench/bench.h"
#include "bench/collective_bench.h"
#include "bench/scaling.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "support/process_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::bench;
using namespace kdtrain::testing;
namespace fs = std::filesystem;

namespace {

nlohmann::json bench_report(const std::string& preset, int64_t micro_batch) {
  return {{"preset", preset},
          {"micro_batch", micro_batch},
          {"seq_len", 2048},
          {"phase_ms", {{"teacher_forward", 0.0}, {"student_forward_loss", 141.0}, {"backward", 266.0},
                        {"optimizer", 22.0}}}};
}

}  // namespace

TEST_CASE("scaling: ring costs use NVLink inside a node and the network across nodes", "[scaling]") {
  Interconnect links;  // 450 / 50 GB/s, 8 GPUs per node, 3 / 8 us per hop
  CHECK(bucket_reduce_s(1e9, 1, links) == 0.0);
  CHECK(bucket_reduce_s(450e6, 8, links) == Approx(1e-3 + 7 * 3e-6));
  // 16 GPUs on 2 nodes: 14 NVLink hops and 2 network hops, 50 GB/s.
  CHECK(bucket_reduce_s(50e6, 16, links) == Approx(1e-3 + 14 * 3e-6 + 2 * 8e-6));
  CHECK(all_gather_s(8 * 450e6, 8, links) == Approx(7e-3 + 7 * 3e-6));
  links.nvlink_gb_s = 40;  // the slower of the two bounds a multi-node ring
  CHECK(ring_bandwidth_bytes_s(64, links) == Approx(40e9));
}

TEST_CASE("scaling: the readiness profile is the order in which the backward finalises gradients",
          "[scaling]") {
  for (const ModelConfig& m : {llama_like(), qwen_like()}) {  // tied and untied head
    INFO(m.family);
    AttentionConfig attention;
    attention.variant = AttentionVariant::affine;
    std::unique_ptr<Backend> backend = make_backend("cpu", 1);
    Model model(m, attention, *backend);
    model.set_params(init_params(model.layout(), m, attention, 1));
    std::vector<dist::Range> hooked;
    model.set_grads_final_hook([&](int64_t b, int64_t e) { hooked.push_back({b, e}); });
    const std::vector<int32_t> tokens = random_tokens(9, m.vocab_size, 2);
    model.forward(tokens.data(), 1, 8, false);
    FusedLoss loss(*backend);
    loss.run(model, nullptr, tokens.data() + 1, LossSettings{}, 1.f, true);
    model.backward();
    const std::vector<ReadyRange> profile = backward_ready_profile(m, attention);
    REQUIRE(profile.size() == hooked.size());
    double last = 0.0;
    for (size_t i = 0; i < profile.size(); ++i) {
      CHECK(profile[i].range.begin == hooked[i].begin);
      CHECK(profile[i].range.end == hooked[i].end);
      CHECK(profile[i].at >= last);
      last = profile[i].at;
    }
    CHECK(profile.back().at == 1.0);
  }
}

TEST_CASE("scaling: one step's timeline, by hand", "[scaling]") {
  ScalingSetup s;
  s.model = llama_like();  // 2 layers, tied head
  s.attention.variant = AttentionVariant::baseline;
  s.step.preset = "hand";
  s.step.micro_batch = 4;
  s.step.seq_len = 16;
  s.step.forward_loss_s = 1.0;
  s.step.backward_s = 2.0;
  s.step.optimizer_s = 0.5;
  s.global_batch = 32;
  s.micro_batch = 4;
  const int64_t n = make_param_layout(s.model, s.attention).total;
  s.bucket_elements = n + 64;  // one bucket: final when the embedding is, at the end of the backward
  s.links.nvlink_hop_us = 0;
  s.links.nvlink_gb_s = 4.0 * double(n) / 1e9 / 0.25;  // the whole arena in 0.25 s

  s.micro_batch = 8;  // twice the measured micro-batch: phases scale per sequence
  CHECK(project(s, 1).micro_batches == 4);
  CHECK(project(s, 1).last_backward_s == Approx(4.0));
  s.micro_batch = 4;
  const Projection one = project(s, 1);
  CHECK(one.micro_batches == 8);
  CHECK(one.compute_s == Approx(8 * 3.0 + 0.5));
  CHECK(one.reduce_s == 0.0);
  CHECK(one.step_s == Approx(one.compute_s));

  const Projection two = project(s, 2);  // 4 micro-batches of 4 per GPU
  CHECK(two.micro_batches == 4);
  CHECK(two.compute_s == Approx(4 * 3.0 + 0.5));
  CHECK(two.reduce_s == Approx(0.25));
  CHECK(two.reduce_exposed_s == Approx(0.25));  // nothing to hide behind
  CHECK(two.all_gather_s == Approx(0.125));     // half the arena arrives from the other GPU
  CHECK(two.hidden_fraction == Approx(0.0).margin(1e-12));
  CHECK(two.step_s == Approx(two.compute_s + 0.25 + 0.125 + two.host_s));

  // Small buckets: what layer 1 and the final norm make final is reduced while
  // layer 0's backward runs; layer 0 and the embedding finish at the very end.
  s.bucket_elements = 64;
  const Projection small = project(s, 2);
  const double last = double(make_param_layout(s.model, s.attention).layers[0].end) / double(n);
  CHECK(small.reduce_s == Approx(0.25));
  CHECK(small.reduce_exposed_s == Approx(0.25 * last).epsilon(0.05));
  CHECK(small.hidden_fraction == Approx(0.25 * (1 - last) / 0.375).epsilon(0.05));

  // At 16 GPUs the micro-batch shrinks to global_batch / 16 = 2 and the phases with it.
  const Projection sixteen = project(s, 16);
  CHECK(sixteen.micro_batch == 2);
  CHECK(sixteen.micro_batches == 1);
  CHECK(sixteen.last_backward_s == Approx(1.0));
  CHECK_THROWS_WITH(project(s, 64), Catch::Contains("global batch"));
}

TEST_CASE("scaling: the measured step comes from a bench report and carries over to other models",
          "[scaling]") {
  const MeasuredStep m = measured_step_from_report(bench_report("llama3.2-1b", 8), "r.json");
  CHECK(m.micro_batch == 8);
  CHECK(m.backward_s == Approx(0.266));
  nlohmann::json broken = bench_report("llama3.2-1b", 8);
  broken["phase_ms"].erase("backward");
  CHECK_THROWS_WITH(measured_step_from_report(broken, "r.json"), Catch::Contains("r.json: no 'backward'"));

  AttentionConfig attention;
  const ModelConfig one_b = model_preset("llama3.2-1b"), three_b = model_preset("llama3.2-3b"),
                    eight_b = model_preset("llama3.1-8b");
  const MeasuredStep same = scale_measured_step(m, one_b, one_b, attention, nullptr);
  CHECK(same.backward_s == Approx(m.backward_s));
  CHECK(same.optimizer_s == Approx(m.optimizer_s));
  const MeasuredStep big = scale_measured_step(m, one_b, three_b, attention, &eight_b);
  const double ratio = student_train_flops_per_token(three_b, attention, 2048) /
                       student_train_flops_per_token(one_b, attention, 2048);
  CHECK(big.backward_s == Approx(m.backward_s * ratio));
  // The teacher forward at the 1B's achieved FLOP rate: 2N_t + 4LHDT per token.
  const double rate = student_train_flops_per_token(one_b, attention, 2048) * 8 * 2048 / (0.141 + 0.266);
  CHECK(big.teacher_s == Approx(teacher_forward_flops_per_token(eight_b, attention, 2048) * 8 * 2048 / rate));
}

TEST_CASE("scaling: kdtrain bench --project-world-size prints a row per world size", "[scaling][cli]") {
  TempDir tmp("scaling_cli");
  const std::string report = (tmp.path / "bench.json").string();
  std::ofstream(report) << bench_report("llama3.2-1b", 8).dump();
  std::string out;
  REQUIRE(run({KDTRAIN_BINARY, "bench", "--preset", "llama3.2-1b", "--set", "train.global_batch=1024",
               "--set", "train.seq_len=2048", "--micro-batch", "8", "--measured", report, "--project-world-size",
               "8,64,512", "--json"},
              &out, (tmp.path / "log").string()) == 0);
  INFO(out);
  const nlohmann::json j = nlohmann::json::parse(out);
  REQUIRE(j["projection"].size() == 3);
  CHECK(j["projection"][2]["world"] == 512);
  CHECK(j["projection"][2]["micro_batch"] == 2);  // 1024 / 512
  for (const auto& row : j["projection"]) {
    CHECK(row["step_ms"].get<double>() >= row["compute_ms"].get<double>());
    CHECK(row["communication_hidden"].get<double>() >= 0.0);
    CHECK(row["communication_hidden"].get<double>() <= 1.0);
  }
  CHECK(j["gradient_elements"] == make_param_layout(model_preset("llama3.2-1b"), AttentionConfig{}).total);
  // Text form, another student scaled from the 1B's measurement, a slower network.
  REQUIRE(run({KDTRAIN_BINARY, "bench", "--preset", "llama3.2-3b", "--teacher", "llama3.1-8b", "--set",
               "train.global_batch=1024", "--set", "train.seq_len=2048", "--measured", report,
               "--project-world-size", "8", "--network-gb-s", "25"},
              &out, (tmp.path / "log").string()) == 0);
  CHECK(out.find("scaled from llama3.2-1b, teacher llama3.1-8b") != std::string::npos);
  CHECK(out.find("network 25 GB/s") != std::string::npos);
  // A measurement at another sequence length is refused, naming both.
  CHECK(run({KDTRAIN_BINARY, "bench", "--preset", "llama3.2-1b", "--set", "train.seq_len=512", "--measured", report,
             "--project-world-size", "8"},
            &out, (tmp.path / "log").string()) != 0);
  CHECK(out.find("measured at seq_len 2048 but the projection is for train.seq_len 512") != std::string::npos);
}
