// The emulated attention forward kernels (mma.sync: test_flash_forward_sim.cpp; wgmma:
// test_flash_forward_sm90a_sim.cpp) against the CPU reference (cpu_attention.cpp, in
// double) on the same bf16 inputs, with bounds derived from the kernels' precision, and
// the emulated call both run.
//
// Tolerances, per element, derived from the kernel's precision (u = 2^-8, the unit
// roundoff of bf16 round-to-nearest: 8 significand bits; e = 2^-24, fp32's):
//  out: the kernel rounds P to bf16 before P V (|dP_ij| <= u P_ij) and rounds out to bf16,
//       everything else is fp32. So
//         |out - ref| <= u |ref| + |alpha| u A + fp32,   A = sum_j P_ij |v_jd|
//       (P normalised with the sink, i.e. P_ij = e^{x_ij - lse_i}); the fp32 part (S = q.k
//       over D terms, ex2.approx, sums over <= T keys, the prefix scan) is bounded by
//       2^-14 (|alpha| A + |beta| sum_{j<=i} |v_jd|) + 2^-20, two orders above its typical
//       size and two below the bf16 terms.
//  lse: fp32 only: |dlse| <= scale D e max_j sum_d |q_d k_jd| (the dot products) +
//       (T + 2) e (the running sum) + 2^-20 (|lse| + 1) (lg2.approx), times 2.
// A wrong mask or key tile moves lse by log(1 + P_ij) for the wrongly included or
// dropped key, far above that bound for most rows.
// The per-element bound is a worst case, which a biased rounding of P (truncation, whose
// mean error is half an ulp, a quarter of the bound's u A + u |ref| term) stays inside;
// check_p_rounding_unbiased below catches the bias on inputs where it is all that is left.
#pragma once
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "kernels/attention/flash_forward_kernel.cuh"
#include "kernels/attention/params.h"
#include "kernels/attention/prefix_scan_kernel.cuh"
#include "support/sim_test_util.h"

namespace kdtrain::simtest {

struct EmulatedForward {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  bool guards_ok = false;
  sim::LaunchStats stats;
};

// The emulator launch of one forward kernel: `blocks` blocks of `threads`, `smem` bytes of
// dynamic shared memory. The reverse schedule also lands cp.async copies at issue: a K/V
// stage refilled while another warp still reads it then changes the result.
inline sim::LaunchConfig forward_launch_config(int64_t blocks, unsigned threads, size_t smem, sim::Schedule sched,
                                               uint64_t seed) {
  sim::LaunchConfig c;
  c.grid = {static_cast<unsigned>(blocks), 1, 1};
  c.block = {threads, 1, 1};
  c.shared_bytes = smem;
  c.schedule = sched;
  c.cp_async_at_issue = sched == sim::Schedule::reverse;
  c.seed = seed;
  return c;
}

// One emulated forward call on pb's inputs: outputs NaN-prefilled between guards, the
// prefix scan for affine, then launch(params, prefix, flags) (flags: flash_dispatch's
// kSink, kAffine) runs the kernel under test and returns its LaunchStats.
template <typename Launch>
EmulatedForward run_forward_emulated(const AttnInputs& pb, sim::Schedule sched, Launch launch) {
  const size_t n_out = static_cast<size_t>(pb.B * pb.T * pb.H * pb.D), n_lse = static_cast<size_t>(pb.B * pb.H * pb.T);
  Guarded<uint16_t> out(n_out, 0x7fc0, kGuardHalf);
  Guarded<float> lse(n_lse, std::numeric_limits<float>::quiet_NaN(), guard_float());
  flash::AttentionParams p = pb.params();
  p.out = out.data();
  p.lse = lse.data();
  const size_t cols = static_cast<size_t>(pb.Hkv * pb.D);
  Guarded<float> prefix(p.affine ? static_cast<size_t>(pb.B * pb.T) * cols : 0, std::numeric_limits<float>::quiet_NaN(),
                        guard_float());
  std::vector<float> totals(static_cast<size_t>(pb.B * flash::scan_chunks(pb.T)) * cols);
  if (p.affine) run_scan(flash::v_prefix_scan(p, prefix.data(), totals.data()), sched);
  EmulatedForward r;
  flash::flash_dispatch(p.sink, p.affine,
                        [&](auto flags) { r.stats = launch(p, p.affine ? prefix.data() : nullptr, flags); });
  r.guards_ok = out.guards_intact(kGuardHalf) && lse.guards_intact(guard_float()) &&
                (!p.affine || prefix.guards_intact(guard_float()));
  r.out.assign(out.data(), out.data() + n_out);
  r.lse.assign(lse.data(), lse.data() + n_lse);
  return r;
}

inline void compare_forward_to_reference(const AttnInputs& pb, const std::vector<uint16_t>& got_out,
                                         const std::vector<float>& got_lse) {
  const int64_t B = pb.B, T = pb.T, H = pb.H, Hkv = pb.Hkv, D = pb.D, group = H / Hkv;
  const int64_t tok = (H + 2 * Hkv) * D;
  std::vector<double> qkv(pb.qkv.size()), alpha(pb.alpha.size());
  for (size_t k = 0; k < qkv.size(); ++k) qkv[k] = sim::bf16_value(pb.qkv[k]);
  for (size_t k = 0; k < alpha.size(); ++k) alpha[k] = sim::bf16_value(pb.alpha[k]);
  const std::vector<double> sinks(pb.sinks.begin(), pb.sinks.end()), ama(pb.alpha_ma.begin(), pb.alpha_ma.end());
  std::vector<double> out(static_cast<size_t>(B * T * H * D)), lse(static_cast<size_t>(B * H * T));
  const double scale = pb.scale();
  cpu::attention_forward<double>(out.data(), lse.data(), qkv.data(), sinks.data(), alpha.data(), ama.data(),
                                 AttentionShape{B, T, H, Hkv, D}, scale, pb.features());
  const bool affine = features_of(pb.variant).affine;
  const double u = std::ldexp(1.0, -8), e = std::ldexp(1.0, -24);
  double worst_out = 0, worst_lse = 0;  // error / bound
  bool finite = true;
  std::vector<double> A(static_cast<size_t>(D)), Sabs(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[(b * T + i) * tok + h * D];
        const double lse_ref = lse[(b * H + h) * T + i];
        std::fill(A.begin(), A.end(), 0.0);
        std::fill(Sabs.begin(), Sabs.end(), 0.0);
        double qk_abs = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = &qkv[(b * T + j) * tok + (H + g) * D];
          const double* v = &qkv[(b * T + j) * tok + (H + Hkv + g) * D];
          double xa = 0;
          for (int64_t d = 0; d < D; ++d) xa += std::fabs(q[d] * k[d]);
          qk_abs = std::max(qk_abs, xa);
          const double pij = std::exp(scale * dot(q, k, D) - lse_ref);
          for (int64_t d = 0; d < D; ++d) {
            A[d] += pij * std::fabs(v[d]);
            Sabs[d] += std::fabs(v[d]);
          }
        }
        const double a = affine ? alpha[(b * T + i) * H + h] : 1.0;
        const double beta = affine ? (ama[h] - a) / affine_bias_count(pb.divisor, i, T) : 0.0;
        for (int64_t d = 0; d < D; ++d) {
          const size_t k = static_cast<size_t>(((b * T + i) * H + h) * D + d);
          const double ref = out[k], kern = sim::bf16_value(got_out[k]);
          finite = finite && std::isfinite(kern);
          const double bound = 1.01 * (u * std::fabs(ref) + std::fabs(a) * u * A[d]) +
                               std::ldexp(std::fabs(a) * A[d] + std::fabs(beta) * Sabs[d], -14) + std::ldexp(1.0, -20);
          worst_out = std::max(worst_out, std::fabs(kern - ref) / bound);
        }
        const double kl = got_lse[(b * H + h) * T + i];
        finite = finite && std::isfinite(kl);
        const double lb = 2 * (scale * D * e * qk_abs + (T + 2) * e + std::ldexp(std::fabs(lse_ref) + 1, -20));
        worst_lse = std::max(worst_lse, std::fabs(kl - lse_ref) / lb);
      }
    }
  CHECK(finite);
  CHECK(worst_out <= 1.0);
  CHECK(worst_lse <= 1.0);
}

// Inputs whose every output is 0.75 in exact arithmetic: baseline attention (B 1, H 4,
// Hkv 2) with every v component 0.75, so out = sum_j P_ij 0.75 / sum_j P_ij.
inline AttnInputs constant_v_inputs(int64_t T, int64_t D, uint64_t seed) {
  AttnInputs pb(1, T, 4, 2, D, AttentionVariant::baseline, seed);
  const int64_t tok = (pb.H + 2 * pb.Hkv) * D, v0 = (pb.H + pb.Hkv) * D;
  for (int64_t t = 0; t < pb.B * T; ++t)
    for (int64_t k = 0; k < pb.Hkv * D; ++k) pb.qkv[static_cast<size_t>(t * tok + v0 + k)] = sim::bf16_round(0.75f);
  return pb;
}

// On constant_v_inputs the only errors left are P's rounding to bf16 before P V and the
// output's: row i comes out as bf16(0.75 (1 + E_i)), E_i = sum_j dP_ij / l_i, on the bf16
// grid around 0.75 (step 2^-8), so its error is 0 or +-2^-8 (|E_i| <= u = 2^-8). Rounding
// to nearest makes dP_ij zero-mean over the random logits, so the N rows' errors are
// independent, zero-mean and bounded by 2^-8: by Hoeffding their mean exceeds
// 2^-8 sqrt(2 ln(2 / delta) / N) with probability below delta = 1e-9. Truncating P (a
// bias of about -2^-8.5 of each P) moves most rows to 0.75 - 2^-8: a mean near -2^-8,
// several times the bound at N = 4000.
inline void check_p_rounding_unbiased(const AttnInputs& pb, const std::vector<uint16_t>& got_out) {
  const int64_t rows = pb.B * pb.T * pb.H;
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) sum += sim::bf16_value(got_out[static_cast<size_t>(r * pb.D)]) - 0.75;
  const double mean = sum / static_cast<double>(rows);
  const double bound = std::ldexp(1.0, -8) * std::sqrt(2 * std::log(2 / 1e-9) / static_cast<double>(rows));
  INFO("mean error of the outputs " << mean << ", bound " << bound << " (" << rows << " rows)");
  CHECK(std::fabs(mean) <= bound);
}

// Both checks on constant_v_inputs of T 1000 at head dims 64 and 128, the forward emulated
// by `run(inputs, schedule)`: a kernel truncating P passes the per-element bound but not
// check_p_rounding_unbiased.
template <typename Run>
void check_rounds_p_to_nearest(Run run, uint64_t seed) {
  for (int64_t D : {64, 128}) {
    INFO("D=" << D);
    const AttnInputs pb = constant_v_inputs(1000, D, seed + static_cast<uint64_t>(D));
    const EmulatedForward fwd = run(pb, sim::Schedule::forward);
    compare_forward_to_reference(pb, fwd.out, fwd.lse);
    check_p_rounding_unbiased(pb, fwd.out);
  }
}

}  // namespace kdtrain::simtest
