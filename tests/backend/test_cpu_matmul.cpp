// Linear layer through BLAS: forward against a naive loop, FD gradients of inp,
// weight and bias, accumulate_dinp and null outputs, float vs double.
#include <catch2/catch.hpp>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {
constexpr int64_t kN = 7, kIC = 13, kOC = 5;

struct MatmulProblem {
  std::vector<double> x = random_vec(kN * kIC, 41);
  std::vector<double> W = random_vec(kOC * kIC, 42);
  std::vector<double> b = random_vec(kOC, 43);
  std::vector<double> w = random_vec(kN * kOC, 44);
  double loss() const {
    std::vector<double> out(kN * kOC);
    cpu::matmul_forward(out.data(), x.data(), W.data(), b.data(), kN, kIC, kOC);
    return weighted_sum(w, out.data(), out.size());
  }
};
}  // namespace

TEST_CASE("matmul forward equals a naive loop, with and without bias", "[cpu][matmul]") {
  MatmulProblem p;
  std::vector<double> out(kN * kOC), out_nb(kN * kOC);
  cpu::matmul_forward(out.data(), p.x.data(), p.W.data(), p.b.data(), kN, kIC, kOC);
  cpu::matmul_forward<double>(out_nb.data(), p.x.data(), p.W.data(), nullptr, kN, kIC, kOC);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t o = 0; o < kOC; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < kIC; ++i) s += p.x[n * kIC + i] * p.W[o * kIC + i];
      CHECK(out_nb[n * kOC + o] == Approx(s).epsilon(1e-13).margin(1e-14));
      CHECK(out[n * kOC + o] == Approx(s + p.b[o]).epsilon(1e-13).margin(1e-14));
    }
}

TEST_CASE("matmul backward: FD gradients of inp, weight, bias", "[cpu][matmul]") {
  MatmulProblem p;
  std::vector<double> dx(p.x.size(), 9.0), dW(p.W.size(), 0.0), db(kOC, 0.0);
  cpu::matmul_backward(dx.data(), dW.data(), db.data(), p.w.data(), p.x.data(), p.W.data(), kN,
                       kIC, kOC, false);
  check_grad(dx, numeric_grad(p.x, [&] { return p.loss(); }), "inp");
  check_grad(dW, numeric_grad(p.W, [&] { return p.loss(); }), "weight");
  check_grad(db, numeric_grad(p.b, [&] { return p.loss(); }), "bias");
}

TEST_CASE("matmul backward: accumulate flag, += on parameters, null outputs skipped",
          "[cpu][matmul]") {
  MatmulProblem p;
  std::vector<double> dx1(p.x.size(), 0.0), dW1(p.W.size(), 0.0), db1(kOC, 0.0);
  cpu::matmul_backward(dx1.data(), dW1.data(), db1.data(), p.w.data(), p.x.data(), p.W.data(), kN,
                       kIC, kOC, false);
  std::vector<double> dx2(p.x.size(), 1.0), dW2(p.W.size(), 2.0), db2(kOC, 3.0);
  cpu::matmul_backward(dx2.data(), dW2.data(), db2.data(), p.w.data(), p.x.data(), p.W.data(), kN,
                       kIC, kOC, true);
  for (size_t k = 0; k < dx1.size(); ++k) CHECK(dx2[k] == Approx(dx1[k] + 1.0).epsilon(1e-14));
  for (size_t k = 0; k < dW1.size(); ++k) CHECK(dW2[k] == Approx(dW1[k] + 2.0).epsilon(1e-14));
  for (size_t k = 0; k < db1.size(); ++k) CHECK(db2[k] == Approx(db1[k] + 3.0).epsilon(1e-14));
  std::vector<double> dW3(p.W.size(), 0.0);
  cpu::matmul_backward<double>(nullptr, dW3.data(), nullptr, p.w.data(), p.x.data(), p.W.data(),
                               kN, kIC, kOC, false);
  CHECK(dW3 == dW1);
}

TEST_CASE("matmul: float agrees with double", "[cpu][matmul]") {
  MatmulProblem p;
  std::vector<double> out(kN * kOC), dx(p.x.size()), dW(p.W.size(), 0.0), db(kOC, 0.0);
  cpu::matmul_forward(out.data(), p.x.data(), p.W.data(), p.b.data(), kN, kIC, kOC);
  cpu::matmul_backward(dx.data(), dW.data(), db.data(), p.w.data(), p.x.data(), p.W.data(), kN,
                       kIC, kOC, false);
  auto x = to_float(p.x), W = to_float(p.W), b = to_float(p.b), w = to_float(p.w);
  std::vector<float> fo(out.size()), fdx(dx.size()), fdW(dW.size(), 0.f), fdb(kOC, 0.f);
  cpu::matmul_forward(fo.data(), x.data(), W.data(), b.data(), kN, kIC, kOC);
  cpu::matmul_backward(fdx.data(), fdW.data(), fdb.data(), w.data(), x.data(), W.data(), kN, kIC,
                       kOC, false);
  CHECK(max_rel_diff(fo, out) < 1e-6);
  CHECK(max_rel_diff(fdx, dx) < 1e-6);
  CHECK(max_rel_diff(fdW, dW) < 1e-6);
  CHECK(max_rel_diff(fdb, db) < 1e-6);
}
