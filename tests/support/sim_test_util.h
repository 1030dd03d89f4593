// Shared by the tests that run the attention kernel bodies in the host SIMT emulator
// (test_flash_forward_sim.cpp, test_flash_backward_sim.cpp): buffers framed by
// guard elements, the random bf16 attention inputs, and the prefix-scan launch.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "config/config.h"
#include "kernels/attention/params.h"
#include "kernels/attention/prefix_scan_kernel.cuh"
#include "kernels/tc/sim/simt.h"

namespace kdtrain::simtest {

constexpr size_t kGuard = 64;                 // guard elements before and after each buffer
constexpr uint16_t kGuardHalf = 0x7fb3;       // bf16 NaN payload no kernel writes
constexpr uint32_t kGuardWord = 0x7fa5a5a5u;  // fp32 NaN payload no kernel writes

// Elements [kGuard, kGuard + n) of a buffer framed by guard elements, pre-filled.
template <typename E>
struct Guarded {
  std::vector<E> buf;
  size_t n;
  Guarded(size_t count, E fill, E guard) : buf(count + 2 * kGuard, guard), n(count) {
    std::fill(buf.begin() + kGuard, buf.begin() + kGuard + n, fill);
  }
  E* data() { return buf.data() + kGuard; }
  const E* data() const { return buf.data() + kGuard; }
  bool guards_intact(E guard) const {
    for (size_t k = 0; k < kGuard; ++k)
      if (std::memcmp(&buf[k], &guard, sizeof(E)) != 0 || std::memcmp(&buf[kGuard + n + k], &guard, sizeof(E)) != 0)
        return false;
    return true;
  }
};

inline float guard_float() {
  float f;
  std::memcpy(&f, &kGuardWord, 4);
  return f;
}

// Random inputs of one attention call, bf16 values as raw bits: qkv in [-1.5, 1.5],
// alpha in [0, 1.2] with the exact 0 and 1 that linear_clip produces, fp32 sinks in
// [-1, 1] and alpha_ma in [0.3, 0.9]. `rng` continues for further inputs.
struct AttnInputs {
  int64_t B, T, H, Hkv, D;
  AttentionVariant variant;
  AffineBiasDivisor divisor = AffineBiasDivisor::sequence;
  std::vector<uint16_t> qkv, alpha;
  std::vector<float> sinks, alpha_ma;
  std::mt19937_64 rng;

  AttnInputs(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t d, AttentionVariant v, uint64_t seed)
      : B(b), T(t), H(h), Hkv(hkv), D(d), variant(v), rng(seed) {
    std::uniform_real_distribution<float> x(-1.5f, 1.5f), a(0.f, 1.2f), s(-1.f, 1.f), ma(0.3f, 0.9f);
    qkv.resize(static_cast<size_t>(B * T * (H + 2 * Hkv) * D));
    for (auto& e : qkv) e = sim::bf16_round(x(rng));
    alpha.resize(static_cast<size_t>(B * T * H));
    for (size_t k = 0; k < alpha.size(); ++k)
      alpha[k] = sim::bf16_round(k % 5 == 0 ? 0.f : k % 7 == 2 ? 1.f : a(rng));
    for (int64_t k = 0; k < H; ++k) {
      sinks.push_back(s(rng));
      alpha_ma.push_back(ma(rng));
    }
  }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(D)); }
  AttentionFeatures features() const { return features_of(variant, divisor); }
  // The kernels' params (sizes, strides, divisor, features) pointing at these inputs, as
  // backend/cuda/attention_entry.cu builds them; the caller points the outputs.
  flash::AttentionParams params() const {
    flash::AttentionParams p;
    static_cast<flash::FlashParams&>(p) = flash::make_flash_params(B, T, H, Hkv, D, scale());
    p.bias_visible = divisor == AffineBiasDivisor::visible;
    p.sink = features().sink;
    p.affine = features().affine;
    p.qkv = qkv.data();
    p.sinks = sinks.data();
    p.alpha = alpha.data();
    p.alpha_ma = alpha_ma.data();
    return p;
  }
  // Multiplies every query by 2^e (exact in bf16 for the |q| <= 1.5 drawn here): logits
  // of tens to hundreds, where a running max kept on unscaled logits overflows exp2.
  AttnInputs& scale_queries(int e) {
    for (int64_t t = 0; t < B * T; ++t)
      for (int64_t k = 0; k < H * D; ++k) {
        uint16_t& w = qkv[static_cast<size_t>(t * (H + 2 * Hkv) * D + k)];
        w = sim::bf16_round(std::ldexp(sim::bf16_value(w), e));
      }
    return *this;
  }
};

// sum_d a[d] b[d], added in order (the test oracles' dot products).
inline double dot(const double* a, const double* b, int64_t n) {
  double sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// bf16 bits -> double values.
inline std::vector<double> widen(const std::vector<uint16_t>& v) {
  std::vector<double> w(v.size());
  for (size_t k = 0; k < v.size(); ++k) w[k] = sim::bf16_value(v[k]);
  return w;
}

// The two launches of the chunked prefix scan (prefix_scan_kernel.cuh) on the emulator.
template <typename In>
sim::LaunchStats run_scan(const flash::ScanArgs<In>& a, sim::Schedule schedule) {
  sim::LaunchConfig c;
  c.grid = {static_cast<unsigned>((a.cols + flash::kScanThreads - 1) / flash::kScanThreads),
            static_cast<unsigned>(flash::scan_chunks(a.rows)), static_cast<unsigned>(a.batches)};
  c.block = {flash::kScanThreads, 1, 1};
  c.schedule = schedule;
  sim::LaunchStats s = sim::launch(c, [&](unsigned char*) { flash::scan_chunk_totals(a); });
  s.cp_async_dropped += sim::launch(c, [&](unsigned char*) { flash::scan_chunk_apply(a); }).cp_async_dropped;
  return s;
}

}  // namespace kdtrain::simtest
