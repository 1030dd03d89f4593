// RoPE (HF rotate_half): forward against the formula, backward is the transpose
// (FD of L = sum w*rope(x)), forward then backward is the identity, heads beyond
// n_rot untouched, float vs double.
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {
constexpr int64_t kB = 2, kT = 5, kHeads = 5, kRot = 3, kD = 10;

struct RopeTables {
  std::vector<double> cos, sin;
  RopeTables() {
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t i = 0; i < kD / 2; ++i) {
        const double ang = t * std::pow(10000.0, -2.0 * i / kD);
        cos.push_back(std::cos(ang));
        sin.push_back(std::sin(ang));
      }
  }
};
}  // namespace

TEST_CASE("rope forward: pairs (i, i+D/2) rotated, heads >= n_rot unchanged", "[cpu][rope]") {
  RopeTables tab;
  const auto x0 = random_vec(kB * kT * kHeads * kD, 51);
  auto x = x0;
  cpu::rope_forward(x.data(), tab.cos.data(), tab.sin.data(), kB, kT, kHeads, kRot, kD);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t h = 0; h < kHeads; ++h) {
        const int64_t base = ((b * kT + t) * kHeads + h) * kD;
        for (int64_t i = 0; i < kD / 2; ++i) {
          const double c = tab.cos[t * kD / 2 + i], s = tab.sin[t * kD / 2 + i];
          const double x1 = x0[base + i], x2 = x0[base + i + kD / 2];
          if (h < kRot) {
            CHECK(x[base + i] == Approx(x1 * c - x2 * s).epsilon(1e-15).margin(1e-15));
            CHECK(x[base + i + kD / 2] == Approx(x2 * c + x1 * s).epsilon(1e-15).margin(1e-15));
          } else {
            CHECK(x[base + i] == x1);
            CHECK(x[base + i + kD / 2] == x2);
          }
        }
      }
}

TEST_CASE("rope backward: FD gradient, and backward(forward(x)) == x", "[cpu][rope]") {
  RopeTables tab;
  auto x = random_vec(kB * kT * kHeads * kD, 52);
  const auto w = random_vec(x.size(), 53);
  auto loss = [&] {
    auto y = x;
    cpu::rope_forward(y.data(), tab.cos.data(), tab.sin.data(), kB, kT, kHeads, kRot, kD);
    return weighted_sum(w, y.data(), y.size());
  };
  auto g = w;
  cpu::rope_backward(g.data(), tab.cos.data(), tab.sin.data(), kB, kT, kHeads, kRot, kD);
  check_grad(g, numeric_grad(x, loss), "x");
  auto y = x;
  cpu::rope_forward(y.data(), tab.cos.data(), tab.sin.data(), kB, kT, kHeads, kRot, kD);
  cpu::rope_backward(y.data(), tab.cos.data(), tab.sin.data(), kB, kT, kHeads, kRot, kD);
  CHECK(max_rel_diff(y, x) < 1e-15);
}

TEST_CASE("rope: float agrees with double", "[cpu][rope]") {
  RopeTables tab;
  auto x = random_vec(kB * kT * kHeads * kD, 54);
  auto fx = to_float(x), fc = to_float(tab.cos), fs = to_float(tab.sin);
  cpu::rope_forward(x.data(), tab.cos.data(), tab.sin.data(), kB, kT, kHeads, kRot, kD);
  cpu::rope_forward(fx.data(), fc.data(), fs.data(), kB, kT, kHeads, kRot, kD);
  CHECK(max_rel_diff(fx, x) < 1e-6);
}
