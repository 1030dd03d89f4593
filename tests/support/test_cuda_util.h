// Shared helpers of the CUDA parity tests (tests/backend/test_cuda_*.cpp).
//
// The tests drive the CUDA backend through the Backend interface (so the
// launchers and the CudaBackend glue are covered together) and compare against
// the CPU fp32 reference ops of src/backend/cpu/cpu_ops.h run on the same
// bf16-rounded inputs widened to float. They need no CUDA headers: without a
// device (or without a CUDA build) every test prints "SKIPPED: no CUDA device".
//
// Every buffer has kGuard sentinel elements before and after it (guard_intact()
// catches out-of-bounds writes on either side), and its body starts as NaN: an
// output element a kernel fails to write stays NaN and fails the finiteness check
// (buffers an op accumulates into are uploaded first, explicitly).
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
#include "backend/host_dtype.h"

namespace kdtrain::cudatest {

// Self-check modes (environment KDTRAIN_CUDA_TESTS_ON_CPU), without a device:
//   1     the tests run against the CPU backend in place of CUDA, so the test code
//         itself (shapes, guards, harnesses) is exercised; comparisons are CPU
//         against CPU.
//   bf16  against the CPU backend with the GPU's bf16 storage (bf16_emulation_backend.h):
//         the derived tolerances then face real bf16 rounding of every stored output,
//         which shows they are neither vacuous nor too tight for it.
// Nothing is learnt about the kernels either way.
inline std::string selfcheck_mode() {
  const char* v = std::getenv("KDTRAIN_CUDA_TESTS_ON_CPU");
  return v == nullptr ? "" : v;
}
inline bool selfcheck_on_cpu() { return selfcheck_mode() == "1" || selfcheck_mode() == "bf16"; }
std::unique_ptr<Backend> make_bf16_emulation_backend();  // bf16_emulation_backend.cpp

// Skips the current test case (visibly) unless a CUDA backend and device exist.
#define KD_REQUIRE_CUDA_OR_SKIP()                                                    \
  do {                                                                               \
    if (!::kdtrain::cuda_available() && !::kdtrain::cudatest::selfcheck_on_cpu()) { \
      WARN("SKIPPED: no CUDA device");                                               \
      return;                                                                        \
    }                                                                                \
  } while (0)

// 64 elements: 128 bytes of bf16, so the body keeps the 16-byte alignment
// (cudaMalloc gives 256) the vectorised kernels rely on.
constexpr size_t kGuard = 64;
constexpr uint16_t kGuardBf16 = 0x7fa5;     // a NaN payload no kernel writes
constexpr uint32_t kGuardF32 = 0x7fa5a5a5;  // likewise
constexpr uint16_t kUnwrittenBf16 = 0x7fc1;     // the body's initial NaN
constexpr uint32_t kUnwrittenF32 = 0x7fc00001;  // likewise

// fp32 -> bf16 bits as the CUDA backend rounds (backend/host_dtype.h), and back (exact).
inline uint16_t to_bf16(float f) { return bf16_bits(f); }
inline float from_bf16(uint16_t h) { return bf16_bits_to_float(h); }
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// A device buffer of n elements of bf16 or f32 (or int32, as f32-sized raw words)
// between two runs of kGuard sentinel elements, its body NaN until uploaded.
// DType::bf16 means "activation dtype": on a backend whose act_dtype() is f32 (the
// self-check) such a buffer holds f32.
class DevBuf {
 public:
  DevBuf(Backend& be, size_t n, DType t)
      : be_(be), n_(n), t_(t == DType::bf16 ? be.act_dtype() : t) {
    base_ = be_.alloc((n + 2 * kGuard) * dtype_size(t_));
    ptr_ = static_cast<char*>(base_) + kGuard * dtype_size(t_);
    fill(ptr_, n_, es() == 2 ? static_cast<const void*>(&kUnwrittenBf16)
                             : static_cast<const void*>(&kUnwrittenF32));
    fill_guard();
  }
  ~DevBuf() { be_.release(base_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  void* get() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t size() const { return n_; }
  size_t elem_size() const { return es(); }

  // Uploads values (rounded to bf16 for a bf16 buffer) and re-arms the guards.
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
  // Back to NaN (before re-running an op that writes this output).
  void poison() {
    fill(ptr_, n_, es() == 2 ? static_cast<const void*>(&kUnwrittenBf16)
                             : static_cast<const void*>(&kUnwrittenF32));
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
    std::vector<unsigned char> b(n_ * es());
    be_.to_host(b.data(), ptr_, b.size());
    return b;
  }
  // Both guard runs hold their sentinel.
  bool guard_intact() const {
    const void* sentinel = es() == 2 ? static_cast<const void*>(&kGuardBf16)
                                     : static_cast<const void*>(&kGuardF32);
    std::vector<unsigned char> g(kGuard * es());
    for (const char* at : {static_cast<const char*>(base_), static_cast<const char*>(ptr_) + n_ * es()}) {
      be_.to_host(g.data(), at, g.size());
      for (size_t i = 0; i < kGuard; ++i)
        if (std::memcmp(g.data() + i * es(), sentinel, es()) != 0) return false;
    }
    return true;
  }

 private:
  size_t es() const { return dtype_size(t_); }
  void fill(void* at, size_t count, const void* value) {
    std::vector<unsigned char> h(count * es());
    for (size_t i = 0; i < count; ++i) std::memcpy(h.data() + i * es(), value, es());
    if (!h.empty()) be_.to_device(at, h.data(), h.size());
  }
  void fill_guard() {
    const void* sentinel = es() == 2 ? static_cast<const void*>(&kGuardBf16)
                                     : static_cast<const void*>(&kGuardF32);
    fill(base_, kGuard, sentinel);
    fill(static_cast<char*>(ptr_) + n_ * es(), kGuard, sentinel);
  }
  Backend& be_;
  void* base_ = nullptr;
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

// check_close for an output whose error has two parts: one relative to the output
// (at most max_rel * max |ref| per element, NMSE below nmse_bound) and one that is not,
// bounded per element by floor[i] (round-off of terms that cancel in ref[i], so it
// does not shrink with ref[i]: at an exact 0 it is all the error). Each element:
//   |err_i| <= max_rel * max |ref| + floor[i],
// and, by Minkowski's inequality over the two parts,
//   sqrt(sum err^2) <= sqrt(nmse_bound * sum ref^2) + sqrt(sum floor^2).
inline void check_close_floored(const std::string& what, const std::vector<float>& got,
                                const std::vector<float>& ref, double nmse_bound, double max_rel,
                                const std::vector<double>& floor) {
  REQUIRE(got.size() == ref.size());
  REQUIRE(floor.size() == ref.size());
  const ErrorStats s = error_stats(got, ref);
  double e2 = 0, r2 = 0, f2 = 0, worst_excess = -INFINITY;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = static_cast<double>(got[i]) - ref[i];
    e2 += e * e;
    r2 += static_cast<double>(ref[i]) * ref[i];
    f2 += floor[i] * floor[i];
    const double excess = std::fabs(e) - (max_rel * s.max_abs_ref + floor[i]);
    if (!(excess <= worst_excess)) {
      worst_excess = excess;
      worst = i;
    }
  }
  const double rms_bound = std::sqrt(nmse_bound * r2) + std::sqrt(f2);
  INFO(what << ": rms err " << std::sqrt(e2) << " (bound " << rms_bound << ", of which floor "
            << std::sqrt(f2) << ") max_abs_ref=" << s.max_abs_ref << "; closest to its bound: #"
            << worst << " err " << (ref.empty() ? 0. : std::fabs(static_cast<double>(got[worst]) - ref[worst]))
            << " bound " << (ref.empty() ? 0. : max_rel * s.max_abs_ref + floor[worst]));
  CHECK(s.finite);
  CHECK(std::sqrt(e2) <= rms_bound);
  CHECK(!(worst_excess > 0));
}

// bf16's unit roundoff: rounding to nearest (even) moves x by at most u|x|.
constexpr double kBf16U = 1.0 / 256;

// A bf16 output the device computes in fp32 from the same bf16-exact inputs as the
// reference and rounds to bf16 `roundings` times: every element is within
// roundings * u * |ref_i|, plus fp32 round-off, allowed as `slack` (5%: fp32 is 2^16
// times finer than bf16, so this covers cancellation up to ~3000x). Hence
//   max |err| <= slack * roundings * u * max |ref|   and   NMSE < (slack * roundings * u)^2.
// One rounding is NMSE 1.5e-5 at most; the bounds these replace (1e-4, 5e-4) allowed
// 7x and 30x that.
inline void check_bf16_rounded(const std::string& what, const std::vector<float>& got,
                               const std::vector<float>& ref, int roundings = 1,
                               double slack = 1.05) {
  const double rel = slack * roundings * kBf16U;
  check_close(what, got, ref, rel * rel, rel);
}

// An output buffer against its reference (check_close, check_bf16_rounded), then
// its guards.
inline void check_output(const std::string& what, const DevBuf& out, const std::vector<float>& ref,
                         double nmse_bound, double max_rel) {
  check_close(what, out.download(), ref, nmse_bound, max_rel);
  CHECK(out.guard_intact());
}
inline void check_bf16_output(const std::string& what, const DevBuf& out, const std::vector<float>& ref) {
  check_bf16_rounded(what, out.download(), ref);
  CHECK(out.guard_intact());
}

// Runs `op`, which writes or accumulates into `out`, twice from `out` = `start`: true when
// both runs leave the same bits (`out` keeps the second run's).
template <typename Op>
bool reruns_bit_identical(DevBuf& out, const std::vector<float>& start, Op op) {
  std::vector<unsigned char> first;
  for (int run = 0; run < 2; ++run) {
    out.upload(start);
    op();
    if (run == 0) first = out.bytes();
  }
  return out.bytes() == first;
}

inline std::unique_ptr<Backend> cuda_backend() {
  if (!cuda_available() && selfcheck_mode() == "bf16") return make_bf16_emulation_backend();
  if (!cuda_available() && selfcheck_on_cpu()) return make_backend("cpu", 0);
  return make_backend("cuda", 0);
}

}  // namespace kdtrain::cudatest
