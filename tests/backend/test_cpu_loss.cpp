// Fused CE + KD loss on a chunk: direct CE, KL(p||p) = 0, finite-difference
// gradients of CE, every KD loss and the mixed loss in double, float vs double,
// the logged teacher soft cross-entropy.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {

constexpr int64_t kRows = 7, kVocab = 13;

struct LossProblem {
  std::vector<double> s = random_vec(kRows * kVocab, 1, -3.0, 3.0);
  std::vector<double> t = random_vec(kRows * kVocab, 2, -3.0, 3.0);
  std::vector<int32_t> targets{0, 12, 5, 3, 7, 12, 1};
  KdLoss kind = KdLoss::forward_kl;
  double tau = 2.0, weight = 0.4, grad_scale = 1.0;
  bool teacher = true;

  // Returns grad_scale * sum_r (w*kd + (1-w)*ce) and optionally the analytic gradient.
  double run(std::vector<double>* grad, std::vector<double>* ce_out = nullptr,
             std::vector<double>* kd_out = nullptr, std::vector<double>* soft_ce_out = nullptr) const {
    std::vector<double> logits = s, ce(kRows), kd(kRows), soft_ce(kRows, -1.0);
    cpu::loss_chunk(logits.data(), teacher ? t.data() : nullptr, targets.data(), ce.data(),
                    kd.data(), kRows, kVocab, kind, tau, weight, grad_scale, grad != nullptr,
                    soft_ce_out ? soft_ce.data() : nullptr);
    if (grad != nullptr) *grad = logits;
    if (ce_out != nullptr) *ce_out = ce;
    if (kd_out != nullptr) *kd_out = kd;
    if (soft_ce_out != nullptr) *soft_ce_out = soft_ce;
    const double w = teacher ? weight : 0.0;
    double total = 0.0;
    for (int64_t r = 0; r < kRows; ++r) total += w * kd[r] + (1.0 - w) * ce[r];
    return grad_scale * total;
  }
};

void check_loss_fd(LossProblem p) {
  std::vector<double> g;
  p.run(&g);
  check_grad(g, numeric_grad(p.s, [&] { return p.run(nullptr); }), "logits");
}

}  // namespace

TEST_CASE("loss: cross-entropy equals a direct computation", "[cpu][loss]") {
  LossProblem p;
  p.teacher = false;
  std::vector<double> ce, kd;
  p.run(nullptr, &ce, &kd);
  for (int64_t r = 0; r < kRows; ++r) {
    double sum = 0.0;
    for (int64_t k = 0; k < kVocab; ++k) sum += std::exp(p.s[r * kVocab + k]);
    CHECK(ce[r] == Approx(std::log(sum) - p.s[r * kVocab + p.targets[r]]).epsilon(1e-13));
    CHECK(kd[r] == 0.0);
  }
}

TEST_CASE("loss: KD losses equal direct formulas", "[cpu][loss]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    LossProblem p;
    p.kind = kind;
    std::vector<double> ce, kd;
    p.run(nullptr, &ce, &kd);
    for (int64_t r = 0; r < kRows; ++r) {
      double zs = 0.0, zt = 0.0;
      for (int64_t k = 0; k < kVocab; ++k) {
        zs += std::exp(p.s[r * kVocab + k] / p.tau);
        zt += std::exp(p.t[r * kVocab + k] / p.tau);
      }
      double expect = 0.0;
      for (int64_t k = 0; k < kVocab; ++k) {
        const double ps = std::exp(p.s[r * kVocab + k] / p.tau) / zs;
        const double pt = std::exp(p.t[r * kVocab + k] / p.tau) / zt;
        if (kind == KdLoss::forward_kl) expect += pt * std::log(pt / ps);
        if (kind == KdLoss::reverse_kl) expect += ps * std::log(ps / pt);
        if (kind == KdLoss::soft_ce) expect -= pt * std::log(ps);
      }
      CHECK(kd[r] == Approx(p.tau * p.tau * expect).epsilon(1e-12));
    }
  }
}

// The logged soft cross-entropy is -tau^2 sum p_T log p_S for every kd.loss: the same
// number as the soft_ce loss itself, and forward KL + tau^2 * teacher entropy.
TEST_CASE("loss: soft cross-entropy output = KL + teacher entropy for every KD loss",
          "[cpu][loss]") {
  LossProblem ref;
  ref.kind = KdLoss::soft_ce;
  std::vector<double> ce, soft_ce_as_loss;
  ref.run(nullptr, &ce, &soft_ce_as_loss);
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    LossProblem p;
    p.kind = kind;
    std::vector<double> kd, soft_ce;
    p.run(nullptr, &ce, &kd, &soft_ce);
    for (int64_t r = 0; r < kRows; ++r) {
      CHECK(soft_ce[r] == Approx(soft_ce_as_loss[r]).epsilon(1e-13));
      if (kind != KdLoss::forward_kl) continue;
      double zt = 0.0;
      for (int64_t k = 0; k < kVocab; ++k) zt += std::exp(p.t[r * kVocab + k] / p.tau);
      double entropy = 0.0;
      for (int64_t k = 0; k < kVocab; ++k) {
        const double pt = std::exp(p.t[r * kVocab + k] / p.tau) / zt;
        entropy -= pt * std::log(pt);
      }
      CHECK(soft_ce[r] == Approx(kd[r] + p.tau * p.tau * entropy).epsilon(1e-12));
    }
  }
  LossProblem none;
  none.teacher = false;
  std::vector<double> kd, soft_ce;
  none.run(nullptr, &ce, &kd, &soft_ce);
  for (double v : soft_ce) CHECK(v == 0.0);
}

TEST_CASE("loss: forward KL against an identical teacher is 0 with zero KD gradient",
          "[cpu][loss]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl}) {
    LossProblem p;
    p.kind = kind;
    p.t = p.s;
    p.weight = 1.0;  // KD only
    std::vector<double> g, ce, kd;
    p.run(&g, &ce, &kd);
    for (double v : kd) CHECK(std::fabs(v) < 1e-14);
    for (double v : g) CHECK(std::fabs(v) < 1e-15);
  }
}

TEST_CASE("loss: CE gradient by finite differences", "[cpu][loss]") {
  LossProblem p;
  p.teacher = false;
  p.weight = 0.7;  // must be ignored without a teacher
  check_loss_fd(p);
}

TEST_CASE("loss: forward KL gradient by finite differences", "[cpu][loss]") {
  LossProblem p;
  p.kind = KdLoss::forward_kl;
  p.weight = 1.0;
  check_loss_fd(p);
}

TEST_CASE("loss: reverse KL gradient by finite differences", "[cpu][loss]") {
  LossProblem p;
  p.kind = KdLoss::reverse_kl;
  p.weight = 1.0;
  check_loss_fd(p);
}

TEST_CASE("loss: soft CE gradient by finite differences", "[cpu][loss]") {
  LossProblem p;
  p.kind = KdLoss::soft_ce;
  p.weight = 1.0;
  p.tau = 0.7;
  check_loss_fd(p);
}

TEST_CASE("loss: mixed CE + KD gradient with grad_scale by finite differences", "[cpu][loss]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    LossProblem p;
    p.kind = kind;
    p.weight = 0.35;
    p.tau = 1.5;
    p.grad_scale = 1.0 / 3.0;
    check_loss_fd(p);
  }
}

TEST_CASE("loss: negative target masks the CE term", "[cpu][loss]") {
  LossProblem p;
  p.targets[2] = -1;
  p.weight = 0.5;
  std::vector<double> g, ce, kd;
  p.run(&g, &ce, &kd);
  CHECK(ce[2] == 0.0);
  check_loss_fd(p);
}

TEST_CASE("loss: compute_grad=false leaves logits untouched", "[cpu][loss]") {
  LossProblem p;
  std::vector<double> logits = p.s, ce(kRows), kd(kRows);
  cpu::loss_chunk(logits.data(), p.t.data(), p.targets.data(), ce.data(), kd.data(), kRows, kVocab,
                  KdLoss::forward_kl, 2.0, 0.5, 1.0, false);
  CHECK(logits == p.s);
}

TEST_CASE("loss: float agrees with double", "[cpu][loss]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    LossProblem p;
    p.kind = kind;
    std::vector<double> g, ce, kd;
    p.run(&g, &ce, &kd);
    std::vector<float> fl = to_float(p.s), ft = to_float(p.t), fce(kRows), fkd(kRows);
    cpu::loss_chunk(fl.data(), ft.data(), p.targets.data(), fce.data(), fkd.data(), kRows, kVocab,
                    kind, 2.0f, 0.4f, 1.0f, true);
    CHECK(max_rel_diff(fce, ce) < 1e-6);
    CHECK(max_rel_diff(fkd, kd) < 1e-6);
    CHECK(max_rel_diff(fl, g) < 1e-6);
  }
}

TEST_CASE("loss: huge logits stay finite", "[cpu][loss]") {
  for (KdLoss kind : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    LossProblem p;
    p.kind = kind;
    for (double& x : p.s) x *= 3000.0;
    for (double& x : p.t) x *= 3000.0;
    std::vector<double> g, ce, kd;
    p.run(&g, &ce, &kd);
    for (int64_t r = 0; r < kRows; ++r) {
      REQUIRE(std::isfinite(ce[r]));
      REQUIRE(std::isfinite(kd[r]));
      double mx = -1e300;
      for (int64_t k = 0; k < kVocab; ++k) mx = std::max(mx, p.s[r * kVocab + k]);
      double sum = 0.0;
      for (int64_t k = 0; k < kVocab; ++k) sum += std::exp(p.s[r * kVocab + k] - mx);
      CHECK(ce[r] == Approx(mx + std::log(sum) - p.s[r * kVocab + p.targets[r]]).epsilon(1e-12));
    }
    for (double x : g) REQUIRE(std::isfinite(x));
  }
}
