// Elementwise ops: alpha activation (linear_clip, sigmoid), sigmoid gate, SwiGLU,
// add/accumulate, column sums. FD gradients in double, edge cases, float vs double.
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {
// z spread over both saturated regions and the linear part, none within 1e-3 of +-5.
std::vector<double> alpha_inputs() {
  auto z = random_vec(41, 71, -8.0, 8.0);
  for (double& v : z)
    if (std::fabs(std::fabs(v) - 5.0) < 1e-3) v += 0.01;
  return z;
}

void check_alpha_fd(AlphaActivation act) {
  auto z = alpha_inputs();
  const auto w = random_vec(z.size(), 72);
  auto loss = [&] {
    std::vector<double> a(z.size());
    cpu::alpha_activation_forward(a.data(), z.data(), static_cast<int64_t>(z.size()), act);
    return weighted_sum(w, a.data(), a.size());
  };
  std::vector<double> dz(z.size());
  cpu::alpha_activation_backward(dz.data(), w.data(), z.data(), static_cast<int64_t>(z.size()), act);
  check_grad(dz, numeric_grad(z, loss), "z");
}
}  // namespace

TEST_CASE("alpha linear_clip: values and derivative at the corners", "[cpu][activations]") {
  const std::vector<double> z{-7.0, -5.0, -4.0, 0.0, 2.5, 5.0, 6.0};
  const std::vector<double> expect{0.0, 0.0, 0.1, 0.5, 0.75, 1.0, 1.0};
  const std::vector<double> dexpect{0.0, 0.0, 0.1, 0.1, 0.1, 0.0, 0.0};
  std::vector<double> a(z.size()), dz(z.size()), ones(z.size(), 1.0);
  cpu::alpha_activation_forward(a.data(), z.data(), 7, AlphaActivation::linear_clip);
  cpu::alpha_activation_backward(dz.data(), ones.data(), z.data(), 7, AlphaActivation::linear_clip);
  for (size_t k = 0; k < z.size(); ++k) {
    CHECK(a[k] == Approx(expect[k]).margin(1e-15));
    CHECK(dz[k] == Approx(dexpect[k]).margin(1e-15));
  }
}

TEST_CASE("alpha activation: FD gradients for linear_clip and sigmoid", "[cpu][activations]") {
  check_alpha_fd(AlphaActivation::linear_clip);
  check_alpha_fd(AlphaActivation::sigmoid);
}

TEST_CASE("alpha sigmoid: no overflow for large |z|", "[cpu][activations]") {
  const std::vector<double> z{-800.0, 800.0};
  std::vector<double> a(2), dz(2), ones(2, 1.0);
  cpu::alpha_activation_forward(a.data(), z.data(), 2, AlphaActivation::sigmoid);
  cpu::alpha_activation_backward(dz.data(), ones.data(), z.data(), 2, AlphaActivation::sigmoid);
  CHECK(a[0] == 0.0);
  CHECK(a[1] == 1.0);
  CHECK(dz[0] == 0.0);
  CHECK(dz[1] == 0.0);
}

TEST_CASE("sigmoid gate: forward and FD gradients of inp and gate", "[cpu][activations]") {
  const int64_t n = 29;
  auto x = random_vec(n, 73, -2.0, 2.0), g = random_vec(n, 74, -4.0, 4.0);
  const auto w = random_vec(n, 75);
  auto loss = [&] {
    std::vector<double> out(n);
    cpu::sigmoid_gate_forward(out.data(), x.data(), g.data(), n);
    return weighted_sum(w, out.data(), out.size());
  };
  std::vector<double> out(n);
  cpu::sigmoid_gate_forward(out.data(), x.data(), g.data(), n);
  for (int64_t k = 0; k < n; ++k)
    CHECK(out[k] == Approx(x[k] / (1.0 + std::exp(-g[k]))).epsilon(1e-14));
  std::vector<double> dx(n), dg(n);
  cpu::sigmoid_gate_backward(dx.data(), dg.data(), w.data(), x.data(), g.data(), n);
  check_grad(dx, numeric_grad(x, loss), "inp");
  check_grad(dg, numeric_grad(g, loss), "gate");
}

TEST_CASE("swiglu: forward and FD gradient of gate_up", "[cpu][activations]") {
  const int64_t N = 7, F = 13;
  auto gu = random_vec(N * 2 * F, 76, -3.0, 3.0);
  const auto w = random_vec(N * F, 77);
  auto loss = [&] {
    std::vector<double> out(N * F);
    cpu::swiglu_forward(out.data(), gu.data(), N, F);
    return weighted_sum(w, out.data(), out.size());
  };
  std::vector<double> out(N * F);
  cpu::swiglu_forward(out.data(), gu.data(), N, F);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
      CHECK(out[r * F + f] == Approx(g / (1.0 + std::exp(-g)) * u).epsilon(1e-14).margin(1e-15));
    }
  std::vector<double> dgu(gu.size(), std::nan(""));
  cpu::swiglu_backward(dgu.data(), w.data(), gu.data(), N, F);
  check_grad(dgu, numeric_grad(gu, loss), "gate_up");
}

TEST_CASE("add (aliasing allowed) and accumulate", "[cpu][activations]") {
  const int64_t n = 19;
  auto a = random_vec(n, 78), b = random_vec(n, 79);
  std::vector<double> out(n);
  cpu::add(out.data(), a.data(), b.data(), n);
  for (int64_t k = 0; k < n; ++k) CHECK(out[k] == a[k] + b[k]);
  auto a2 = a;
  cpu::add(a2.data(), a2.data(), b.data(), n);  // out aliases a
  CHECK(a2 == out);
  auto acc = a;
  cpu::accumulate(acc.data(), b.data(), n);
  CHECK(acc == out);
}

TEST_CASE("column_sum_accumulate adds row sums in order", "[cpu][activations]") {
  const int64_t N = 23, H = 70;  // H spans two column blocks
  const auto x = random_vec(N * H, 80);
  std::vector<double> sums(H, 1.5);
  cpu::column_sum_accumulate(sums.data(), x.data(), N, H);
  for (int64_t h = 0; h < H; ++h) {
    double s = 1.5;
    for (int64_t r = 0; r < N; ++r) s += x[r * H + h];
    CHECK(sums[h] == s);  // same order, same bits
  }
}

TEST_CASE("activations: float agrees with double", "[cpu][activations]") {
  const int64_t N = 7, F = 13;
  const auto gu = random_vec(N * 2 * F, 81, -3.0, 3.0), dy = random_vec(N * F, 82);
  std::vector<double> out(N * F), dgu(gu.size());
  cpu::swiglu_forward(out.data(), gu.data(), N, F);
  cpu::swiglu_backward(dgu.data(), dy.data(), gu.data(), N, F);
  auto fgu = to_float(gu), fdy = to_float(dy);
  std::vector<float> fout(N * F), fdgu(gu.size());
  cpu::swiglu_forward(fout.data(), fgu.data(), N, F);
  cpu::swiglu_backward(fdgu.data(), fdy.data(), fgu.data(), N, F);
  CHECK(max_rel_diff(fout, out) < 1e-6);
  CHECK(max_rel_diff(fdgu, dgu) < 1e-6);
  const auto z = alpha_inputs();
  std::vector<double> a(z.size());
  std::vector<float> fz = to_float(z), fa(z.size());
  cpu::alpha_activation_forward(a.data(), z.data(), static_cast<int64_t>(z.size()),
                                AlphaActivation::sigmoid);
  cpu::alpha_activation_forward(fa.data(), fz.data(), static_cast<int64_t>(z.size()),
                                AlphaActivation::sigmoid);
  CHECK(max_rel_diff(fa, a) < 1e-6);
}
