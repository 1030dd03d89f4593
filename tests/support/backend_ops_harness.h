// The all-backends op harness's parts (tests/backend/test_backend_ops.cpp): an
// output's bound, one run of a case on one backend with its buffers and
// outputs, a case, seeded inputs and the output comparison against the CPU
// reference.
#pragma once
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "support/test_cuda_util.h"

namespace kdtrain::opstest {

using namespace kdtrain::cudatest;

struct Bound {
  double nmse, max_rel, floor;
  bool exact = false;  // integer outputs (ids): the bytes must equal the reference's
};
constexpr Bound kActBound{5e-4, 2e-2, 1e-6};
constexpr Bound kF32Bound{1e-8, 1e-4, 1.0};
constexpr Bound kExact{0, 0, 0, true};

struct Output {
  std::vector<float> values;
  std::vector<unsigned char> bytes;
  bool guard_intact = true;
  Bound bound;
};

// One run of a case on one backend: owns the buffers, records the outputs.
class OpRun {
 public:
  explicit OpRun(Backend& be) : be_(be) {}
  Backend& be() { return be_; }

  // Inputs, uploaded in the activation dtype or fp32 / int32.
  void* act(const std::vector<float>& v) { return upload(v, DType::bf16)->get(); }
  float* f32(const std::vector<float>& v) { return upload(v, DType::f32)->f32(); }
  int32_t* i32(const std::vector<int32_t>& v) {
    bufs_.push_back(std::make_unique<DevBuf>(be_, v.size(), DType::f32));
    bufs_.back()->upload_i32(v);
    return bufs_.back()->i32();
  }
  // Outputs, with their initial contents (zeros when `init` is empty).
  void* out_act(const std::string& name, size_t n, const std::vector<float>& init = {}) {
    return output(name, n, DType::bf16, init, kActBound)->get();
  }
  float* out_f32(const std::string& name, size_t n, const std::vector<float>& init = {},
                 Bound bound = kF32Bound) {
    return output(name, n, DType::f32, init, bound)->f32();
  }
  int32_t* out_i32(const std::string& name, size_t n) {
    return reinterpret_cast<int32_t*>(output(name, n, DType::f32, {}, kExact)->f32());
  }
  // An output returned by value (e.g. sum_squares).
  void scalar(const std::string& name, double value) {
    Output o;
    o.values = {static_cast<float>(value)};
    o.bytes.resize(sizeof value);
    std::memcpy(o.bytes.data(), &value, sizeof value);
    o.bound = kF32Bound;
    scalars_[name] = o;
  }

  std::map<std::string, Output> results() {
    be_.synchronize();
    std::map<std::string, Output> out = scalars_;
    for (auto& [name, entry] : outputs_) {
      Output& o = out[name];
      o.values = entry.first->download();
      o.bytes = entry.first->bytes();
      o.guard_intact = entry.first->guard_intact();
      o.bound = entry.second;
    }
    return out;
  }

 private:
  DevBuf* upload(const std::vector<float>& v, DType t) {
    bufs_.push_back(std::make_unique<DevBuf>(be_, v.size(), t));
    bufs_.back()->upload(v);
    return bufs_.back().get();
  }
  DevBuf* output(const std::string& name, size_t n, DType t, const std::vector<float>& init,
                 Bound bound) {
    DevBuf* b = upload(init.empty() ? std::vector<float>(n, 0.f) : init, t);
    REQUIRE(b->size() == n);
    outputs_[name] = {b, bound};
    return b;
  }
  Backend& be_;
  std::vector<std::unique_ptr<DevBuf>> bufs_;
  std::map<std::string, std::pair<DevBuf*, Bound>> outputs_;
  std::map<std::string, Output> scalars_;
};

struct OpCase {
  std::string op;     // the Backend method the case covers
  std::string label;  // shape and options
  std::function<void(OpRun&)> run;
};

inline std::vector<float> values(size_t n, uint32_t seed, float stddev = 1.f, float mean = 0.f) {
  return random_values(n, seed, mean, stddev);
}
inline std::vector<int32_t> ids(size_t n, uint32_t seed, int64_t bound) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(bound));
  return v;
}

inline void compare(const std::string& what, const Output& got, const Output& ref) {
  INFO(what);
  CHECK(got.guard_intact);
  if (ref.bound.exact) {
    CHECK(got.bytes == ref.bytes);
    return;
  }
  check_close(what, got.values, ref.values, got.bound.nmse, got.bound.max_rel, got.bound.floor);
}

}  // namespace kdtrain::opstest
