// Shared helpers of the CUDA parity tests (tests/test_cuda_*.cpp).
//
// The tests drive the CUDA backend through the Backend interface (so the
// launchers and the CudaBackend glue are covered together) and compare against
// the CPU fp32 reference ops of src/backend/cpu/cpu_ops.h run on the same
// bf16-rounded inputs widened to float. They need no CUDA headers: without a
// device (or without a CUDA build) every test prints "SKIPPED: no CUDA device".
//
// Every output buffer is allocated with kGuard extra elements filled with a
// sentinel; guard_intact() catches out-of-bounds writes.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kdtrain::cudatest {

// Self-check mode (environment KDTRAIN_CUDA_TESTS_ON_CPU=1): the tests run against
// the CPU backend in place of CUDA, so the test code itself (shapes, guards,
// harnesses) is exercised on machines without a GPU. Comparisons are then CPU
// against CPU; nothing is learnt about the kernels.
inline bool selfcheck_on_cpu() {
  const char* v = std::getenv("KDTRAIN_CUDA_TESTS_ON_CPU");
  return v != nullptr && std::string(v) == "1";
}

// Skips the current test case (visibly) unless a CUDA backend and device exist.
#define KD_REQUIRE_CUDA_OR_SKIP()                                                    \
  do {                                                                               \
    if (!::kdtrain::cuda_available() && !::kdtrain::cudatest::selfcheck_on_cpu()) { \
      WARN("SKIPPED: no CUDA device");                                               \
      return;                                                                        \
    }                                                                                \
  } while (0)

constexpr size_t kGuard = 64;
constexpr uint16_t kGuardBf16 = 0x7fa5;     // a NaN payload no kernel writes
constexpr uint32_t kGuardF32 = 0x7fa5a5a5;  // likewise

// fp32 -> bf16 round to nearest even (NaN kept quiet), and back (exact).
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// A device buffer of n elements of bf16 or f32 (or int32, as f32-sized raw words)
// followed by kGuard sentinel elements. DType::bf16 means "activation dtype": on a
// backend whose act_dtype() is f32 (the self-check) such a buffer holds f32.
class DevBuf {
 public:
  DevBuf(Backend& be, size_t n, DType t)
      : be_(be), n_(n), t_(t == DType::bf16 ? be.act_dtype() : t) {
    ptr_ = be_.alloc((n + kGuard) * dtype_size(t_));
    fill_guard();
  }
  ~DevBuf() { be_.release(ptr_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  void* get() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t size() const { return n_; }
  size_t elem_size() const { return dtype_size(t_); }

  // Uploads values (rounded to bf16 for a bf16 buffer) and re-arms the guard.
  void upload(const std::vector<float>& v) {
    REQUIRE(v.size() == n_);
    if (t_ == DType::f32) {
      be_.to_device(ptr_, v.data(), n_ * 4);
    } else {
      std::vector<uint16_t> h(n_);
      for (size_t i = 0; i < n_; ++i) h[i] = to_bf16(v[i]);
      be_.to_device(ptr_, h.data(), n_ * 2);
    }
    fill_guard();
  }
  // int32 data (token ids, targets) in a 4-byte buffer.
  void upload_i32(const std::vector<int32_t>& v) {
    REQUIRE(v.size() == n_);
    REQUIRE(dtype_size(t_) == 4);
    be_.to_device(ptr_, v.data(), n_ * 4);
    fill_guard();
  }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  std::vector<float> download() const {
    std::vector<float> out(n_);
    if (t_ == DType::f32) {
      be_.to_host(out.data(), ptr_, n_ * 4);
    } else {
      std::vector<uint16_t> h(n_);
      be_.to_host(h.data(), ptr_, n_ * 2);
      for (size_t i = 0; i < n_; ++i) out[i] = from_bf16(h[i]);
    }
    return out;
  }
  // Raw bytes of the n elements (for bit-identity checks).
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> b(n_ * dtype_size(t_));
    be_.to_host(b.data(), ptr_, b.size());
    return b;
  }
  bool guard_intact() const {
    const size_t es = dtype_size(t_);
    std::vector<unsigned char> g(kGuard * es);
    be_.to_host(g.data(), static_cast<const char*>(ptr_) + n_ * es, g.size());
    for (size_t i = 0; i < kGuard; ++i)
      if (std::memcmp(g.data() + i * es, es == 2 ? static_cast<const void*>(&kGuardBf16)
                                                  : static_cast<const void*>(&kGuardF32), es) != 0)
        return false;
    return true;
  }

 private:
  void fill_guard() {
    const size_t es = dtype_size(t_);
    std::vector<unsigned char> g(kGuard * es);
    for (size_t i = 0; i < kGuard; ++i)
      std::memcpy(g.data() + i * es, es == 2 ? static_cast<const void*>(&kGuardBf16)
                                             : static_cast<const void*>(&kGuardF32), es);
    be_.to_device(static_cast<char*>(ptr_) + n_ * es, g.data(), g.size());
  }
  Backend& be_;
  void* ptr_ = nullptr;
  size_t n_;
  DType t_;
};

// Random values, already rounded to bf16 when `bf16` so the CPU reference sees
// exactly what the device sees.
inline std::vector<float> random_values(size_t n, uint32_t seed, float mean, float stddev,
                                        bool bf16 = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16 ? round_bf16(dist(rng)) : dist(rng);
  return v;
}

struct ErrorStats {
  double nmse = 0, max_abs_err = 0, max_abs_ref = 0;
  bool finite = true;
};

inline ErrorStats error_stats(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrorStats s;
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) s.finite = false;
    const double e = static_cast<double>(got[i]) - ref[i];
    e2 += e * e;
    r2 += static_cast<double>(ref[i]) * ref[i];
    s.max_abs_err = std::max(s.max_abs_err, std::abs(e));
    s.max_abs_ref = std::max(s.max_abs_ref, std::abs(static_cast<double>(ref[i])));
  }
  s.nmse = r2 > 0 ? e2 / r2 : e2;
  return s;
}

// NMSE below nmse_bound and max |err| <= max_rel * max(|ref|max, floor).
inline void check_close(const std::string& what, const std::vector<float>& got,
                        const std::vector<float>& ref, double nmse_bound, double max_rel,
                        double floor = 1e-6) {
  REQUIRE(got.size() == ref.size());
  const ErrorStats s = error_stats(got, ref);
  INFO(what << ": nmse=" << s.nmse << " (bound " << nmse_bound << ") max_abs_err="
            << s.max_abs_err << " max_abs_ref=" << s.max_abs_ref << " (rel bound " << max_rel
            << ")");
  CHECK(s.finite);
  CHECK(s.nmse < nmse_bound);
  CHECK(s.max_abs_err <= max_rel * std::max(s.max_abs_ref, floor));
}

inline std::unique_ptr<Backend> cuda_backend() {
  if (!cuda_available() && selfcheck_on_cpu()) return make_backend("cpu", 0);
  return make_backend("cuda", 0);
}

}  // namespace kdtrain::cudatest
