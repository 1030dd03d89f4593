// The real CUDA forward kernel source (kernels/attention/flash_forward_kernel.cuh, and the prefix
// scan it uses for affine, kernels/attention/prefix_scan_kernel.cuh) executed by the host SIMT
// emulator (kernels/tc/sim/) against the CPU reference (cpu_attention.cpp, double) on the
// same bf16 inputs: every variant, head dims 64 and 128, MHA and GQA, odd B and H,
// T in {1, 7, 33, 64, 65, 130, 257}; outputs NaN-prefilled between guard sentinels;
// two fiber schedules whose results must be bit-identical (forward order with cp.async
// landing at its wait; reverse order with cp.async landing at issue). The scan is also checked
// against the CPU mirror's (cpu_prefix_scan.h) bit for bit.
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
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_prefix_scan.h"
#include "kernels/attention/flash_forward_kernel.cuh"
#include "kernels/attention/flash_shape.h"
#include "kernels/attention/prefix_scan_kernel.cuh"
#include "sim_test_util.h"

using namespace kdtrain;

namespace {

using namespace simtest;
using Problem = AttnInputs;

struct Emulated {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  bool guards_ok = false;
  sim::LaunchStats stats;
};

template <int D, bool kSink, bool kAffine>
sim::LaunchStats launch_forward(const flash::ForwardArgs& args, sim::Schedule sched) {
  // The reverse schedule also lands cp.async copies at issue: a K/V stage refilled
  // while another warp still reads it then changes the result.
  constexpr auto t = flash::flash_tiles(D, kSink, kAffine, flash::FlashPass::forward);
  using L = flash::ForwardLayout<D, t.Br, t.Bc, t.warps>;
  sim::LaunchConfig c;
  c.grid = {static_cast<unsigned>(flash::forward_blocks(args.p, t.Br)), 1, 1};
  c.block = {L::kThreads, 1, 1};
  c.shared_bytes = L::kSmemBytes;
  c.schedule = sched;
  c.cp_async_at_issue = sched == sim::Schedule::reverse;
  c.seed = 0x5eed;
  return sim::launch(c, [&](unsigned char* smem) {
    flash::flash_forward_block<D, t.Br, t.Bc, t.warps, kSink, kAffine>(args, smem);
  });
}

Emulated run_emulated(const Problem& pb, sim::Schedule sched) {
  const size_t n_out = static_cast<size_t>(pb.B * pb.T * pb.H * pb.D), n_lse = static_cast<size_t>(pb.B * pb.H * pb.T);
  Guarded<uint16_t> out(n_out, 0x7fc0, kGuardHalf);
  Guarded<float> lse(n_lse, std::numeric_limits<float>::quiet_NaN(), guard_float());
  flash::ForwardArgs a;
  a.p = flash::make_flash_params(pb.B, pb.T, pb.H, pb.Hkv, pb.D, pb.scale());
  pb.point_inputs(a);
  a.out = out.data();
  a.lse = lse.data();
  const bool sink = has_sink(pb.variant), affine = has_affine(pb.variant);
  const size_t cols = static_cast<size_t>(pb.Hkv * pb.D);
  Guarded<float> prefix(affine ? static_cast<size_t>(pb.B * pb.T) * cols : 0, std::numeric_limits<float>::quiet_NaN(),
                        guard_float());
  std::vector<float> totals(static_cast<size_t>(pb.B * flash::scan_chunks(pb.T)) * cols);
  if (affine) {
    flash::ScanArgs<uint16_t> s;
    s.in = pb.qkv.data() + a.p.v_offset;
    s.batches = pb.B;
    s.rows = pb.T;
    s.cols = static_cast<int64_t>(cols);
    s.in_row_stride = a.p.qkv_token;
    s.in_batch_stride = a.p.qkv_batch;
    s.out = prefix.data();
    s.chunk_sums = totals.data();
    run_scan(s, sched);
    a.prefix = prefix.data();
  }
  Emulated r;
  flash::flash_dispatch(sink, affine, [&](auto flags) {
    using F = decltype(flags);
    r.stats = pb.D == 64 ? launch_forward<64, F::kSink, F::kAffine>(a, sched)
                         : launch_forward<128, F::kSink, F::kAffine>(a, sched);
  });
  r.guards_ok = out.guards_intact(kGuardHalf) && lse.guards_intact(guard_float()) &&
                (!affine || prefix.guards_intact(guard_float()));
  r.out.assign(out.data(), out.data() + n_out);
  r.lse.assign(lse.data(), lse.data() + n_lse);
  return r;
}

void compare_to_reference(const Problem& pb, const Emulated& got) {
  const int64_t B = pb.B, T = pb.T, H = pb.H, Hkv = pb.Hkv, D = pb.D, group = H / Hkv;
  const int64_t tok = (H + 2 * Hkv) * D;
  std::vector<double> qkv(pb.qkv.size()), alpha(pb.alpha.size());
  for (size_t k = 0; k < qkv.size(); ++k) qkv[k] = sim::bf16_value(pb.qkv[k]);
  for (size_t k = 0; k < alpha.size(); ++k) alpha[k] = sim::bf16_value(pb.alpha[k]);
  const std::vector<double> sinks(pb.sinks.begin(), pb.sinks.end()), ama(pb.alpha_ma.begin(), pb.alpha_ma.end());
  std::vector<double> out(static_cast<size_t>(B * T * H * D)), lse(static_cast<size_t>(B * H * T));
  const double scale = pb.scale();
  cpu::attention_forward<double>(out.data(), lse.data(), qkv.data(), sinks.data(), alpha.data(), ama.data(),
                                 cpu::AttnDims{B, T, H, Hkv, D}, scale, pb.variant);
  const bool affine = has_affine(pb.variant);
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
          double x = 0, xa = 0;
          for (int64_t d = 0; d < D; ++d) {
            x += q[d] * k[d];
            xa += std::fabs(q[d] * k[d]);
          }
          qk_abs = std::max(qk_abs, xa);
          const double pij = std::exp(scale * x - lse_ref);
          for (int64_t d = 0; d < D; ++d) {
            A[d] += pij * std::fabs(v[d]);
            Sabs[d] += std::fabs(v[d]);
          }
        }
        const double a = affine ? alpha[(b * T + i) * H + h] : 1.0;
        const double beta = affine ? (ama[h] - a) / static_cast<double>(i + 1) : 0.0;
        for (int64_t d = 0; d < D; ++d) {
          const size_t k = static_cast<size_t>(((b * T + i) * H + h) * D + d);
          const double ref = out[k], kern = sim::bf16_value(got.out[k]);
          finite = finite && std::isfinite(kern);
          const double bound = 1.01 * (u * std::fabs(ref) + std::fabs(a) * u * A[d]) +
                               std::ldexp(std::fabs(a) * A[d] + std::fabs(beta) * Sabs[d], -14) + std::ldexp(1.0, -20);
          worst_out = std::max(worst_out, std::fabs(kern - ref) / bound);
        }
        const double kl = got.lse[(b * H + h) * T + i];
        finite = finite && std::isfinite(kl);
        const double lb = 2 * (scale * D * e * qk_abs + (T + 2) * e + std::ldexp(std::fabs(lse_ref) + 1, -20));
        worst_lse = std::max(worst_lse, std::fabs(kl - lse_ref) / lb);
      }
    }
  CHECK(finite);
  CHECK(worst_out <= 1.0);
  CHECK(worst_lse <= 1.0);
}

constexpr AttentionVariant kVariants[] = {AttentionVariant::baseline, AttentionVariant::sink, AttentionVariant::affine,
                                          AttentionVariant::gated, AttentionVariant::affine_gated};

void check_problem(const Problem& pb) {
  INFO(to_string(pb.variant) << " B=" << pb.B << " T=" << pb.T << " H=" << pb.H << " Hkv=" << pb.Hkv
                                << " D=" << pb.D);
  const Emulated fwd = run_emulated(pb, sim::Schedule::forward);
  CHECK(fwd.guards_ok);
  CHECK(fwd.stats.cp_async_dropped == 0);  // every copy issued was waited for
  compare_to_reference(pb, fwd);
  const Emulated rev = run_emulated(pb, sim::Schedule::reverse);
  CHECK(rev.guards_ok);
  CHECK(std::memcmp(fwd.out.data(), rev.out.data(), fwd.out.size() * 2) == 0);
  CHECK(std::memcmp(fwd.lse.data(), rev.lse.data(), fwd.lse.size() * 4) == 0);
}

}  // namespace

TEST_CASE("emulated forward kernel matches the reference at head dim 64", "[flash][sim][attention]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 33, 64, 65, 130, 257}) {
      const int64_t B = T <= 65 ? 3 : 1;
      check_problem(Problem(B, T, 3, 1, 64, v, 1000 * T + static_cast<int>(v)));  // GQA, group 3
    }
  for (AttentionVariant v : kVariants) check_problem(Problem(1, 130, 2, 2, 64, v, 77 + static_cast<int>(v)));  // MHA
}

TEST_CASE("emulated forward kernel matches the reference at head dim 128", "[flash][sim][attention]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 33, 64, 65, 130, 257}) {
      const int64_t B = T <= 65 ? 3 : 1;
      check_problem(Problem(B, T, 3, 1, 128, v, 2000 * T + static_cast<int>(v)));
    }
  for (AttentionVariant v : kVariants) check_problem(Problem(1, 65, 2, 2, 128, v, 99 + static_cast<int>(v)));
}

TEST_CASE("emulated prefix scan matches a double sum and the CPU mirror bit for bit", "[flash][sim]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> x(-2.f, 2.f);
  for (int64_t rows : {1, 63, 64, 65, 200}) {
    for (int64_t cols : {1, 130}) {
      for (bool reverse : {false, true}) {
        const int64_t batches = 2, stride = cols + 3;  // strided rows
        std::vector<uint16_t> in(static_cast<size_t>(batches * rows * stride));
        for (auto& e : in) e = sim::bf16_round(x(rng));
        Guarded<float> out(static_cast<size_t>(batches * rows * cols), NAN, guard_float());
        std::vector<float> totals(static_cast<size_t>(batches * flash::scan_chunks(rows) * cols));
        flash::ScanArgs<uint16_t> s;
        s.in = in.data();
        s.batches = batches;
        s.rows = rows;
        s.cols = cols;
        s.in_row_stride = stride;
        s.in_batch_stride = rows * stride;
        s.out = out.data();
        s.chunk_sums = totals.data();
        s.reverse = reverse;
        run_scan(s, sim::Schedule::shuffled);
        INFO("rows " << rows << " cols " << cols << (reverse ? " reverse" : " forward"));
        CHECK(out.guards_intact(guard_float()));
        double worst = 0;
        for (int64_t b = 0; b < batches; ++b)
          for (int64_t c = 0; c < cols; ++c) {
            double run = 0, mag = 0;
            for (int64_t k = 0; k < rows; ++k) {
              const int64_t r = reverse ? rows - 1 - k : k;
              const double v = sim::bf16_value(in[static_cast<size_t>((b * rows + r) * stride + c)]);
              run += v;
              mag += std::fabs(v);
              const double got = out.data()[(b * rows + r) * cols + c];
              // fp32 sums of at most rows + chunks terms: |err| <= (rows + chunks) 2^-24 sum |v|
              worst = std::max(worst, std::fabs(got - run) / ((rows + 4) * std::ldexp(mag, -24) + 1e-30));
            }
          }
        CHECK(worst <= 1.0);
        // The CPU mirror's scan adds in the same order: the same bits in float.
        std::vector<float> wide(in.size()), mirror(static_cast<size_t>(batches * rows * cols));
        for (size_t k = 0; k < in.size(); ++k) wide[k] = sim::bf16_value(in[k]);
        cpu::chunked_prefix_scan<float>(mirror.data(), wide.data(), batches, rows, cols, stride, rows * stride, reverse);
        CHECK(std::memcmp(mirror.data(), out.data(), mirror.size() * sizeof(float)) == 0);
      }
    }
  }
}
