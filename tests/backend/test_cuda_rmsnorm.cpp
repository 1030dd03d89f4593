// CUDA RMSNorm kernels against an inline float64 reference (deliberately not the
// CPU backend, so a bug shared by both cannot hide).
//
// Bounds (bf16 outputs are computed in fp32 and rounded once, relative error <= u = 2^-8;
// 5% on top for fp32 round-off):
//   out, dinp (bf16):  NMSE < (1.05u)^2 = 1.7e-5 and max |err| <= 1.05u * max |ref|
//   rstd, dweight (fp32): NMSE < 1e-8 and max |err| <= 1e-4 * max |ref|
// plus: no NaN/inf, outputs NaN until written, guard elements before and after every
// buffer unchanged (out-of-bounds writes), and backward bit-identical across two runs.
//
// Without a CUDA build or without a device the test case prints a visible skip.
#include <catch2/catch.hpp>

#ifndef KDTRAIN_HAVE_CUDA

TEST_CASE("cuda rmsnorm matches the float64 reference", "[cuda][rmsnorm]") {
  WARN("SKIPPED: no CUDA device (built without CUDA)");
}

#else

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "support/cuda_guarded_buffer.h"
#include "backend/cuda/cuda_probe.h"
#include "kernels/rmsnorm.cuh"

namespace {

using kdtrain::cudatest::guards_intact;
// 64 guard elements before and after each buffer.
template <typename T>
using Array = kdtrain::cudatest::GuardedBuffer<T, 64>;

constexpr double kOneRounding = 1.05 / 256;  // 1.05u: one bf16 rounding plus fp32 round-off
constexpr uint16_t kGuardBf16 = 0x7fa5;     // a NaN pattern no kernel produces
constexpr uint32_t kGuardF32 = 0x7fa5a5a5;  // likewise for fp32

// Round-to-nearest-even fp32 -> bf16, written here so the test needs no device headers' helpers.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct ErrorStats {
  double nmse = 0, max_abs_err = 0, max_abs_ref = 0;
  bool finite = true;
};

ErrorStats compare(const std::vector<double>& got, const std::vector<double>& ref) {
  ErrorStats s;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) s.finite = false;
    const double e = got[i] - ref[i];
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    s.max_abs_err = std::max(s.max_abs_err, std::abs(e));
    s.max_abs_ref = std::max(s.max_abs_ref, std::abs(ref[i]));
  }
  s.nmse = ref2 > 0 ? err2 / ref2 : err2;
  return s;
}

void check_close(const std::string& what, const std::vector<double>& got,
                 const std::vector<double>& ref, double nmse_bound, double max_rel_bound) {
  const ErrorStats s = compare(got, ref);
  INFO(what << ": nmse=" << s.nmse << " max_abs_err=" << s.max_abs_err
            << " max_abs_ref=" << s.max_abs_ref);
  CHECK(s.finite);
  CHECK(s.nmse < nmse_bound);
  CHECK(s.max_abs_err <= max_rel_bound * s.max_abs_ref);
}

std::vector<double> widen_bf16(const std::vector<uint16_t>& v, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = from_bf16(v[i]);
  return out;
}

std::vector<double> widen_f32(const std::vector<float>& v, size_t n) {
  return std::vector<double>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float mean, float std_dev) {
  std::normal_distribution<float> dist(mean, std_dev);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(dist(rng));
  return v;
}

void run_case(int64_t N, int64_t C) {
  const float eps = 1e-5f;
  const size_t NC = static_cast<size_t>(N * C);
  std::mt19937 rng(static_cast<uint32_t>(1000 * N + C));

  // Rows at different scales so rstd varies by orders of magnitude.
  std::vector<uint16_t> x = random_bf16(NC, rng, 0.f, 1.f);
  for (int64_t n = 0; n < N; ++n) {
    const float scale = std::pow(10.f, static_cast<float>(n % 5) - 2.f);
    for (int64_t c = 0; c < C; ++c) x[n * C + c] = to_bf16(from_bf16(x[n * C + c]) * scale);
  }
  const std::vector<uint16_t> w = random_bf16(C, rng, 1.f, 0.1f);
  const std::vector<uint16_t> g = random_bf16(NC, rng, 0.f, 1.f);
  const std::vector<uint16_t> dinp0 = random_bf16(NC, rng, 0.f, 0.5f);
  std::vector<float> dweight0(C);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto& v : dweight0) v = dist(rng);

  // float64 reference on the same bf16-rounded inputs.
  std::vector<double> ref_out(NC), ref_rstd(N), ref_dinp(NC), ref_dweight(C);
  for (int64_t c = 0; c < C; ++c) ref_dweight[c] = dweight0[c];
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0, dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xv = from_bf16(x[n * C + c]);
      ss += xv * xv;
      dot += from_bf16(g[n * C + c]) * from_bf16(w[c]) * xv;
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    ref_rstd[n] = r;
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(n * C + c);
      const double xv = from_bf16(x[i]), gv = from_bf16(g[i]), wv = from_bf16(w[c]);
      ref_out[i] = xv * r * wv;
      ref_dinp[i] = from_bf16(dinp0[i]) + r * wv * gv - r * r * r / static_cast<double>(C) * dot * xv;
      ref_dweight[c] += gv * xv * r;
    }
  }

  using kdtrain::cuda::rmsnorm_backward;
  using kdtrain::cuda::rmsnorm_forward;
  auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  Array<uint16_t> d_x(NC), d_w(C), d_g(NC), d_out(NC), d_dinp(NC);
  Array<float> d_rstd(N), d_dweight(C);
  const size_t scratch_bytes = kdtrain::cuda::rmsnorm_backward_scratch_bytes(N, C);
  Array<float> d_scratch(scratch_bytes / sizeof(float));
  d_x.put(x, 0);
  d_w.put(w, 0);
  d_g.put(g, 0);
  float guard_f32;
  std::memcpy(&guard_f32, &kGuardF32, 4);
  d_out.put(std::vector<uint16_t>(NC, uint16_t{0x7fc1}), kGuardBf16);  // NaN until written
  d_rstd.put(std::vector<float>(N, std::nanf("")), guard_f32);

  rmsnorm_forward(bf(d_out.ptr), d_rstd.ptr, bf(d_x.ptr), bf(d_w.ptr), N, C, eps, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto out = d_out.get();
  const auto rstd = d_rstd.get();
  CHECK(guards_intact(out, NC, kGuardBf16));
  CHECK(guards_intact(rstd, static_cast<size_t>(N), guard_f32));
  check_close("rstd", widen_f32(rstd, N), ref_rstd, 1e-8, 1e-4);
  check_close("out", widen_bf16(out, NC), ref_out, kOneRounding * kOneRounding, kOneRounding);

  // Backward twice from the same starting buffers: results must match bit for bit.
  std::vector<uint16_t> dinp_runs[2];
  std::vector<float> dweight_runs[2];
  for (int run = 0; run < 2; ++run) {
    d_dinp.put(dinp0, kGuardBf16);
    d_dweight.put(dweight0, guard_f32);
    rmsnorm_backward(bf(d_dinp.ptr), d_dweight.ptr, d_scratch.ptr, bf(d_g.ptr),
                     bf(d_x.ptr), bf(d_w.ptr), d_rstd.ptr, N, C, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    dinp_runs[run] = d_dinp.get();
    dweight_runs[run] = d_dweight.get();
  }
  CHECK(guards_intact(dinp_runs[0], NC, kGuardBf16));
  CHECK(guards_intact(dweight_runs[0], static_cast<size_t>(C), guard_f32));
  check_close("dinp", widen_bf16(dinp_runs[0], NC), ref_dinp, kOneRounding * kOneRounding, kOneRounding);
  check_close("dweight", widen_f32(dweight_runs[0], C), ref_dweight, 1e-8, 1e-4);
  CHECK(dinp_runs[0] == dinp_runs[1]);
  CHECK(std::memcmp(dweight_runs[0].data(), dweight_runs[1].data(), C * sizeof(float)) == 0);
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

TEST_CASE("cuda rmsnorm matches the float64 reference", "[cuda][rmsnorm]") {
  if (!kdtrain::cuda::device_present()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  // 64/2048: 16-byte packs; 100: 8-byte packs; 2050: 4-byte packs; 33: scalar path.
  for (int64_t N : {1, 33, 1025}) {
    for (int64_t C : {64, 100, 2048, 2050, 33}) {
      INFO("N=" << N << " C=" << C);
      run_case(N, C);
    }
  }
}

#endif  // KDTRAIN_HAVE_CUDA
