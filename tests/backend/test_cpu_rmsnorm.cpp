// RMSNorm: forward against a direct formula, FD gradients of inp and weight,
// accumulate (+=) semantics, float vs double, thread-count independence.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {
constexpr int64_t kN = 7, kC = 13;
constexpr double kEps = 1e-5;

struct NormProblem {
  std::vector<double> x = random_vec(kN * kC, 21, -2.0, 2.0);
  std::vector<double> wt = random_vec(kC, 22, 0.5, 1.5);
  std::vector<double> w = random_vec(kN * kC, 23);
  double loss() const {
    std::vector<double> out(x.size()), rstd(kN);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), wt.data(), kN, kC, kEps);
    return weighted_sum(w, out.data(), out.size());
  }
};
}  // namespace

TEST_CASE("rmsnorm forward equals x / rms(x) * weight", "[cpu][rmsnorm]") {
  NormProblem p;
  std::vector<double> out(p.x.size()), rstd(kN);
  cpu::rmsnorm_forward(out.data(), rstd.data(), p.x.data(), p.wt.data(), kN, kC, kEps);
  for (int64_t n = 0; n < kN; ++n) {
    double ms = 0.0;
    for (int64_t c = 0; c < kC; ++c) ms += p.x[n * kC + c] * p.x[n * kC + c] / kC;
    const double r = 1.0 / std::sqrt(ms + kEps);
    CHECK(rstd[n] == Approx(r).epsilon(1e-14));
    for (int64_t c = 0; c < kC; ++c)
      CHECK(out[n * kC + c] == Approx(p.x[n * kC + c] * r * p.wt[c]).epsilon(1e-14));
  }
}

TEST_CASE("rmsnorm backward: FD gradients, accumulated into existing values", "[cpu][rmsnorm]") {
  NormProblem p;
  std::vector<double> out(p.x.size()), rstd(kN);
  cpu::rmsnorm_forward(out.data(), rstd.data(), p.x.data(), p.wt.data(), kN, kC, kEps);
  std::vector<double> dx(p.x.size(), 0.25), dw(kC, -0.5);  // pre-existing values: += semantics
  cpu::rmsnorm_backward(dx.data(), dw.data(), p.w.data(), p.x.data(), p.wt.data(), rstd.data(),
                        kN, kC);
  for (double& v : dx) v -= 0.25;
  for (double& v : dw) v += 0.5;
  check_grad(dx, numeric_grad(p.x, [&] { return p.loss(); }), "inp");
  check_grad(dw, numeric_grad(p.wt, [&] { return p.loss(); }), "weight");
}

TEST_CASE("rmsnorm: float agrees with double", "[cpu][rmsnorm]") {
  NormProblem p;
  std::vector<double> out(p.x.size()), rstd(kN), dx(p.x.size(), 0.0), dw(kC, 0.0);
  cpu::rmsnorm_forward(out.data(), rstd.data(), p.x.data(), p.wt.data(), kN, kC, kEps);
  cpu::rmsnorm_backward(dx.data(), dw.data(), p.w.data(), p.x.data(), p.wt.data(), rstd.data(), kN,
                        kC);
  auto x = to_float(p.x), wt = to_float(p.wt), w = to_float(p.w);
  std::vector<float> fo(x.size()), fr(kN), fdx(x.size(), 0.f), fdw(kC, 0.f);
  cpu::rmsnorm_forward(fo.data(), fr.data(), x.data(), wt.data(), kN, kC, 1e-5f);
  cpu::rmsnorm_backward(fdx.data(), fdw.data(), w.data(), x.data(), wt.data(), fr.data(), kN, kC);
  CHECK(max_rel_diff(fo, out) < 1e-6);
  CHECK(max_rel_diff(fdx, dx) < 1e-6);
  CHECK(max_rel_diff(fdw, dw) < 1e-6);
}

TEST_CASE("rmsnorm backward: identical bits with 1 and 2 OpenMP threads",
          "[cpu][rmsnorm][determinism]") {
  const int64_t N = 37, C = 150;  // several column blocks
  auto x = to_float(random_vec(N * C, 31)), wt = to_float(random_vec(C, 32)),
       dy = to_float(random_vec(N * C, 33));
  std::vector<float> rstd(N), out(N * C), dx[2], dw[2];
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), wt.data(), N, C, 1e-6f);
  const int saved = omp_get_max_threads();
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dx[run].assign(N * C, 0.f);
    dw[run].assign(C, 0.f);
    cpu::rmsnorm_backward(dx[run].data(), dw[run].data(), dy.data(), x.data(), wt.data(),
                          rstd.data(), N, C);
  }
  omp_set_num_threads(saved);
  CHECK(dx[0] == dx[1]);
  CHECK(dw[0] == dw[1]);
}

TEST_CASE("add_rmsnorm forward equals add then rmsnorm, also in place", "[cpu][rmsnorm]") {
  NormProblem p;
  const std::vector<double> b = random_vec(kN * kC, 24, -1.0, 1.0);
  std::vector<double> sum(p.x.size()), ref_sum(p.x.size()), out(p.x.size()), ref_out(p.x.size());
  std::vector<double> rstd(kN), ref_rstd(kN);
  cpu::add(ref_sum.data(), p.x.data(), b.data(), kN * kC);
  cpu::rmsnorm_forward(ref_out.data(), ref_rstd.data(), ref_sum.data(), p.wt.data(), kN, kC, kEps);
  cpu::add_rmsnorm_forward(sum.data(), out.data(), rstd.data(), p.x.data(), b.data(), p.wt.data(),
                           kN, kC, kEps);
  CHECK(sum == ref_sum);
  CHECK(out == ref_out);
  CHECK(rstd == ref_rstd);
  std::vector<double> a = p.x;  // sum_out aliasing a
  cpu::add_rmsnorm_forward(a.data(), out.data(), rstd.data(), a.data(), b.data(), p.wt.data(), kN,
                           kC, kEps);
  CHECK(a == ref_sum);
  CHECK(out == ref_out);
}
