// CPU mirror of the fused attention (flash_mirror_{forward,backward}.cpp) against the unfused CPU
// reference (cpu_attention.cpp): forward (out, lse) and backward (dqkv, dsinks,
// dalpha), every variant (affine under both bias divisors), MHA and GQA, default and forced-small tile sizes
// (including tiles that do not divide T, Bc < Br, and Bc > Br not a multiple of Br).
//
// Tolerances (error metric: max |flash - ref| / max(max |ref|, 1e-3), per output):
//   double: 1e-12     float: 1e-5 (float flash vs float reference), except dsinks in
//   float: 5e-5 — a sum over B*T rows whose per-row D_i the two compute differently
//   (flash: dO.out, reference: sum_j P_ij dP_ij), so their float round-off differs.
// Determinism: the same call twice, with 1 and 3 OpenMP threads, gives identical bits.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "oracles/flash_mirror.h"
#include "backend/cpu/cpu_ops.h"
#include "oracles/attention_terms.h"
#include "support/cpu_test_util.h"
#include "kernels/attention/flash_tiles.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {

// The default tiles obey what the CUDA kernels rely on (the forward's own constraints are
// static_asserts in flash_forward_kernel.cuh's ForwardLayout).
constexpr bool tiles_ok(int D) {
  using flash::FlashPass;
  const auto f = flash::flash_tiles(D, FlashPass::forward);
  const auto b = flash::flash_tiles(D, FlashPass::backward);
  return f.Br % (16 * f.warps) == 0 && f.Bc % 16 == 0 && b.Bc == 16 * b.warps && b.Br % 16 == 0;
}
static_assert(tiles_ok(64) && tiles_ok(128), "flash tile sizes break the kernels' assumptions");

constexpr auto kVariants = all_attention_variants();

struct Problem {
  AttentionShape dims;
  AttentionVariant variant;
  AffineBiasDivisor divisor = AffineBiasDivisor::sequence;
  std::vector<double> qkv, sinks, alpha, alpha_ma, dout;
  AttentionFeatures features() const { return features_of(variant, divisor); }

  Problem(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, AttentionVariant v, uint64_t seed)
      : dims{B, T, H, Hkv, D}, variant(v) {
    qkv = random_vec(static_cast<size_t>(B * T * (H + 2 * Hkv) * D), seed, -1.5, 1.5);
    sinks = random_vec(static_cast<size_t>(H), seed + 1, -1.0, 1.0);
    alpha = random_vec(static_cast<size_t>(B * T * H), seed + 2, 0.0, 1.2);
    // linear_clip gives alpha == 0 and 1 exactly: the backward must not divide by alpha.
    for (size_t k = 0; k < alpha.size(); k += 5) alpha[k] = 0.0;
    for (size_t k = 2; k < alpha.size(); k += 7) alpha[k] = 1.0;
    alpha_ma = random_vec(static_cast<size_t>(H), seed + 3, 0.3, 0.9);
    dout = random_vec(static_cast<size_t>(B * T * H * D), seed + 4);
  }
};

template <typename T>
struct Result {
  std::vector<T> out, lse, dqkv, dsinks, dalpha;
};

template <typename T>
struct Inputs {
  std::vector<T> qkv, sinks, alpha, alpha_ma, dout;
  explicit Inputs(const Problem& pb)
      : qkv(pb.qkv.begin(), pb.qkv.end()), sinks(pb.sinks.begin(), pb.sinks.end()),
        alpha(pb.alpha.begin(), pb.alpha.end()), alpha_ma(pb.alpha_ma.begin(), pb.alpha_ma.end()),
        dout(pb.dout.begin(), pb.dout.end()) {}
};

template <typename T>
Result<T> allocate(const Problem& pb) {
  const auto& d = pb.dims;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Result<T> r;
  r.out.assign(static_cast<size_t>(d.B * d.T * d.H * d.D), nan);  // must be fully written
  r.lse.assign(static_cast<size_t>(d.B * d.H * d.T), nan);
  r.dqkv.assign(pb.qkv.size(), nan);
  r.dsinks.assign(static_cast<size_t>(d.H), T(0.25));  // accumulated into
  r.dalpha.assign(pb.alpha.size(), features_of(pb.variant).affine ? nan : T(0));
  return r;
}

template <typename T>
T scale_of(const Problem& pb) {
  return T(1) / std::sqrt(static_cast<T>(pb.dims.D));
}

template <typename T>
Result<T> run_reference(const Problem& pb) {
  const Inputs<T> in(pb);
  Result<T> r = allocate<T>(pb);
  cpu::attention_forward<T>(r.out.data(), r.lse.data(), in.qkv.data(), in.sinks.data(),
                            in.alpha.data(), in.alpha_ma.data(), pb.dims, scale_of<T>(pb), pb.features());
  cpu::attention_backward<T>(r.dqkv.data(), r.dsinks.data(), r.dalpha.data(), in.dout.data(),
                             in.qkv.data(), r.lse.data(), in.sinks.data(), in.alpha.data(),
                             in.alpha_ma.data(), pb.dims, scale_of<T>(pb), pb.features());
  return r;
}

template <typename T>
Result<T> run_flash(const Problem& pb, cpu::FlashTileOverride tiles) {
  const Inputs<T> in(pb);
  Result<T> r = allocate<T>(pb);
  cpu::flash_attention_forward<T>(r.out.data(), r.lse.data(), in.qkv.data(), in.sinks.data(),
                                  in.alpha.data(), in.alpha_ma.data(), pb.dims, scale_of<T>(pb),
                                  pb.features(), tiles);
  cpu::flash_attention_backward<T>(r.dqkv.data(), r.dsinks.data(), r.dalpha.data(), in.dout.data(),
                                   in.qkv.data(), r.out.data(), r.lse.data(), in.sinks.data(),
                                   in.alpha.data(), in.alpha_ma.data(), pb.dims, scale_of<T>(pb),
                                   pb.features(), tiles);
  return r;
}

template <typename T>
void check_all_finite(const std::vector<T>& v, const char* what) {
  INFO(what);
  bool finite = true;
  for (T x : v) finite = finite && std::isfinite(x);
  CHECK(finite);
}

template <typename T>
void compare_to_reference(const Problem& pb, cpu::FlashTileOverride tiles, double tol,
                          double dsinks_tol) {
  INFO(variant_name(pb.variant) << " divisor " << pb.divisor << " B=" << pb.dims.B << " T=" << pb.dims.T << " H=" << pb.dims.H
                                << " Hkv=" << pb.dims.Hkv << " D=" << pb.dims.D << " Br="
                                << tiles.Br << " Bc=" << tiles.Bc);
  const Result<T> ref = run_reference<T>(pb);
  const Result<T> got = run_flash<T>(pb, tiles);
  check_all_finite(got.out, "out");
  check_all_finite(got.lse, "lse");
  check_all_finite(got.dqkv, "dqkv");
  CHECK(max_rel_diff(got.out, ref.out) < tol);
  CHECK(max_rel_diff(got.lse, ref.lse) < tol);
  CHECK(max_rel_diff(got.dqkv, ref.dqkv) < tol);
  if (features_of(pb.variant).sink) CHECK(max_rel_diff(got.dsinks, ref.dsinks) < dsinks_tol);
  else CHECK(got.dsinks == ref.dsinks);  // untouched
  if (features_of(pb.variant).affine) {
    check_all_finite(got.dalpha, "dalpha");
    // dalpha_i = sum_j P_ij dO_i.v_j - dO_i.S_i / N_i is a difference of two terms that
    // cancel exactly at i = 0; its round-off scales with the terms, not with dalpha.
    double err = 0, scale = 1e-3;
    for (size_t k = 0; k < ref.dalpha.size(); ++k) {
      err = std::max(err, std::fabs(static_cast<double>(got.dalpha[k]) - ref.dalpha[k]));
      scale = std::max(scale, std::fabs(static_cast<double>(ref.dalpha[k])));
    }
    CHECK(err / std::max(scale, testing::dalpha_cancelling_terms(pb.qkv.data(), pb.dout.data(), pb.dims, pb.divisor)) < tol);
  }
}

uint64_t seed_of(int64_t T, int64_t D, int64_t Hkv, AttentionVariant v) {
  return static_cast<uint64_t>(1000003 * T + 7919 * D + 101 * Hkv + static_cast<int>(v));
}

}  // namespace

TEST_CASE("cpu flash attention matches the reference in double", "[flash][attention]") {
  const cpu::FlashTileOverride all_tiles[] = {{0, 0}, {16, 16}, {16, 8}, {8, 24}, {7, 5}};
  for (AttentionVariant v : kVariants) {
    for (int64_t T : {1, 7, 64, 130}) {
      for (int64_t D : {8, 64}) {
        for (int64_t Hkv : {2, 1}) {  // MHA and GQA (group 2)
          const Problem pb(2, T, 2, Hkv, D, v, seed_of(T, D, Hkv, v));
          for (const auto& tiles : all_tiles) compare_to_reference<double>(pb, tiles, 1e-12, 1e-12);
        }
      }
    }
    // Longer and wider: fewer tile shapes to keep the suite quick.
    for (int64_t Hkv : {3, 1}) {  // MHA and GQA (group 3)
      const Problem pb(1, 300, 3, Hkv, 64, v, seed_of(300, 64, Hkv, v));
      compare_to_reference<double>(pb, Hkv == 1 ? cpu::FlashTileOverride{16, 16}
                                               : cpu::FlashTileOverride{0, 0},
                                   1e-12, 1e-12);
    }
    for (int64_t T : {1, 7, 130}) {
      const Problem pb(1, T, 2, 1, 128, v, seed_of(T, 128, 1, v));
      compare_to_reference<double>(pb, {0, 0}, 1e-12, 1e-12);
      compare_to_reference<double>(pb, {16, 16}, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("cpu flash attention matches the reference under the visible divisor", "[flash][attention]") {
  for (AttentionVariant v : {AttentionVariant::affine, AttentionVariant::affine_gated}) {
    for (int64_t T : {7, 130}) {
      for (int64_t Hkv : {2, 1}) {
        Problem pb(2, T, 2, Hkv, 64, v, seed_of(T, 64, Hkv, v) + 5);
        pb.divisor = AffineBiasDivisor::visible;
        for (const cpu::FlashTileOverride tiles : {cpu::FlashTileOverride{0, 0}, cpu::FlashTileOverride{16, 8}})
          compare_to_reference<double>(pb, tiles, 1e-12, 1e-12);
        compare_to_reference<float>(pb, {0, 0}, 1e-5, 5e-5);
      }
    }
  }
}

TEST_CASE("cpu flash attention matches the reference in float", "[flash][attention]") {
  for (AttentionVariant v : kVariants) {
    for (int64_t T : {1, 7, 130, 300}) {
      for (int64_t Hkv : {2, 1}) {
        const Problem pb(2, T, 2, Hkv, 64, v, seed_of(T, 64, Hkv, v) + 17);
        compare_to_reference<float>(pb, {0, 0}, 1e-5, 5e-5);
        compare_to_reference<float>(pb, {16, 16}, 1e-5, 5e-5);
      }
    }
    const Problem pb(1, 1000, 2, 1, 64, v, seed_of(1000, 64, 1, v));
    compare_to_reference<float>(pb, {0, 0}, 1e-5, 5e-5);
  }
}

TEST_CASE("cpu flash attention is deterministic for any thread count", "[flash][attention]") {
  const int saved = omp_get_max_threads();
  for (AttentionVariant v : kVariants) {
    const Problem pb(2, 150, 4, 2, 32, v, seed_of(150, 32, 2, v));
    omp_set_num_threads(1);
    const Result<float> one = run_flash<float>(pb, {16, 16});
    omp_set_num_threads(3);
    const Result<float> three = run_flash<float>(pb, {16, 16});
    const Result<float> again = run_flash<float>(pb, {16, 16});
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    INFO(variant_name(v));
    for (const Result<float>* r : {&three, &again}) {
      CHECK(same(one.out, r->out));
      CHECK(same(one.lse, r->lse));
      CHECK(same(one.dqkv, r->dqkv));
      CHECK(same(one.dsinks, r->dsinks));
      if (features_of(v).affine) CHECK(same(one.dalpha, r->dalpha));
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("cpu flash attention rejects bad shapes", "[flash][attention]") {
  std::vector<float> buf(64, 0.f);
  AttentionShape dims{1, 2, 3, 2, 4};  // H not a multiple of Hkv
  CHECK_THROWS(cpu::flash_attention_forward<float>(buf.data(), buf.data(), buf.data(), buf.data(),
                                                   buf.data(), buf.data(), dims, 0.5f,
                                                   features_of(AttentionVariant::baseline)));
}
