#include "bench/scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "bench/bench.h"
#include "core/error.h"
#include "dist/grad_reducer.h"
#include "io/file_util.h"
#include "model/param_layout.h"

namespace kdtrain::bench {

MeasuredStep measured_step_from_report(const nlohmann::json& report, const std::string& source) {
  auto need = [&](const nlohmann::json& obj, const char* key) -> const nlohmann::json& {
    KD_CHECK(obj.is_object() && obj.contains(key) && !obj[key].is_null(), source, ": no '", key,
             "' (expected the JSON report of `kdtrain bench --json`)");
    return obj[key];
  };
  MeasuredStep s;
  s.source = source;
  s.preset = need(report, "preset").get<std::string>();
  s.micro_batch = need(report, "micro_batch").get<int64_t>();
  s.seq_len = need(report, "seq_len").get<int64_t>();
  const nlohmann::json& phases = need(report, "phase_ms");
  s.teacher_s = need(phases, "teacher_forward").get<double>() / 1e3;
  s.forward_loss_s = need(phases, "student_forward_loss").get<double>() / 1e3;
  s.backward_s = need(phases, "backward").get<double>() / 1e3;
  s.optimizer_s = need(phases, "optimizer").get<double>() / 1e3;
  KD_CHECK(s.micro_batch > 0 && s.seq_len > 0 && s.backward_s > 0, source,
           ": micro_batch, seq_len and phase_ms.backward must be positive");
  return s;
}

MeasuredStep scale_measured_step(const MeasuredStep& measured, const ModelConfig& from,
                                 const ModelConfig& to, const AttentionConfig& attention,
                                 const ModelConfig* teacher) {
  const int64_t T = measured.seq_len;
  const double from_flops = student_train_flops_per_token(from, attention, T);
  const double to_flops = student_train_flops_per_token(to, attention, T);
  // The measured student's achieved rate, FLOPs per second of forward+loss+backward.
  const double tokens = double(measured.micro_batch) * double(T);
  const double rate = from_flops * tokens / (measured.forward_loss_s + measured.backward_s);
  MeasuredStep s = measured;
  s.preset = to.preset;
  s.forward_loss_s *= to_flops / from_flops;
  s.backward_s *= to_flops / from_flops;
  const double from_params = double(make_param_layout(from, attention).trainable_count());
  s.optimizer_s *= double(make_param_layout(to, attention).trainable_count()) / from_params;
  if (teacher) {
    AttentionConfig baseline;
    s.teacher_s = teacher_forward_flops_per_token(*teacher, baseline, T) * tokens / rate;
  }
  return s;
}

namespace {
bool one_node(int world, const Interconnect& links) { return world <= links.gpus_per_node; }
}  // namespace

double ring_hop_latency_s(int world, const Interconnect& links) {
  if (world <= 1) return 0.0;
  if (one_node(world, links)) return (world - 1) * links.nvlink_hop_us * 1e-6;
  const int nodes = (world + links.gpus_per_node - 1) / links.gpus_per_node;
  return ((world - nodes) * links.nvlink_hop_us + nodes * links.network_hop_us) * 1e-6;
}

double ring_bandwidth_bytes_s(int world, const Interconnect& links) {
  const double gb_s = one_node(world, links) ? links.nvlink_gb_s
                                             : std::min(links.nvlink_gb_s, links.network_gb_s);
  return gb_s * 1e9;
}

double bucket_reduce_s(double bytes, int world, const Interconnect& links) {
  if (world <= 1) return 0.0;
  return bytes / ring_bandwidth_bytes_s(world, links) + ring_hop_latency_s(world, links);
}

double all_gather_s(double bytes, int world, const Interconnect& links) {
  if (world <= 1) return 0.0;
  return bytes * (world - 1) / world / ring_bandwidth_bytes_s(world, links) +
         ring_hop_latency_s(world, links);
}

std::vector<ReadyRange> backward_ready_profile(const ModelConfig& model, const AttentionConfig& attention) {
  const ParamLayout layout = make_param_layout(model, attention);
  const int64_t VC = model.vocab_size * model.hidden_size;
  const int64_t L = model.num_hidden_layers;
  std::vector<ReadyRange> profile;
  if (layout.lm_head != layout.embed) profile.push_back({{layout.lm_head, layout.lm_head + VC}, 0.0});
  profile.push_back({{layout.final_norm, layout.final_norm + model.hidden_size}, 0.0});
  for (int64_t l = L - 1; l >= 0; --l)
    profile.push_back({{layout.layers[l].begin, layout.layers[l].end}, double(L - l) / double(L)});
  profile.push_back({{layout.embed, layout.embed + VC}, 1.0});
  return profile;
}

Projection project(const ScalingSetup& setup, int world) {
  const MeasuredStep& m = setup.step;
  KD_CHECK(world >= 1 && world <= setup.global_batch, "world size ", world,
           " must be between 1 and the global batch (", setup.global_batch, " sequences)");
  Projection p;
  p.world = world;
  const int64_t wanted = setup.micro_batch > 0 ? setup.micro_batch : m.micro_batch;
  p.micro_batch = std::min<int64_t>(wanted, setup.global_batch / world);
  p.micro_batches = (setup.global_batch + world * p.micro_batch - 1) / (world * p.micro_batch);
  const double scale = double(p.micro_batch) / double(m.micro_batch);
  p.last_backward_s = m.backward_s * scale;
  p.compute_s = p.micro_batches * (m.teacher_s + m.forward_loss_s + m.backward_s) * scale + m.optimizer_s;

  const ParamLayout layout = make_param_layout(setup.model, setup.attention);
  const std::vector<ReadyRange> profile = backward_ready_profile(setup.model, setup.attention);
  const double element_bytes = setup.bf16_reduce ? 2.0 : 4.0;
  double comm_end = 0.0;  // the communication stream, from the start of the last backward
  for (const dist::Range& bucket : dist::plan_buckets(layout.total, setup.bucket_elements)) {
    double ready = 0.0;
    for (const ReadyRange& r : profile)
      if (r.range.begin < bucket.end && bucket.begin < r.range.end) ready = std::max(ready, r.at);
    const double cost = bucket_reduce_s(element_bytes * double(bucket.size()), world, setup.links);
    comm_end = std::max(comm_end, ready * p.last_backward_s) + cost;
    p.reduce_s += cost;
  }
  p.reduce_exposed_s = world > 1 ? std::max(0.0, comm_end - p.last_backward_s) : 0.0;
  p.all_gather_s = all_gather_s(4.0 * double(layout.total), world, setup.links);
  // Loss sums, the stop flag and the norm: small all-reduces over a tree.
  const double tree_hops = world > 1 ? 2.0 * std::ceil(std::log2(double(world))) : 0.0;
  p.host_s = 3.0 * tree_hops *
             (one_node(world, setup.links) ? setup.links.nvlink_hop_us : setup.links.network_hop_us) * 1e-6;
  p.step_s = p.compute_s + p.reduce_exposed_s + p.all_gather_s + p.host_s;
  p.tokens_per_s_per_gpu = double(p.micro_batches * p.micro_batch * m.seq_len) / p.step_s;
  const double comm = p.reduce_s + p.all_gather_s + p.host_s;
  p.hidden_fraction = comm > 0 ? (p.reduce_s - p.reduce_exposed_s) / comm : 0.0;
  return p;
}

nlohmann::json projection_json(const ScalingSetup& setup, const std::vector<Projection>& rows) {
  nlohmann::json j;
  const MeasuredStep& m = setup.step;
  j["measured"] = {{"source", m.source},          {"preset", m.preset},
                   {"micro_batch", m.micro_batch}, {"seq_len", m.seq_len},
                   {"teacher_ms", m.teacher_s * 1e3}, {"forward_loss_ms", m.forward_loss_s * 1e3},
                   {"backward_ms", m.backward_s * 1e3}, {"optimizer_ms", m.optimizer_s * 1e3}};
  const int64_t n = make_param_layout(setup.model, setup.attention).total;
  j["gradient_elements"] = n;
  j["reduce_bytes_per_step"] = (setup.bf16_reduce ? 2.0 : 4.0) * double(n);
  j["all_gather_bytes_per_step"] = 4.0 * double(n);
  j["bucket_elements"] = setup.bucket_elements;
  j["buckets"] = dist::plan_buckets(n, setup.bucket_elements).size();
  j["reduce_dtype"] = setup.bf16_reduce ? "bf16" : "fp32";
  j["global_batch"] = setup.global_batch;
  j["micro_batch"] = setup.micro_batch > 0 ? setup.micro_batch : m.micro_batch;
  j["interconnect"] = {{"nvlink_gb_s", setup.links.nvlink_gb_s},   {"network_gb_s", setup.links.network_gb_s},
                       {"gpus_per_node", setup.links.gpus_per_node}, {"nvlink_hop_us", setup.links.nvlink_hop_us},
                       {"network_hop_us", setup.links.network_hop_us}};
  nlohmann::json out = nlohmann::json::array();
  for (const Projection& p : rows)
    out.push_back({{"world", p.world},
                   {"micro_batch", p.micro_batch},
                   {"micro_batches", p.micro_batches},
                   {"compute_ms", p.compute_s * 1e3},
                   {"last_backward_ms", p.last_backward_s * 1e3},
                   {"reduce_ms", p.reduce_s * 1e3},
                   {"reduce_exposed_ms", p.reduce_exposed_s * 1e3},
                   {"all_gather_ms", p.all_gather_s * 1e3},
                   {"host_ms", p.host_s * 1e3},
                   {"step_ms", p.step_s * 1e3},
                   {"tokens_per_s_per_gpu", p.tokens_per_s_per_gpu},
                   {"tokens_per_s", p.tokens_per_s_per_gpu * p.world},
                   {"communication_hidden", p.hidden_fraction}});
  j["projection"] = out;
  return j;
}

nlohmann::json run_projection(const BenchOptions& options, const std::string& measured_path,
                              const Interconnect& links, const std::vector<int>& worlds) {
  KD_CHECK(!worlds.empty(), "--project-world-size: give at least one world size");
  const Config c = load_config(options.config_path, options.preset, options.attention, options.overrides);
  ScalingSetup setup;
  setup.model = c.model;
  setup.attention = c.attention;
  setup.global_batch = c.train.global_batch;
  setup.micro_batch = options.micro_batch > 0 ? options.micro_batch : c.train.micro_batch;
  setup.bucket_elements = dist::bucket_elements_for_mib(c.dist.bucket_mb);
  setup.bf16_reduce = c.dist.reduce_dtype == ReduceDtype::bf16;
  setup.links = links;
  KD_CHECK(links.nvlink_gb_s > 0 && links.network_gb_s > 0 && links.gpus_per_node >= 1 &&
               links.nvlink_hop_us >= 0 && links.network_hop_us >= 0,
           "--nvlink-gb-s, --network-gb-s and --gpus-per-node must be positive");
  std::string scaled;
  if (measured_path.empty()) {
    setup.step = measured_step_from_report(run_bench(options), "kdtrain bench, this run");
  } else {
    const MeasuredStep measured = measured_step_from_report(read_json_file(measured_path), measured_path);
    const int64_t T = options.seq_len > 0 ? options.seq_len : c.train.seq_len;
    KD_CHECK(measured.seq_len == T, "--measured ", measured_path, " was measured at seq_len ", measured.seq_len,
             " but the projection is for train.seq_len ", T, "; measure at that length");
    const ModelConfig measured_model = model_preset(measured.preset);
    ModelConfig teacher;
    if (!options.teacher.empty()) teacher = model_preset(options.teacher);
    const bool other_student = measured.preset != c.model.preset;
    if (other_student || !options.teacher.empty()) {
      setup.step = scale_measured_step(measured, measured_model, c.model, c.attention,
                                       options.teacher.empty() ? nullptr : &teacher);
      scaled = "from " + measured.preset + (options.teacher.empty() ? "" : ", teacher " + options.teacher) +
               " at the measured achieved FLOP rate";
    } else {
      setup.step = measured;
    }
  }
  std::vector<Projection> rows;
  for (int w : worlds) rows.push_back(project(setup, w));
  nlohmann::json j = projection_json(setup, rows);
  if (!scaled.empty()) j["measured"]["scaled"] = scaled;
  return j;
}

std::string format_projection(const nlohmann::json& j) {
  const nlohmann::json& m = j["measured"];
  const nlohmann::json& links = j["interconnect"];
  std::ostringstream o;
  char line[640];
  std::snprintf(line, sizeof line,
                "scaling model: %s, global batch %lld x %lld tokens\n"
                "  one GPU, micro-batch %lld: teacher %.1f, forward+loss %.1f, backward %.1f, optimizer %.1f ms"
                " (%s%s%s)\n",
                m["preset"].get<std::string>().c_str(), j["global_batch"].get<long long>(),
                m["seq_len"].get<long long>(), m["micro_batch"].get<long long>(), m["teacher_ms"].get<double>(),
                m["forward_loss_ms"].get<double>(), m["backward_ms"].get<double>(),
                m["optimizer_ms"].get<double>(), m["source"].get<std::string>().c_str(),
                m.contains("scaled") ? "; scaled " : "",
                m.contains("scaled") ? m["scaled"].get<std::string>().c_str() : "");
  o << line;
  std::snprintf(line, sizeof line,
                "  gradients %.2f GB %s in %lld buckets; ZeRO-1 all-gather %.2f GB fp32; NVLink %g GB/s, "
                "network %g GB/s per GPU, %d GPUs per node\n",
                j["reduce_bytes_per_step"].get<double>() / 1e9, j["reduce_dtype"].get<std::string>().c_str(),
                j["buckets"].get<long long>(), j["all_gather_bytes_per_step"].get<double>() / 1e9,
                links["nvlink_gb_s"].get<double>(), links["network_gb_s"].get<double>(),
                links["gpus_per_node"].get<int>());
  o << line;
  o << "  GPUs  micro-batches  compute ms  reduce ms (exposed)  all-gather ms  step ms  tokens/s/GPU  "
       "tokens/s  comm hidden\n";
  for (const nlohmann::json& p : j["projection"]) {
    std::snprintf(line, sizeof line,
                  "  %4d  %6lld x %-4lld %10.1f  %9.1f (%7.1f)  %13.1f  %7.1f  %12.0f  %8.3g  %10.1f%%\n",
                  p["world"].get<int>(), p["micro_batches"].get<long long>(), p["micro_batch"].get<long long>(),
                  p["compute_ms"].get<double>(), p["reduce_ms"].get<double>(), p["reduce_exposed_ms"].get<double>(),
                  p["all_gather_ms"].get<double>(), p["step_ms"].get<double>(),
                  p["tokens_per_s_per_gpu"].get<double>(), p["tokens_per_s"].get<double>(),
                  100.0 * p["communication_hidden"].get<double>());
    o << line;
  }
  return o.str();
}

}  // namespace kdtrain::bench
