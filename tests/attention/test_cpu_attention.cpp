// Attention core (every variant, both affine bias divisors): finite-difference
// gradients in double, a direct float64 evaluation of the forward, float vs double
// agreement, the variant reductions of docs/model.md, and thread-count independence.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {

struct AttnProblem {
  AttentionShape dims;
  AttentionVariant variant;
  AffineBiasDivisor divisor = AffineBiasDivisor::sequence;
  int64_t bias_keys = 0;  // `sequence`: N fixed at this count (the training length); 0 = T
  std::vector<double> qkv, sinks, alpha, alpha_ma, w;

  AttnProblem(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, AttentionVariant v,
              uint64_t seed)
      : dims{B, T, H, Hkv, D}, variant(v) {
    qkv = random_vec(static_cast<size_t>(B * T * (H + 2 * Hkv) * D), seed, -1.5, 1.5);
    sinks = random_vec(static_cast<size_t>(H), seed + 1, -1.0, 1.0);
    alpha = random_vec(static_cast<size_t>(B * T * H), seed + 2, 0.1, 1.2);
    alpha_ma = random_vec(static_cast<size_t>(H), seed + 3, 0.3, 0.9);
    w = random_vec(out_size(), seed + 4);
  }
  size_t out_size() const { return static_cast<size_t>(dims.B * dims.T * dims.H * dims.D); }
  size_t lse_size() const { return static_cast<size_t>(dims.B * dims.H * dims.T); }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(dims.D)); }
  AttentionFeatures features() const {
    AttentionFeatures f = features_of(variant, divisor);
    f.bias_keys = bias_keys;
    return f;
  }

  void forward(std::vector<double>& out, std::vector<double>& lse) const {
    out.assign(out_size(), 0.0);
    lse.assign(lse_size(), 0.0);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), sinks.data(), alpha.data(),
                           alpha_ma.data(), dims, scale(), features());
  }
  double loss() const {
    std::vector<double> out, lse;
    forward(out, lse);
    return weighted_sum(w, out.data(), out.size());
  }
  // Analytic gradients of L = sum w*out.
  void backward(std::vector<double>& dqkv, std::vector<double>& dsinks,
                std::vector<double>& dalpha) const {
    std::vector<double> out, lse;
    forward(out, lse);
    dqkv.assign(qkv.size(), std::numeric_limits<double>::quiet_NaN());  // must be fully written
    dsinks.assign(sinks.size(), 0.0);
    dalpha.assign(alpha.size(), std::numeric_limits<double>::quiet_NaN());
    cpu::attention_backward(dqkv.data(), dsinks.data(), dalpha.data(), w.data(), qkv.data(),
                            lse.data(), sinks.data(), alpha.data(), alpha_ma.data(), dims,
                            scale(), features());
  }
};

// Both divisors for the affine variants (the other variants ignore it).
std::vector<AffineBiasDivisor> divisors_of(AttentionVariant v) {
  if (features_of(v).affine) return {AffineBiasDivisor::sequence, AffineBiasDivisor::visible};
  return {AffineBiasDivisor::sequence};
}

void check_fd(AttentionVariant v, AffineBiasDivisor divisor, int64_t bias_keys = 0) {
  const int64_t shapes[][5] = {
      // B, T, H, Hkv, D
      {2, 1, 6, 2, 6}, {2, 5, 6, 2, 10}, {1, 11, 6, 2, 6}, {2, 5, 3, 3, 6}, {1, 11, 3, 3, 10}};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    AttnProblem p(s[0], s[1], s[2], s[3], s[4], v, seed++);
    p.divisor = divisor;
    p.bias_keys = bias_keys;
    INFO("variant " << variant_name(v) << " divisor " << divisor << " fixed N " << bias_keys << " B=" << s[0] << " T=" << s[1]
                    << " H=" << s[2] << " Hkv=" << s[3] << " D=" << s[4]);
    std::vector<double> dqkv, dsinks, dalpha;
    p.backward(dqkv, dsinks, dalpha);
    check_grad(dqkv, numeric_grad(p.qkv, [&] { return p.loss(); }), "qkv");
    if (features_of(v).sink) check_grad(dsinks, numeric_grad(p.sinks, [&] { return p.loss(); }), "sinks");
    if (features_of(v).affine) check_grad(dalpha, numeric_grad(p.alpha, [&] { return p.loss(); }), "alpha");
  }
}
void check_fd(AttentionVariant v) {
  for (AffineBiasDivisor d : divisors_of(v)) check_fd(v, d);
  // N fixed at a training length longer than every call (affine_inference_n train_length).
  if (features_of(v).affine) check_fd(v, AffineBiasDivisor::sequence, 13);
}

}  // namespace

TEST_CASE("attention baseline: finite-difference gradients (GQA and MHA)", "[cpu][attention]") {
  check_fd(AttentionVariant::baseline);
}
TEST_CASE("attention sink: finite-difference gradients incl. sinks", "[cpu][attention]") {
  check_fd(AttentionVariant::sink);
}
TEST_CASE("attention affine: finite-difference gradients incl. alpha", "[cpu][attention]") {
  check_fd(AttentionVariant::affine);
}
TEST_CASE("attention gated/affine-gated: finite-difference gradients", "[cpu][attention]") {
  check_fd(AttentionVariant::gated);
  check_fd(AttentionVariant::affine_gated);
}

TEST_CASE("attention forward: out and lse match a direct float64 evaluation", "[cpu][attention]") {
  struct Case {
    AttentionVariant v;
    AffineBiasDivisor divisor;
    int64_t T;
    int64_t bias_keys = 0;  // N fixed at the training length (affine_inference_n train_length)
  };
  const Case cases[] = {{AttentionVariant::baseline, AffineBiasDivisor::sequence, 7},
                        {AttentionVariant::sink, AffineBiasDivisor::sequence, 7},
                        {AttentionVariant::affine, AffineBiasDivisor::sequence, 7},
                        {AttentionVariant::affine, AffineBiasDivisor::sequence, 16},
                        {AttentionVariant::affine, AffineBiasDivisor::sequence, 7, 16},
                        {AttentionVariant::affine, AffineBiasDivisor::visible, 7},
                        {AttentionVariant::affine, AffineBiasDivisor::visible, 16}};
  for (const Case& c : cases) {
    const AttentionVariant v = c.v;
    INFO("variant " << variant_name(v) << " divisor " << c.divisor << " T=" << c.T << " fixed N " << c.bias_keys);
    AttnProblem p(2, c.T, 6, 2, 6, v, 7);
    p.divisor = c.divisor;
    p.bias_keys = c.bias_keys;
    std::vector<double> out, lse;
    p.forward(out, lse);
    const auto& d = p.dims;
    const int64_t C3 = (d.H + 2 * d.Hkv) * d.D;
    double max_err = 0.0;
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t i = 0; i < d.T; ++i) {
          const int64_t g = h / (d.H / d.Hkv);
          std::vector<double> e(static_cast<size_t>(i + 1));
          double denom = features_of(v).sink ? std::exp(p.sinks[h]) : 0.0;
          for (int64_t j = 0; j <= i; ++j) {
            double x = 0.0;
            for (int64_t k = 0; k < d.D; ++k)
              x += p.qkv[(b * d.T + i) * C3 + h * d.D + k] *
                   p.qkv[(b * d.T + j) * C3 + (d.H + g) * d.D + k];
            e[j] = std::exp(p.scale() * x);
            denom += e[j];
          }
          max_err = std::max(max_err, std::fabs(lse[(b * d.H + h) * d.T + i] - std::log(denom)));
          // affine: alpha_i PV + beta_i sum_{j<=i} v_j, beta_i = (alpha_ma - alpha_i) / N_i (docs/model.md)
          const bool affine = features_of(v).affine;
          const double a = affine ? p.alpha[(b * d.T + i) * d.H + h] : 1.0;
          const double n_keys = c.divisor == AffineBiasDivisor::visible ? double(i + 1)
                                : c.bias_keys > 0                        ? double(c.bias_keys)
                                                                         : double(d.T);
          const double beta = affine ? (p.alpha_ma[h] - a) / n_keys : 0.0;
          for (int64_t k = 0; k < d.D; ++k) {
            double o = 0.0;
            for (int64_t j = 0; j <= i; ++j) {
              const double vj = p.qkv[(b * d.T + j) * C3 + (d.H + d.Hkv + g) * d.D + k];
              o += (a * e[j] / denom + beta) * vj;
            }
            max_err = std::max(max_err, std::fabs(out[((b * d.T + i) * d.H + h) * d.D + k] - o));
          }
        }
    CHECK(max_err < 1e-12);
  }
}

TEST_CASE("attention: sink with s -> -inf equals baseline", "[cpu][attention][variants]") {
  AttnProblem base(2, 11, 6, 2, 10, AttentionVariant::baseline, 11);
  AttnProblem sink = base;
  sink.variant = AttentionVariant::sink;
  for (double& s : sink.sinks) s = -1e30;
  std::vector<double> o1, l1, o2, l2;
  base.forward(o1, l1);
  sink.forward(o2, l2);
  CHECK(max_rel_diff(o2, o1) < 1e-14);
  CHECK(max_rel_diff(l2, l1) < 1e-14);
  std::vector<double> g1, s1, a1, g2, s2, a2;
  base.backward(g1, s1, a1);
  sink.backward(g2, s2, a2);
  CHECK(max_rel_diff(g2, g1) < 1e-14);
  for (double ds : s2) CHECK(ds == 0.0);
}

TEST_CASE("attention: sink outputs carry total weight < 1", "[cpu][attention][variants]") {
  AttnProblem p(1, 5, 3, 3, 6, AttentionVariant::sink, 12);
  const auto& d = p.dims;
  const int64_t C3 = (d.H + 2 * d.Hkv) * d.D;
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t k = 0; k < d.Hkv * d.D; ++k) p.qkv[t * C3 + (d.H + d.Hkv) * d.D + k] = 1.0;
  std::vector<double> out, lse;
  p.forward(out, lse);
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t h = 0; h < d.H; ++h) {
      const double mass = out[(t * d.H + h) * d.D];
      CHECK(mass < 1.0);
      CHECK(mass > 0.0);
      // exactly 1 - p_sink
      CHECK(mass == Approx(1.0 - std::exp(p.sinks[h] - lse[h * d.T + t])).epsilon(1e-12));
    }
}

TEST_CASE("attention: affine with alpha == alpha_ma == 1 equals baseline",
          "[cpu][attention][variants]") {
  AttnProblem base(2, 11, 6, 2, 6, AttentionVariant::baseline, 13);
  AttnProblem aff = base;
  aff.variant = AttentionVariant::affine;
  std::fill(aff.alpha.begin(), aff.alpha.end(), 1.0);
  std::fill(aff.alpha_ma.begin(), aff.alpha_ma.end(), 1.0);
  std::vector<double> o1, l1, o2, l2;
  base.forward(o1, l1);
  aff.forward(o2, l2);
  CHECK(max_rel_diff(o2, o1) < 1e-14);
  std::vector<double> g1, s1, a1, g2, s2, a2;
  base.backward(g1, s1, a1);
  aff.backward(g2, s2, a2);
  CHECK(max_rel_diff(g2, g1) < 1e-13);
}

// With every v_j = c, out_i = (total weight of query i) c: alpha_ma under `visible`,
// alpha_i + (i + 1)(alpha_ma - alpha_i)/T under `sequence` (docs/model.md).
TEST_CASE("attention: affine total weight per query under each divisor", "[cpu][attention][variants]") {
  for (AffineBiasDivisor divisor : {AffineBiasDivisor::sequence, AffineBiasDivisor::visible}) {
  INFO("divisor " << divisor);
  AttnProblem p(2, 11, 6, 2, 10, AttentionVariant::affine, 14);
  p.divisor = divisor;
  const auto& d = p.dims;
  const int64_t C3 = (d.H + 2 * d.Hkv) * d.D;
  const std::vector<double> c = random_vec(static_cast<size_t>(d.D), 99);
  for (int64_t bt = 0; bt < d.B * d.T; ++bt)
    for (int64_t g = 0; g < d.Hkv; ++g)
      for (int64_t k = 0; k < d.D; ++k) p.qkv[bt * C3 + (d.H + d.Hkv + g) * d.D + k] = c[k];
  std::vector<double> out, lse;
  p.forward(out, lse);
  double max_err = 0.0, spread = 0.0;
  for (int64_t bt = 0; bt < d.B * d.T; ++bt)
    for (int64_t h = 0; h < d.H; ++h) {
      const double a = p.alpha[bt * d.H + h], i1 = static_cast<double>(bt % d.T + 1);
      const double total = divisor == AffineBiasDivisor::visible
                               ? p.alpha_ma[h]
                               : a + i1 * (p.alpha_ma[h] - a) / static_cast<double>(d.T);
      spread = std::max(spread, std::fabs(total - p.alpha_ma[h]));
      for (int64_t k = 0; k < d.D; ++k)
        max_err = std::max(max_err, std::fabs(out[(bt * d.H + h) * d.D + k] - total * c[k]));
    }
  CHECK(max_err < 1e-14);
  // Only `sequence` moves the total away from alpha_ma.
  CHECK((spread > 0.05) == (divisor == AffineBiasDivisor::sequence));
  }
}

TEST_CASE("attention: gated core equals baseline, affine-gated core equals affine",
          "[cpu][attention][variants]") {
  AttnProblem base(2, 5, 6, 2, 6, AttentionVariant::baseline, 15);
  AttnProblem gated = base;
  gated.variant = AttentionVariant::gated;
  AttnProblem aff = base;
  aff.variant = AttentionVariant::affine;
  AttnProblem affg = base;
  affg.variant = AttentionVariant::affine_gated;
  std::vector<double> o1, o2, o3, o4, l;
  base.forward(o1, l);
  gated.forward(o2, l);
  aff.forward(o3, l);
  affg.forward(o4, l);
  CHECK(o1 == o2);
  CHECK(o3 == o4);
  CHECK(o1 != o3);
}

TEST_CASE("attention: float agrees with double (forward and backward)", "[cpu][attention]") {
  for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::sink,
                             AttentionVariant::affine}) {
    INFO("variant " << variant_name(v));
    AttnProblem p(2, 11, 6, 2, 10, v, 16);
    std::vector<double> out, lse, dqkv, dsinks, dalpha;
    p.forward(out, lse);
    p.backward(dqkv, dsinks, dalpha);
    const auto qkv = to_float(p.qkv), sinks = to_float(p.sinks), alpha = to_float(p.alpha),
               ma = to_float(p.alpha_ma), w = to_float(p.w);
    std::vector<float> fo(out.size()), fl(lse.size()), fdq(dqkv.size()), fds(dsinks.size(), 0.f),
        fda(dalpha.size());
    const float sc = static_cast<float>(p.scale());
    cpu::attention_forward(fo.data(), fl.data(), qkv.data(), sinks.data(), alpha.data(), ma.data(),
                           p.dims, sc, p.features());
    cpu::attention_backward(fdq.data(), fds.data(), fda.data(), w.data(), qkv.data(), fl.data(),
                            sinks.data(), alpha.data(), ma.data(), p.dims, sc, p.features());
    CHECK(max_rel_diff(fo, out) < 1e-5);
    CHECK(max_rel_diff(fl, lse) < 1e-5);
    CHECK(max_rel_diff(fdq, dqkv) < 1e-5);
    if (features_of(v).sink) CHECK(max_rel_diff(fds, dsinks) < 1e-5);
    if (features_of(v).affine) CHECK(max_rel_diff(fda, dalpha) < 1e-5);
  }
}

TEST_CASE("attention backward: dsinks accumulates, dqkv is overwritten", "[cpu][attention]") {
  AttnProblem p(1, 5, 6, 2, 6, AttentionVariant::sink, 17);
  std::vector<double> out, lse;
  p.forward(out, lse);
  std::vector<double> dq1(p.qkv.size(), 7.0), ds1(p.sinks.size(), 0.0), da(p.alpha.size());
  std::vector<double> dq2(p.qkv.size(), -3.0), ds2(p.sinks.size(), 0.5);
  cpu::attention_backward(dq1.data(), ds1.data(), da.data(), p.w.data(), p.qkv.data(), lse.data(),
                          p.sinks.data(), p.alpha.data(), p.alpha_ma.data(), p.dims, p.scale(),
                          p.features());
  cpu::attention_backward(dq2.data(), ds2.data(), da.data(), p.w.data(), p.qkv.data(), lse.data(),
                          p.sinks.data(), p.alpha.data(), p.alpha_ma.data(), p.dims, p.scale(),
                          p.features());
  CHECK(dq1 == dq2);
  for (size_t h = 0; h < ds1.size(); ++h) CHECK(ds2[h] == Approx(ds1[h] + 0.5).epsilon(1e-15));
}

TEST_CASE("attention: identical bits with 1 and 2 OpenMP threads", "[cpu][attention][determinism]") {
  for (AttentionVariant v : {AttentionVariant::sink, AttentionVariant::affine}) {
    AttnProblem p(2, 11, 6, 2, 10, v, 18);
    const auto qkv = to_float(p.qkv), sinks = to_float(p.sinks), alpha = to_float(p.alpha),
               ma = to_float(p.alpha_ma), w = to_float(p.w);
    std::vector<float> out[2], lse[2], dq[2], ds[2], da[2];
    const int saved = omp_get_max_threads();
    for (int run = 0; run < 2; ++run) {
      omp_set_num_threads(run + 1);
      out[run].assign(p.out_size(), 0.f);
      lse[run].assign(p.lse_size(), 0.f);
      dq[run].assign(qkv.size(), 0.f);
      ds[run].assign(sinks.size(), 0.f);
      da[run].assign(alpha.size(), 0.f);
      cpu::attention_forward(out[run].data(), lse[run].data(), qkv.data(), sinks.data(),
                             alpha.data(), ma.data(), p.dims, 0.3f, p.features());
      cpu::attention_backward(dq[run].data(), ds[run].data(), da[run].data(), w.data(),
                              qkv.data(), lse[run].data(), sinks.data(), alpha.data(), ma.data(),
                              p.dims, 0.3f, p.features());
    }
    omp_set_num_threads(saved);
    CHECK(out[0] == out[1]);
    CHECK(lse[0] == lse[1]);
    CHECK(dq[0] == dq[1]);
    CHECK(ds[0] == ds[1]);
    CHECK(da[0] == da[1]);
  }
}

TEST_CASE("attention: large logits stay finite and float still agrees with double",
          "[cpu][attention]") {
  for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::sink,
                             AttentionVariant::affine}) {
    INFO("variant " << variant_name(v));
    AttnProblem p(1, 11, 6, 2, 6, v, 19);
    for (double& x : p.qkv) x *= 30.0;  // |x_ij| up to ~1e3: exp would overflow unshifted
    for (double& s : p.sinks) s *= 100.0;
    std::vector<double> out, lse, dqkv, dsinks, dalpha;
    p.forward(out, lse);
    p.backward(dqkv, dsinks, dalpha);
    for (double x : out) REQUIRE(std::isfinite(x));
    for (double x : lse) REQUIRE(std::isfinite(x));
    for (double x : dqkv) REQUIRE(std::isfinite(x));
    const auto qkv = to_float(p.qkv), sinks = to_float(p.sinks), alpha = to_float(p.alpha),
               ma = to_float(p.alpha_ma);
    std::vector<float> fo(out.size()), fl(lse.size());
    cpu::attention_forward(fo.data(), fl.data(), qkv.data(), sinks.data(), alpha.data(), ma.data(),
                           p.dims, static_cast<float>(p.scale()), p.features());
    CHECK(max_rel_diff(fo, out) < 1e-4);  // logits ~1e3 in float carry ~1e-4 absolute error
    CHECK(max_rel_diff(fl, lse) < 1e-6);
  }
}
