#include "bench/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "backend/backend.h"
#include "bench/backend_report.h"
#include "bench/step_bench.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "io/checkpoint_format.h"
#include "model/memory_plan.h"
#include "train/teacher_load.h"
#include "train/train_step.h"

namespace kdtrain::bench {

int64_t flop_params(const ParamLayout& layout, const ModelConfig& model) {
  int64_t n = 0;
  for (const ParamSpec& s : layout.specs) {
    if (!s.trainable() || s.role == ParamRole::embedding) continue;
    n += s.numel();
  }
  // A tied head has no spec of its own; an untied one was counted above as a matrix.
  const bool head_is_spec = layout.lm_head != layout.embed;
  if (!head_is_spec) n += model.vocab_size * model.hidden_size;
  return n;
}

namespace {
double attention_flops_coefficient(const ModelConfig& m, int64_t T) {
  return double(m.num_hidden_layers) * double(m.num_attention_heads) * double(m.head_dim) *
         double(T);
}
}  // namespace

double student_train_flops_per_token(const ModelConfig& model, const AttentionConfig& attention,
                                     int64_t T) {
  const ParamLayout layout = make_param_layout(model, attention);
  return 6.0 * double(flop_params(layout, model)) + 12.0 * attention_flops_coefficient(model, T);
}

double teacher_forward_flops_per_token(const ModelConfig& model, const AttentionConfig& attention,
                                       int64_t T) {
  const ParamLayout layout = make_param_layout(model, attention);
  return 2.0 * double(flop_params(layout, model)) + 4.0 * attention_flops_coefficient(model, T);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream s(line.substr(6));
      int64_t kb = 0;
      s >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

BenchShape resolve_bench(const BenchOptions& o) {
  BenchShape r;
  r.config = load_config(o.config_path, o.preset, o.attention, o.overrides);
  KD_CHECK(o.micro_batch >= 0 && o.seq_len >= 0, "--micro-batch and --seq-len must be >= 1");
  r.B = o.micro_batch > 0 ? o.micro_batch : r.config.train.micro_batch;
  r.T = o.seq_len > 0 ? o.seq_len : r.config.train.seq_len;
  KD_CHECK(o.steps >= 1, "--steps must be >= 1, got ", o.steps);
  KD_CHECK(o.warmup >= 0, "--warmup must be >= 0, got ", o.warmup);
  r.device = o.device.empty() ? r.config.train.device : parse_choice<Device>(o.device);
  return r;
}

nlohmann::json run_teacher_load_bench(const std::string& dir) {
  const auto start = Clock::now();
  ModelConfig m;
  AttentionConfig a;
  io::read_hf_config((std::filesystem::path(dir) / "config.json").string(), &m, &a);
  const ParamLayout layout = make_param_layout(m, a);
  constexpr size_t kStaging = size_t(64) << 20;
  std::vector<char> staging(kStaging);
  double copy_ms = 0;
  int64_t bf16_tensors = 0, bytes = 0;
  const uint64_t hash = stream_teacher(dir, m, a, layout, [&](const ParamSpec& spec, const void* values, bool bf16) {
    const size_t size = static_cast<size_t>(spec.numel()) * (bf16 ? 2 : 4);
    const auto c0 = Clock::now();
    for (size_t off = 0; off < size; off += kStaging)
      std::memcpy(staging.data(), static_cast<const char*>(values) + off, std::min(kStaging, size - off));
    copy_ms += ms_since(c0, Clock::now());
    bf16_tensors += bf16;
    bytes += static_cast<int64_t>(size);
  });
  return {{"checkpoint", dir},
          {"params", layout.total},
          {"bytes", bytes},
          {"bf16_tensors", bf16_tensors},
          {"tensors", static_cast<int64_t>(layout.specs.size())},
          {"host_s", ms_since(start, Clock::now()) / 1e3},
          {"staging_copy_s", copy_ms / 1e3},
          {"teacher_hash", hash}};
}

namespace {

// What the timed steps asked of the host, per step (the phase timer's own
// synchronisations included: one as each phase begins and one at the step's end).
nlohmann::json traffic_per_step(const BackendCounters& start, const BackendCounters& end, int64_t steps) {
  const double per = 1.0 / double(steps);
  return {{"host_waits", per * double(end.host_waits - start.host_waits)},
          {"to_host_calls", per * double(end.to_host_calls - start.to_host_calls)},
          {"to_host_bytes", per * double(end.to_host_bytes - start.to_host_bytes)},
          {"to_device_calls", per * double(end.to_device_calls - start.to_device_calls)},
          {"to_device_bytes", per * double(end.to_device_bytes - start.to_device_bytes)},
          {"allocs", per * double(end.allocs - start.allocs)}};
}

// The memory plan of the timed run (model/memory_plan.h) beside the arenas its
// models and optimizer allocated, and the backend's measured peaks.
nlohmann::json memory_report(const RunParts& parts, const MemoryPlan& plan) {
  nlohmann::json m;
  m["plan"] = to_json(plan);
  m["measured"] = measured_arenas(parts);
  m.update(measured_memory_json(*parts.backend));
  if (parts.config.train.device == Device::cpu) m["peak_rss_bytes"] = peak_rss_bytes();
  return m;
}

// Throughput and FLOPs of the timed steps (the convention of bench.h).
void add_throughput(nlohmann::json& r, const RunParts& parts, const PhaseTimer& timer, double peak_tflops) {
  const Config& c = parts.config;
  const int64_t T = c.train.seq_len;
  const double step_ms = median(timer.step_ms);
  const double tokens_per_s = step_ms > 0 ? double(c.train.micro_batch * T) / (step_ms / 1e3) : 0.0;
  const double student = student_train_flops_per_token(c.model, c.attention, T);
  const Model* teacher = parts.teacher.get();
  const double teacher_flops =
      teacher ? teacher_forward_flops_per_token(teacher->config(), teacher->attention(), T) : 0.0;
  const double achieved = (student + teacher_flops) * tokens_per_s / 1e12;
  const double peak = peak_tflops > 0 ? peak_tflops : (c.train.device == Device::cuda ? 989.0 : 0.0);
  r["params_trainable"] = parts.student->layout().trainable_count();
  r["params_flop"] = flop_params(parts.student->layout(), c.model);
  r["teacher_params_flop"] = teacher ? flop_params(teacher->layout(), teacher->config()) : 0;
  r["flops_per_token"] = {{"student_train", student}, {"teacher_forward", teacher_flops}, {"total", student + teacher_flops}};
  r["flop_formula"] =
      "student 6*N + 12*L*H*D*T (full T, no causal halving); teacher 2*N_t + 4*L_t*H_t*D_t*T; "
      "N = trainable params except the input embedding, plus the LM head V*C once";
  double sum = 0;
  for (double x : timer.step_ms) sum += x;
  r["step_ms"] = step_ms;
  r["step_ms_mean"] = timer.step_ms.empty() ? 0.0 : sum / double(timer.step_ms.size());
  const auto& p = timer.phase_ms;
  r["phase_ms"] = {{"teacher_forward", median(p[0])}, {"student_forward_loss", median(p[1])},
                   {"backward", median(p[2])}, {"optimizer", median(p[3])}};
  r["tokens_per_s"] = tokens_per_s;
  r["achieved_tflops"] = achieved;
  r["peak_tflops"] = peak > 0 ? nlohmann::json(peak) : nlohmann::json(nullptr);
  r["mfu"] = peak > 0 ? nlohmann::json(achieved / peak) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json run_bench(const BenchOptions& o) {
  const BenchShape shape = resolve_bench(o);
  KD_CHECK(shape.T <= shape.config.model.max_position_embeddings, "--seq-len ", shape.T,
           " exceeds model.max_position_embeddings ", shape.config.model.max_position_embeddings);
  KD_CHECK(o.teacher_cache == 0 || o.teacher.empty(),
           "--teacher-cache replaces the online teacher: give one of --teacher and --teacher-cache");
  const std::unique_ptr<dist::Communicator> comm = dist::make_single_communicator();
  RunParts parts(step_bench_config(shape, o), *comm, "");
  const BenchTeacher teacher = build_step_bench_parts(parts, o);
  PhaseTimer timer(*parts.backend);
  TrainStep step(parts, &timer, random_batches(parts, o));
  Backend& backend = *parts.backend;
  backend.synchronize();
  BackendCounters timed_start;
  CacheReaderCounts reader_start;
  double last_loss = 0.0;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) {
      timed_start = backend.counters();
      reader_start = reader_counts(parts);
    }
    timer.begin_step(i >= o.warmup);
    last_loss = step.run(i + 1).loss;
    timer.end_step();
  }
  const Config& c = parts.config;
  nlohmann::json r;
  r["preset"] = c.model.preset;
  r["attention"] = to_string(c.attention.variant);
  r["device"] = backend.name();
  r["act_dtype"] = backend.act_dtype() == DType::f32 ? "fp32" : "bf16";
  r["micro_batch"] = shape.B;
  r["seq_len"] = shape.T;
  r["tokens_per_step"] = shape.B * shape.T;
  r["warmup"] = o.warmup;
  r["steps"] = o.steps;
  r["teacher"] = o.teacher.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.teacher);
  r["teacher_source"] = teacher.source;
  r["teacher_ready_s"] = teacher.source == "checkpoint" ? nlohmann::json(teacher.ready_s) : nlohmann::json(nullptr);
  r["teacher_cache_k"] = o.teacher_cache;
  r["cache_tail"] = o.teacher_cache > 0 ? nlohmann::json(to_string(c.kd.cache_tail)) : nlohmann::json(nullptr);
  r["cache_reader"] = cache_reader_report(parts, reader_start);
  r["recompute"] = to_string(c.train.recompute);
  r["recompute_layers"] = c.train.recompute_layers;
  r["schedule"] = to_string(c.schedule.kind);
  add_throughput(r, parts, timer, o.peak_tflops);
  r["final_loss"] = last_loss;
  r["memory"] = memory_report(parts, plan_memory(parts.memory_plan_input()));
  r["attention_paths"] = attention_paths_json(backend);
  r["attention_path"] = attention_path_summary(r["attention_paths"]);
  r["traffic_per_step"] = traffic_per_step(timed_start, backend.counters(), o.steps);
  return r;
}

std::string format_report(const nlohmann::json& r) {
  char buf[512];
  std::string s;
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    s += buf;
  };
  const std::string teacher = r["teacher"].is_null() ? std::string("none")
                                                     : r["teacher"].get<std::string>() + " (" +
                                                           r["teacher_source"].get<std::string>() + ")";
  line("kdtrain bench: %s, attention %s, device %s (%s), B=%lld T=%lld, teacher %s\n",
       r["preset"].get<std::string>().c_str(), r["attention"].get<std::string>().c_str(),
       r["device"].get<std::string>().c_str(), r["act_dtype"].get<std::string>().c_str(),
       (long long)r["micro_batch"].get<int64_t>(), (long long)r["seq_len"].get<int64_t>(),
       teacher.c_str());
  line("  steps %lld timed after %lld warmup; medians per step\n",
       (long long)r["steps"].get<int64_t>(), (long long)r["warmup"].get<int64_t>());
  line("  step %.3f ms   tokens/s %.1f\n", r["step_ms"].get<double>(),
       r["tokens_per_s"].get<double>());
  const auto& p = r["phase_ms"];
  line("  teacher fwd %.3f ms | student fwd+loss %.3f ms | backward %.3f ms | optimizer %.3f ms\n",
       p["teacher_forward"].get<double>(), p["student_forward_loss"].get<double>(),
       p["backward"].get<double>(), p["optimizer"].get<double>());
  line("  FLOPs/token %.4g (student %.4g + teacher %.4g); achieved %.4f TFLOP/s\n",
       r["flops_per_token"]["total"].get<double>(),
       r["flops_per_token"]["student_train"].get<double>(),
       r["flops_per_token"]["teacher_forward"].get<double>(), r["achieved_tflops"].get<double>());
  if (r["mfu"].is_null())
    line("  MFU n/a (give --peak-tflops)\n");
  else
    line("  MFU %.2f%% of %.1f TFLOP/s\n", 100.0 * r["mfu"].get<double>(),
         r["peak_tflops"].get<double>());
  line("  formula: %s\n", r["flop_formula"].get<std::string>().c_str());
  const auto& m = r["memory"];
  line("  memory: the plan (model/memory_plan.h) beside the arenas this run allocated\n");
  for (const std::string& l : memory_plan_lines(m["plan"], m["measured"])) s += l + "\n";
  line("  %s", format_measured_memory(m).c_str());
  if (m.contains("peak_rss_bytes")) line(", peak RSS %.1f MiB", double(m["peak_rss_bytes"].get<int64_t>()) / (1024.0 * 1024.0));
  line("\n");
  s += format_attention_paths(r["attention_paths"]);
  return s;
}

}  // namespace kdtrain::bench
