#include "bench/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "backend/backend.h"
#include "bench/backend_report.h"
#include "core/error.h"
#include "model/init.h"
#include "model/cached_teacher_loss.h"
#include "model/loss.h"
#include "model/model.h"
#include "train/teacher_load.h"
#include "io/checkpoint_format.h"
#include "train/optimizer.h"

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

struct Teacher {
  std::unique_ptr<Model> model;
  std::string source;  // "preset (random init)" or "checkpoint"
  double ready_s = 0;  // a checkpoint's: mapped, checked, uploaded and hashed (train/teacher_load.h)
};

// N rows of a cached top-K teacher: K distinct random ids per row, log-probabilities
// of a random softmax over them holding 90% of the mass, log(0.1) for the tail.
CachedRows random_cached_rows(int64_t N, int64_t V, int64_t K, uint64_t seed) {
  KD_CHECK(K >= 1 && K <= V, "--teacher-cache ", K, " must be in [1, vocab_size = ", V, "]");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
  std::normal_distribution<float> logit(0.f, 2.f);
  CachedRows rows;
  rows.K = K;
  std::vector<int32_t> taken(static_cast<size_t>(V), -1);
  std::vector<float> z(static_cast<size_t>(K));
  for (int64_t r = 0; r < N; ++r) {
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      int32_t id = pick(rng);
      while (taken[id] == r) id = (id + 1) % static_cast<int32_t>(V);
      taken[id] = static_cast<int32_t>(r);
      rows.ids.push_back(id);
      z[k] = logit(rng);
      sum += std::exp(double(z[k]));
    }
    for (int64_t k = 0; k < K; ++k)
      rows.logp.push_back(static_cast<float>(double(z[k]) - std::log(sum) + std::log(0.9)));
    rows.log_tail.push_back(static_cast<float>(std::log(0.1)));
  }
  return rows;
}

// What both benches resolve first: the command line's config, B and T (the
// flags over train.*), the step counts, and the device (the flag over train.device).
struct Resolved {
  Config c;
  int64_t B = 0, T = 0;
  Device device;
};
Resolved resolve(const BenchOptions& o) {
  Resolved r;
  r.c = load_config(o.config_path, o.preset, o.attention, o.overrides);
  KD_CHECK(o.micro_batch >= 0 && o.seq_len >= 0, "--micro-batch and --seq-len must be >= 1");
  r.B = o.micro_batch > 0 ? o.micro_batch : r.c.train.micro_batch;
  r.T = o.seq_len > 0 ? o.seq_len : r.c.train.seq_len;
  KD_CHECK(o.steps >= 1, "--steps must be >= 1, got ", o.steps);
  KD_CHECK(o.warmup >= 0, "--warmup must be >= 0, got ", o.warmup);
  r.device = o.device.empty() ? r.c.train.device : parse_choice<Device>(o.device);
  return r;
}

Teacher make_teacher(const std::string& spec, const ModelConfig& student, Backend& backend,
                     uint64_t seed) {
  Teacher t;
  if (spec.empty()) return t;
  if (std::filesystem::is_directory(spec)) {
    const auto start = Clock::now();
    t.model = load_teacher(spec, backend, student.vocab_size, "--teacher").model;
    backend.synchronize();
    t.ready_s = ms_since(start, Clock::now()) / 1e3;
    t.source = "checkpoint";
  } else {
    ModelConfig m = model_preset(spec);
    KD_CHECK(m.vocab_size == student.vocab_size, "--teacher: preset ", spec, " has vocab_size ",
             m.vocab_size, " but the student has ", student.vocab_size);
    AttentionConfig a;  // teachers are baseline models
    t.model = std::make_unique<Model>(m, a, backend, ModelUse::teacher);
    t.model->set_params(init_params(t.model->layout(), m, a, seed + 1));
    t.source = "preset (random init)";
  }
  return t;
}

}  // namespace

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

nlohmann::json run_bench(const BenchOptions& o) {
  const auto [c, B, T, device] = resolve(o);
  KD_CHECK(T <= c.model.max_position_embeddings, "--seq-len ", T,
           " exceeds model.max_position_embeddings ", c.model.max_position_embeddings);

  std::unique_ptr<Backend> backend = make_backend(device, c.train.threads, c.train.attention_forward);
  Model student(c.model, c.attention, *backend, true);
  student.set_recompute(recompute_plan(c.train));
  student.set_params(init_params(student.layout(), c.model, c.attention, o.seed));
  KD_CHECK(o.teacher_cache == 0 || o.teacher.empty(),
           "--teacher-cache replaces the online teacher: give one of --teacher and --teacher-cache");
  Teacher teacher = make_teacher(o.teacher, c.model, *backend, o.seed);
  AdamW optimizer(student, c.optimizer);
  FusedLoss loss(*backend);
  LossSettings settings;
  settings.kd_loss = c.kd.loss;
  settings.temperature = static_cast<float>(c.kd.temperature);
  settings.kd_weight = static_cast<float>(c.kd.weight);
  settings.chunk_tokens = c.kd.chunk_tokens;

  // Random tokens, fixed seed: inputs are the first T of T+1, targets the last T.
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.model.vocab_size - 1));
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int64_t b = 0; b < B; ++b) {
    int32_t previous = pick(rng);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t next = pick(rng);
      inputs[b * T + t] = previous;
      targets[b * T + t] = next;
      previous = next;
    }
  }
  const float grad_scale = 1.0f / float(B * T);
  const CachedRows cached =
      o.teacher_cache > 0 ? random_cached_rows(B * T, c.model.vocab_size, o.teacher_cache, o.seed + 2)
                          : CachedRows{};
  const float lr = static_cast<float>(c.optimizer.lr);

  std::vector<double> t_teacher, t_student, t_backward, t_optim, t_step;
  double last_loss = 0.0;
  backend->synchronize();
  BackendCounters timed_start;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) timed_start = backend->counters();
    const auto a = Clock::now();
    if (teacher.model) teacher.model->forward(inputs.data(), B, T, false);
    backend->synchronize();
    const auto b = Clock::now();
    student.forward(inputs.data(), B, T, true);
    const LossSums sums =
        o.teacher_cache > 0
            ? run_cached_loss(loss, student, cached, c.kd.cache_tail, targets.data(), settings,
                              grad_scale, true)
            : loss.run(student, teacher.model.get(), targets.data(), settings, grad_scale, true);
    backend->synchronize();
    const auto d = Clock::now();
    student.backward();
    backend->synchronize();
    const auto e = Clock::now();
    const double norm = std::sqrt(optimizer.grad_sum_squares());
    optimizer.step(lr, clip_scale(norm, c.optimizer.grad_clip));
    int64_t counted = 0;
    student.variant().take_alpha_sums(&counted);
    student.zero_grads();
    backend->synchronize();
    const auto f = Clock::now();
    last_loss = sums.mixed(settings.kd_weight, teacher.model != nullptr || o.teacher_cache > 0);
    if (i < o.warmup) continue;
    t_teacher.push_back(ms_since(a, b));
    t_student.push_back(ms_since(b, d));
    t_backward.push_back(ms_since(d, e));
    t_optim.push_back(ms_since(e, f));
    t_step.push_back(ms_since(a, f));
  }

  // What the timed steps asked of the host, per step (the bench's own phase
  // synchronisations included: 4 per step).
  const BackendCounters& end = backend->counters();
  const double per = 1.0 / double(o.steps);
  const nlohmann::json traffic = {
      {"host_waits", per * double(end.host_waits - timed_start.host_waits)},
      {"to_host_calls", per * double(end.to_host_calls - timed_start.to_host_calls)},
      {"to_host_bytes", per * double(end.to_host_bytes - timed_start.to_host_bytes)},
      {"to_device_calls", per * double(end.to_device_calls - timed_start.to_device_calls)},
      {"to_device_bytes", per * double(end.to_device_bytes - timed_start.to_device_bytes)},
      {"allocs", per * double(end.allocs - timed_start.allocs)}};
  const double tokens = double(B) * double(T);
  const double step_ms = median(t_step);
  const double tokens_per_s = step_ms > 0 ? tokens / (step_ms / 1e3) : 0.0;
  const double student_flops = student_train_flops_per_token(c.model, c.attention, T);
  const double teacher_flops =
      teacher.model ? teacher_forward_flops_per_token(teacher.model->config(),
                                                      teacher.model->attention(), T)
                    : 0.0;
  const double flops_per_token = student_flops + teacher_flops;
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : (device == Device::cuda ? 989.0 : 0.0);
  const double achieved_tflops = flops_per_token * tokens_per_s / 1e12;

  const ParamLayout& layout = student.layout();
  const double act = double(dtype_size(backend->act_dtype()));
  const double master = 4.0 * double(layout.total);
  const double compute_copy = backend->act_dtype() == DType::f32 ? 0.0 : act * double(layout.total);
  nlohmann::json mem = {
      {"params_bytes", master + compute_copy},
      {"grads_bytes", 4.0 * double(layout.total)},
      {"optimizer_bytes", 8.0 * double(optimizer.shard_end() - optimizer.shard_begin())},
      // The arenas as allocated (model/activations.h), student and teacher.
      {"activations_bytes",
       double(student.activation_bytes()) +
           double(teacher.model ? teacher.model->activation_bytes() : size_t(0))},
      {"teacher_params_bytes",  // the compute copy only (ModelUse::teacher)
       teacher.model ? (backend->act_dtype() == DType::f32 ? 4.0 : act) *
                           double(teacher.model->layout().total)
                     : 0.0},
  };
  mem.update(measured_memory_json(*backend));
  if (device == Device::cpu) mem["peak_rss_bytes"] = peak_rss_bytes();

  nlohmann::json r;
  r["preset"] = c.model.preset;
  r["attention"] = to_string(c.attention.variant);
  r["device"] = backend->name();
  r["act_dtype"] = backend->act_dtype() == DType::f32 ? "fp32" : "bf16";
  r["micro_batch"] = B;
  r["seq_len"] = T;
  r["tokens_per_step"] = B * T;
  r["warmup"] = o.warmup;
  r["steps"] = o.steps;
  r["teacher"] = o.teacher.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.teacher);
  r["teacher_source"] = teacher.source;
  r["teacher_ready_s"] = teacher.source == "checkpoint" ? nlohmann::json(teacher.ready_s)
                                                        : nlohmann::json(nullptr);
  r["teacher_cache_k"] = o.teacher_cache;
  r["cache_tail"] = o.teacher_cache > 0 ? nlohmann::json(to_string(c.kd.cache_tail))
                                        : nlohmann::json(nullptr);
  r["recompute"] = to_string(c.train.recompute);
  r["recompute_layers"] = c.train.recompute_layers;
  r["params_trainable"] = layout.trainable_count();
  r["params_flop"] = flop_params(layout, c.model);
  r["teacher_params_flop"] =
      teacher.model ? flop_params(teacher.model->layout(), teacher.model->config()) : 0;
  r["flops_per_token"] = {{"student_train", student_flops},
                          {"teacher_forward", teacher_flops},
                          {"total", flops_per_token}};
  r["flop_formula"] =
      "student 6*N + 12*L*H*D*T (full T, no causal halving); teacher 2*N_t + 4*L_t*H_t*D_t*T; "
      "N = trainable params except the input embedding, plus the LM head V*C once";
  r["step_ms"] = step_ms;
  r["step_ms_mean"] = t_step.empty() ? 0.0 : [&] {
    double s = 0;
    for (double x : t_step) s += x;
    return s / double(t_step.size());
  }();
  r["phase_ms"] = {{"teacher_forward", median(t_teacher)},
                   {"student_forward_loss", median(t_student)},
                   {"backward", median(t_backward)},
                   {"optimizer", median(t_optim)}};
  r["tokens_per_s"] = tokens_per_s;
  r["achieved_tflops"] = achieved_tflops;
  r["peak_tflops"] = peak > 0 ? nlohmann::json(peak) : nlohmann::json(nullptr);
  r["mfu"] = peak > 0 ? nlohmann::json(achieved_tflops / peak) : nlohmann::json(nullptr);
  r["final_loss"] = last_loss;
  r["memory"] = mem;
  r["attention_paths"] = attention_paths_json(*backend);
  r["attention_path"] = attention_path_summary(r["attention_paths"]);
  r["traffic_per_step"] = traffic;
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
  const double MiB = 1024.0 * 1024.0;
  line("  memory: params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, activations %.2f MiB",
       m["params_bytes"].get<double>() / MiB, m["grads_bytes"].get<double>() / MiB,
       m["optimizer_bytes"].get<double>() / MiB, m["activations_bytes"].get<double>() / MiB);
  if (m.contains("peak_rss_bytes"))
    line(", peak RSS %.1f MiB\n", double(m["peak_rss_bytes"].get<int64_t>()) / MiB);
  else
    line("\n");
  line("  %s\n", format_measured_memory(m).c_str());
  s += format_attention_paths(r["attention_paths"]);
  return s;
}

}  // namespace kdtrain::bench

namespace kdtrain::bench {

double attention_fwd_bwd_flops(int64_t B, int64_t H, int64_t T, int64_t D) {
  return 3.5 * 4.0 * double(B) * double(H) * double(T) * double(T) * double(D) / 2.0;
}

namespace {

// A buffer in backend memory filled from host fp32 values (converted to the act dtype
// unless `f32`).
struct DeviceBuffer {
  Backend& backend;
  void* ptr = nullptr;
  DeviceBuffer(Backend& b, const std::vector<float>& host, bool f32) : backend(b) {
    const size_t n = host.size();
    ptr = backend.alloc(n * (f32 ? 4 : dtype_size(backend.act_dtype())));
    if (f32) {
      backend.to_device(ptr, host.data(), n * 4);
    } else {
      float* staging = static_cast<float*>(backend.alloc(n * 4));
      backend.to_device(staging, host.data(), n * 4);
      backend.convert_from_f32(ptr, staging, static_cast<int64_t>(n));
      backend.synchronize();
      backend.release(staging);
    }
  }
  ~DeviceBuffer() { backend.release(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::vector<float> random_values(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

nlohmann::json run_attention_bench(const BenchOptions& o) {
  const auto [c, B, T, device] = resolve(o);
  const int64_t H0 = c.model.num_attention_heads, D0 = c.model.head_dim;
  const int64_t group = H0 / c.model.num_key_value_heads;
  const int64_t D = o.head_dim > 0 ? o.head_dim : D0;
  KD_CHECK((H0 * D0) % D == 0, "--head-dim ", D, " does not divide H*D = ", H0 * D0);
  const int64_t H = H0 * D0 / D;
  const int64_t Hkv = std::max<int64_t>(1, H / group);
  KD_CHECK(H % Hkv == 0, "--head-dim ", D, ": ", H, " heads do not split into groups of ", group);
  const AttentionVariant v = c.attention.variant;
  const AttentionFeatures f = features_of(c.attention);

  std::unique_ptr<Backend> backend = make_backend(device, c.train.threads, c.train.attention_forward);
  Backend& be = *backend;
  std::mt19937_64 rng(o.seed);
  const int64_t N = B * T;
  DeviceBuffer qkv(be, random_values(rng, N * (H + 2 * Hkv) * D, -1.f, 1.f), false);
  DeviceBuffer sinks(be, random_values(rng, H, -0.05f, 0.05f), true);
  DeviceBuffer alpha(be, random_values(rng, N * H, 0.f, 1.f), false);
  DeviceBuffer alpha_ma(be, std::vector<float>(static_cast<size_t>(H), 0.5f), true);
  DeviceBuffer gate(be, random_values(rng, N * H * D, -2.f, 2.f), false);
  DeviceBuffer dout(be, random_values(rng, N * H * D, -1.f, 1.f), false);
  const std::vector<float> zeros_hd(static_cast<size_t>(N * H * D), 0.f);
  DeviceBuffer out(be, zeros_hd, false), gated(be, zeros_hd, false), dcore(be, zeros_hd, false),
      dgate(be, zeros_hd, false);
  DeviceBuffer lse(be, std::vector<float>(static_cast<size_t>(N * H), 0.f), true);
  DeviceBuffer dqkv(be, std::vector<float>(static_cast<size_t>(N * (H + 2 * Hkv) * D), 0.f), false);
  DeviceBuffer dsinks(be, std::vector<float>(static_cast<size_t>(H), 0.f), true);
  DeviceBuffer dalpha(be, std::vector<float>(static_cast<size_t>(N * H), 0.f), false);

  AttentionForwardArgs fa;
  fa.shape = {B, T, H, Hkv, D};
  fa.features = f;
  fa.scale = 1.0f / std::sqrt(float(D));
  fa.qkv = qkv.ptr;
  fa.sinks = f.sink ? static_cast<const float*>(sinks.ptr) : nullptr;
  fa.alpha = f.affine ? alpha.ptr : nullptr;
  fa.alpha_ma = f.affine ? static_cast<const float*>(alpha_ma.ptr) : nullptr;
  fa.out = out.ptr;
  fa.lse = static_cast<float*>(lse.ptr);
  AttentionBackwardArgs ba = attention_backward_args(fa);
  ba.dout = f.gate ? dcore.ptr : dout.ptr;
  ba.dqkv = dqkv.ptr;
  ba.dsinks = f.sink ? static_cast<float*>(dsinks.ptr) : nullptr;
  ba.dalpha = f.affine ? dalpha.ptr : nullptr;
  const int64_t n_out = N * H * D;

  std::vector<double> t_fwd, t_bwd;
  be.synchronize();
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    const auto a = Clock::now();
    be.attention_forward(fa);
    if (f.gate) be.sigmoid_gate_forward(gated.ptr, out.ptr, gate.ptr, n_out);
    be.synchronize();
    const auto b = Clock::now();
    if (f.gate) be.sigmoid_gate_backward(dcore.ptr, dgate.ptr, dout.ptr, out.ptr, gate.ptr, n_out);
    be.attention_backward(ba);
    be.synchronize();
    const auto d = Clock::now();
    if (i < o.warmup) continue;
    t_fwd.push_back(ms_since(a, b));
    t_bwd.push_back(ms_since(b, d));
  }
  std::vector<double> t_total(t_fwd.size());
  for (size_t i = 0; i < t_fwd.size(); ++i) t_total[i] = t_fwd[i] + t_bwd[i];
  const double ms = median(t_total);
  const double flops = attention_fwd_bwd_flops(B, H, T, D);
  nlohmann::json r;
  r["mode"] = "attention-only";
  r["preset"] = c.model.preset;
  r["attention"] = to_string(v);
  r["device"] = be.name();
  r["act_dtype"] = be.act_dtype() == DType::f32 ? "fp32" : "bf16";
  r["B"] = B;
  r["T"] = T;
  r["H"] = H;
  r["Hkv"] = Hkv;
  r["D"] = D;
  r["warmup"] = o.warmup;
  r["steps"] = o.steps;
  r["forward_ms"] = median(t_fwd);
  r["backward_ms"] = median(t_bwd);
  r["fwd_bwd_ms"] = ms;
  r["flops_fwd_bwd"] = flops;
  r["tflops"] = ms > 0 ? flops / (ms / 1e3) / 1e12 : 0.0;
  r["flop_convention"] = "causal fwd 4*B*H*T^2*D/2; fwd+bwd = 3.5 x fwd; variant extras not counted";
  r["includes"] = f.gate ? "attention core + sigmoid gate op" : "attention core";
  r["attention_paths"] = attention_paths_json(be);
  r["attention_path"] = attention_path_summary(r["attention_paths"]);
  return r;
}

std::string format_attention_report(const nlohmann::json& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "kdtrain bench --attention-only: %s on %s (%s), B=%lld T=%lld H=%lld Hkv=%lld D=%lld\n"
                "  forward %.3f ms  backward %.3f ms  fwd+bwd %.3f ms  %.4f TFLOP/s\n  FLOPs: %s\n",
                r["attention"].get<std::string>().c_str(), r["device"].get<std::string>().c_str(),
                r["act_dtype"].get<std::string>().c_str(), (long long)r["B"].get<int64_t>(),
                (long long)r["T"].get<int64_t>(), (long long)r["H"].get<int64_t>(),
                (long long)r["Hkv"].get<int64_t>(), (long long)r["D"].get<int64_t>(),
                r["forward_ms"].get<double>(), r["backward_ms"].get<double>(),
                r["fwd_bwd_ms"].get<double>(), r["tflops"].get<double>(),
                r["flop_convention"].get<std::string>().c_str());
  return buf + format_attention_paths(r["attention_paths"]);
}

}  // namespace kdtrain::bench
