// Shared helpers for the CPU op tests: seeded random fills, the weighted-sum loss
// L = sum w*out, central finite differences, and error metrics.
//
// Finite differences are central, h = 1e-6, in double. The gradient error metric
// is the max-norm relative error  max_k |a_k - n_k| / max(max_k |n_k|, 1e-3):
// relative to the largest gradient entry, so tiny entries are not judged against
// round-off, with a floor so an all-zero gradient is compared absolutely.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "config/config.h"

namespace kdtrain::testutil {

constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;

inline std::vector<double> random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

inline double weighted_sum(const std::vector<double>& w, const double* out, size_t n) {
  double s = 0.0;
  for (size_t k = 0; k < n; ++k) s += w[k] * out[k];
  return s;
}

// Central-difference gradient of loss() with respect to x (perturbed in place, restored).
template <typename Loss>
std::vector<double> numeric_grad(std::vector<double>& x, Loss loss, double h = kFdStep) {
  std::vector<double> g(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const double x0 = x[k];
    x[k] = x0 + h;
    const double lp = loss();
    x[k] = x0 - h;
    const double lm = loss();
    x[k] = x0;
    g[k] = (lp - lm) / (2.0 * h);
  }
  return g;
}

inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& n) {
  double err = 0.0, scale = 1e-3;
  for (size_t k = 0; k < n.size(); ++k) {
    err = std::max(err, std::fabs(a[k] - n[k]));
    scale = std::max(scale, std::fabs(n[k]));
  }
  return err / scale;
}

inline void check_grad(const std::vector<double>& analytic, const std::vector<double>& numeric,
                       const std::string& what, double tol = kFdTol) {
  INFO("gradient of " << what);
  REQUIRE(analytic.size() == numeric.size());
  for (double a : analytic) REQUIRE(std::isfinite(a));
  CHECK(max_rel_error(analytic, numeric) < tol);
}

// max |a - b| / max(max |b|, 1e-3): float-vs-double agreement metric.
template <typename A, typename B>
double max_rel_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double err = 0.0, scale = 1e-3;
  for (size_t k = 0; k < b.size(); ++k) {
    err = std::max(err, std::fabs(static_cast<double>(a[k]) - static_cast<double>(b[k])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[k])));
  }
  return err / scale;
}

// The header-only spelling (config/attention_variant.h), so op tests need no config module.
inline const char* variant_name(AttentionVariant v) { return variant_info(v).name; }

}  // namespace kdtrain::testutil
