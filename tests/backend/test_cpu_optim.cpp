// Optimizer support: sum_squares against a direct double sum and thread
// independence; AdamW against a hand-computed two-step update.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "support/backend_args.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testing;
using namespace kdtrain::testutil;

TEST_CASE("sum_squares equals a direct double sum, same bits for 1 and 2 threads",
          "[cpu][optim][determinism]") {
  const int64_t n = 10007;  // spans 3 blocks, last one partial
  const auto x = to_float(random_vec(n, 91, -3.0, 3.0));
  double direct = 0.0;
  for (float v : x) direct += static_cast<double>(v) * v;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double s1 = cpu::sum_squares(x.data(), n);
  omp_set_num_threads(2);
  const double s2 = cpu::sum_squares(x.data(), n);
  omp_set_num_threads(saved);
  CHECK(s1 == s2);
  CHECK(s1 == Approx(direct).epsilon(1e-12));  // blocked vs sequential order
  CHECK(cpu::sum_squares(x.data(), 0) == 0.0);
}

TEST_CASE("adamw: two steps match a hand computation", "[cpu][optim]") {
  // One element, lr 0.1, b1 0.9, b2 0.95, eps 1e-8, wd 0.1, grad_scale 0.5.
  std::vector<double> w{1.0}, m{0.0}, v{0.0};
  const std::vector<double> g1{2.0}, g2{-1.0};
  cpu::adamw_update<double>(w.data(), nullptr, g1.data(), m.data(), v.data(), 1, 0.1, 0.9, 0.95,
                            1e-8, 0.1, 0.5, 1);
  // step 1: g' = 1; m = 0.1; v = 0.05; mhat = 1; vhat = 1; w = 1 - 0.1*(1/(1+1e-8) + 0.1*1)
  const double w1 = 1.0 - 0.1 * (1.0 / (1.0 + 1e-8) + 0.1);
  CHECK(m[0] == Approx(0.1).epsilon(1e-15));
  CHECK(v[0] == Approx(0.05).epsilon(1e-15));
  CHECK(w[0] == Approx(w1).epsilon(1e-15));
  cpu::adamw_update<double>(w.data(), nullptr, g2.data(), m.data(), v.data(), 1, 0.1, 0.9, 0.95,
                            1e-8, 0.1, 0.5, 2);
  // step 2: g' = -0.5; m = 0.09 - 0.05 = 0.04; v = 0.0475 + 0.0125 = 0.06
  const double m2 = 0.04, v2 = 0.06;
  const double mhat = m2 / (1.0 - 0.81), vhat = v2 / (1.0 - 0.9025);
  const double w2 = w1 - 0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * w1);
  CHECK(m[0] == Approx(m2).epsilon(1e-14));
  CHECK(v[0] == Approx(v2).epsilon(1e-14));
  CHECK(w[0] == Approx(w2).epsilon(1e-14));
}

TEST_CASE("adamw: compute copy written unless it aliases master; float matches double",
          "[cpu][optim]") {
  const int64_t n = 37;
  const auto w0 = random_vec(n, 92), g = random_vec(n, 93);
  std::vector<double> w = w0, m(n, 0.0), v(n, 0.0);
  for (int64_t step = 1; step <= 3; ++step)
    cpu::adamw_update<double>(w.data(), nullptr, g.data(), m.data(), v.data(), n, 1e-2, 0.9, 0.95,
                              1e-8, 0.1, 1.0, step);
  auto fw = to_float(w0), fg = to_float(g);
  std::vector<float> fm(n, 0.f), fv(n, 0.f), fc(n, -99.f);
  for (int64_t step = 1; step <= 3; ++step)
    cpu::adamw_update<float>(fw.data(), fc.data(), fg.data(), fm.data(), fv.data(), n, 1e-2f, 0.9f,
                             0.95f, 1e-8f, 0.1f, 1.0f, step);
  CHECK(fc == fw);
  CHECK(max_rel_diff(fw, w) < 1e-6);
  // aliased compute copy: same result as no copy
  auto aw = to_float(w0);
  std::vector<float> am(n, 0.f), av(n, 0.f);
  for (int64_t step = 1; step <= 3; ++step)
    cpu::adamw_update<float>(aw.data(), aw.data(), fg.data(), am.data(), av.data(), n, 1e-2f, 0.9f,
                             0.95f, 1e-8f, 0.1f, 1.0f, step);
  CHECK(aw == fw);
}

TEST_CASE("adamw multi-tensor: segments equal one call per segment, gaps untouched",
          "[cpu][optim]") {
  auto be = make_backend("cpu", 1);
  const int64_t n = 1000;
  const auto w0 = to_float(random_vec(n, 94)), g = to_float(random_vec(n, 95));
  const std::vector<ParamSegment> segments = {{0, 7, 0.1f}, {7, 300, 0.f}, {333, 999, 0.1f}};
  std::vector<float> w1 = w0, m1(n, 0.f), v1(n, 0.f), w2 = w0, m2(n, 0.f), v2(n, 0.f);
  for (int64_t step = 1; step <= 2; ++step) {
    AdamWArgs a = adamw_args(w1.data(), w1.data(), g.data(), m1.data(), v1.data(), n);
    a.lr = 1e-2f;
    a.grad_scale = 0.5f;
    a.step = step;
    adamw_step_both_ways(*be, a, segments,
                         adamw_args(w2.data(), w2.data(), g.data(), m2.data(), v2.data(), n), sizeof(float));
  }
  CHECK(w1 == w2);
  CHECK(m1 == m2);
  CHECK(v1 == v2);
  for (int64_t k : {300, 320, 332, 999}) CHECK(w1[k] == w0[k]);  // gaps and the tail
  AdamWArgs bad = adamw_args(w1.data(), nullptr, g.data(), m1.data(), v1.data(), n);
  const std::vector<ParamSegment> overlapping = {{0, 10, 0.f}, {5, 20, 0.f}};
  bad.segments = overlapping.data();
  bad.num_segments = 2;
  CHECK_THROWS_WITH(be->adamw_update(bad), Catch::Contains("segment 1"));
}
