// kdtrain bench --attention-only: the backend's attention core (and the gate op
// of the gated variants) forward and backward on random inputs (bench.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "backend/backend.h"
#include "bench/backend_report.h"
#include "bench/bench.h"
#include "core/error.h"
#include "core/kernel_timer.h"

namespace kdtrain::bench {

double attention_fwd_bwd_flops(int64_t B, int64_t H, int64_t T, int64_t D) {
  return 3.5 * 4.0 * double(B) * double(H) * double(T) * double(T) * double(D) / 2.0;
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

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

namespace {

// The heads of --head-dim D: H = H0*D0/D query heads, the GQA ratio kept.
struct HeadShape {
  int64_t H = 0, Hkv = 0, D = 0;
};
HeadShape attention_heads(const ModelConfig& m, int64_t head_dim) {
  const int64_t H0 = m.num_attention_heads, D0 = m.head_dim;
  const int64_t group = H0 / m.num_key_value_heads;
  HeadShape s;
  s.D = head_dim > 0 ? head_dim : D0;
  KD_CHECK((H0 * D0) % s.D == 0, "--head-dim ", s.D, " does not divide H*D = ", H0 * D0);
  s.H = H0 * D0 / s.D;
  s.Hkv = std::max<int64_t>(1, s.H / group);
  KD_CHECK(s.H % s.Hkv == 0, "--head-dim ", s.D, ": ", s.H, " heads do not split into groups of ", group);
  return s;
}

// Every input, output and gradient of one attention call, random where read.
struct AttentionBuffers {
  AttentionBuffers(Backend& be, int64_t N, const HeadShape& s, uint64_t seed)
      : rng(seed),
        qkv(be, random_values(rng, N * (s.H + 2 * s.Hkv) * s.D, -1.f, 1.f), false),
        sinks(be, random_values(rng, s.H, -0.05f, 0.05f), true),
        alpha(be, random_values(rng, N * s.H, 0.f, 1.f), false),
        alpha_ma(be, std::vector<float>(static_cast<size_t>(s.H), 0.5f), true),
        gate(be, random_values(rng, N * s.H * s.D, -2.f, 2.f), false),
        dout(be, random_values(rng, N * s.H * s.D, -1.f, 1.f), false),
        out(be, zeros(N * s.H * s.D), false), gated(be, zeros(N * s.H * s.D), false),
        dcore(be, zeros(N * s.H * s.D), false), dgate(be, zeros(N * s.H * s.D), false),
        lse(be, zeros(N * s.H), true), dqkv(be, zeros(N * (s.H + 2 * s.Hkv) * s.D), false),
        dsinks(be, zeros(s.H), true), dalpha(be, zeros(N * s.H), false) {}
  static std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.f); }
  std::mt19937_64 rng;
  DeviceBuffer qkv, sinks, alpha, alpha_ma, gate, dout, out, gated, dcore, dgate, lse, dqkv, dsinks, dalpha;
};

AttentionForwardArgs forward_args(AttentionBuffers& b, const AttentionShape& shape, AttentionFeatures f) {
  AttentionForwardArgs fa;
  fa.shape = shape;
  fa.features = f;
  fa.scale = 1.0f / std::sqrt(float(shape.D));
  fa.qkv = b.qkv.ptr;
  fa.sinks = f.sink ? static_cast<const float*>(b.sinks.ptr) : nullptr;
  fa.alpha = f.affine ? b.alpha.ptr : nullptr;
  fa.alpha_ma = f.affine ? static_cast<const float*>(b.alpha_ma.ptr) : nullptr;
  fa.out = b.out.ptr;
  fa.lse = static_cast<float*>(b.lse.ptr);
  return fa;
}

// One attention call of the bench: forward (and the gate op) and backward (the gate's
// first), on the buffers of AttentionBuffers.
struct AttentionCall {
  Backend& be;
  AttentionBuffers& buf;
  AttentionFeatures f;
  AttentionForwardArgs fa;
  AttentionBackwardArgs ba;
  int64_t n_out = 0;
  void forward() {
    be.attention_forward(fa);
    if (f.gate) be.sigmoid_gate_forward(buf.gated.ptr, buf.out.ptr, buf.gate.ptr, n_out);
  }
  void backward() {
    if (f.gate) be.sigmoid_gate_backward(buf.dcore.ptr, buf.dgate.ptr, buf.dout.ptr, buf.out.ptr, buf.gate.ptr, n_out);
    be.attention_backward(ba);
  }
};

AttentionCall attention_call(Backend& be, AttentionBuffers& buf, const HeadShape& h, int64_t B, int64_t T,
                             AttentionFeatures f) {
  AttentionCall call{be, buf, f, forward_args(buf, {B, T, h.H, h.Hkv, h.D}, f), {}, B * T * h.H * h.D};
  call.ba = attention_backward_args(call.fa);
  call.ba.dout = f.gate ? buf.dcore.ptr : buf.dout.ptr;
  call.ba.dqkv = buf.dqkv.ptr;
  call.ba.dsinks = f.sink ? static_cast<float*>(buf.dsinks.ptr) : nullptr;
  call.ba.dalpha = f.affine ? buf.dalpha.ptr : nullptr;
  return call;
}

struct PassTimes {
  std::vector<double> fwd, bwd, total;
};

PassTimes time_passes(AttentionCall& call, int64_t warmup, int64_t steps) {
  PassTimes t;
  call.be.synchronize();
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const auto a = Clock::now();
    call.forward();
    call.be.synchronize();
    const auto b = Clock::now();
    call.backward();
    call.be.synchronize();
    const auto d = Clock::now();
    if (i < warmup) continue;
    t.fwd.push_back(ms_since(a, b));
    t.bwd.push_back(ms_since(b, d));
    t.total.push_back(ms_since(a, d));
  }
  return t;
}

// {kernel name: mean ms per call} over `steps` more iterations with every launch timed
// (core/kernel_timer.h); one synchronisation per iteration, so the queue stays ahead of
// the device after the first launch.
nlohmann::json kernel_times(AttentionCall& call, int64_t steps) {
  KernelTiming timing;
  for (int64_t i = 0; i <= steps; ++i) {
    // Iteration 0 creates the events, host work that would delay its stop marks: dropped.
    if (i == 1) kernel_timer().start();
    call.forward();
    call.backward();
    call.be.synchronize();
    kernel_timer().collect();
  }
  nlohmann::json ms = nlohmann::json::object();
  for (const auto& [name, t] : kernel_timer().totals()) ms[name] = t.mean_ms();
  return ms;
}

}  // namespace

nlohmann::json run_attention_bench(const BenchOptions& o) {
  const BenchShape shape = resolve_bench(o);
  const Config& c = shape.config;
  const int64_t B = shape.B, T = shape.T;
  const HeadShape h = attention_heads(c.model, o.head_dim);
  const AttentionFeatures f = features_of(c.attention);
  std::unique_ptr<Backend> backend = make_backend(shape.device, c.train.threads, c.train.attention_forward,
                                                          c.train.attention_backward);
  Backend& be = *backend;
  AttentionBuffers buf(be, B * T, h, o.seed);
  AttentionCall call = attention_call(be, buf, h, B, T, f);
  const PassTimes t = time_passes(call, o.warmup, o.steps);
  const double ms = median(t.total);
  const double flops = attention_fwd_bwd_flops(B, h.H, T, h.D);
  nlohmann::json r;
  r["mode"] = "attention-only";
  r["preset"] = c.model.preset;
  r["attention"] = to_string(c.attention.variant);
  r["device"] = be.name();
  r["act_dtype"] = be.act_dtype() == DType::f32 ? "fp32" : "bf16";
  r["B"] = B;
  r["T"] = T;
  r["H"] = h.H;
  r["Hkv"] = h.Hkv;
  r["D"] = h.D;
  r["warmup"] = o.warmup;
  r["steps"] = o.steps;
  r["forward_ms"] = median(t.fwd);
  r["backward_ms"] = median(t.bwd);
  r["fwd_bwd_ms"] = ms;
  r["flops_fwd_bwd"] = flops;
  r["tflops"] = ms > 0 ? flops / (ms / 1e3) / 1e12 : 0.0;
  r["flop_convention"] = "causal fwd 4*B*H*T^2*D/2; fwd+bwd = 3.5 x fwd; variant extras not counted";
  r["includes"] = f.gate ? "attention core + sigmoid gate op" : "attention core";
  r["attention_paths"] = attention_paths_json(be);
  r["attention_path"] = attention_path_summary(r["attention_paths"]);
  // The CPU backend's ops are host functions with no timed launches: an empty object there.
  if (o.kernel_times)
    r["kernel_ms"] = shape.device == Device::cuda ? kernel_times(call, o.steps) : nlohmann::json::object();
  return r;
}

namespace {
std::string format_kernel_times(const nlohmann::json& kernel_ms) {
  std::string line = "  kernels (mean ms per call):";
  char item[160];
  for (const auto& [name, ms] : kernel_ms.items()) {
    std::snprintf(item, sizeof item, " %s %.3f,", name.c_str(), ms.get<double>());
    line += item;
  }
  if (kernel_ms.empty()) line += " none timed (no timed launches on this backend),";
  line.back() = '\n';
  return line;
}
}  // namespace

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
  std::string out = buf;
  if (r.contains("kernel_ms")) out += format_kernel_times(r["kernel_ms"]);
  return out + format_attention_paths(r["attention_paths"]);
}

}  // namespace kdtrain::bench
