// The real CUDA forward kernel source (kernels/attention/flash_forward_kernel.cuh, and the prefix
// scan it uses for affine, kernels/attention/prefix_scan_kernel.cuh) executed by the host SIMT
// emulator (kernels/tc/sim/) against the CPU reference (cpu_attention.cpp, double) on the
// same bf16 inputs: every variant (affine under both bias divisors), head dims 64 and 128,
// MHA and GQA, odd B and H, T in {1, 7, 33, 64, 65, 130, 257}; outputs NaN-prefilled between guard sentinels;
// two fiber schedules whose results must be bit-identical (forward order with cp.async
// landing at its wait; reverse order with cp.async landing at issue). The scan is also checked
// against the CPU mirror's (flash_mirror_prefix_scan.h) bit for bit.
//
// Tolerances: forward_reference_check.h.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "oracles/flash_mirror_prefix_scan.h"
#include "kernels/attention/flash_forward_kernel.cuh"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/prefix_scan_kernel.cuh"
#include "oracles/forward_reference_check.h"
#include "support/sim_test_util.h"

using namespace kdtrain;

namespace {

using namespace simtest;
using Problem = AttnInputs;
using Emulated = EmulatedForward;

template <int D, bool kSink, bool kAffine>
sim::LaunchStats launch_forward(const flash::AttentionParams& p, const float* prefix, sim::Schedule sched) {
  constexpr auto t = flash::flash_tiles(D, flash::FlashPass::forward);
  using L = flash::ForwardLayout<D, t.Br, t.Bc, t.warps>;
  const sim::LaunchConfig c = forward_launch_config(flash::forward_blocks(p, t.Br), L::kThreads, L::kSmemBytes, sched, 0x5eed);
  return sim::launch(c, [&](unsigned char* smem) {
    flash::flash_forward_block<D, t.Br, t.Bc, t.warps, kSink, kAffine>(p, prefix, smem);
  });
}

Emulated run_emulated(const Problem& pb, sim::Schedule sched) {
  return run_forward_emulated(pb, sched, [&](const flash::AttentionParams& p, const float* prefix, auto flags) {
    using F = decltype(flags);
    return pb.D == 64 ? launch_forward<64, F::kSink, F::kAffine>(p, prefix, sched)
                      : launch_forward<128, F::kSink, F::kAffine>(p, prefix, sched);
  });
}

constexpr auto kVariants = all_attention_variants();

void check_problem(const Problem& pb) {
  INFO(to_string(pb.variant) << " divisor " << pb.divisor << " B=" << pb.B << " T=" << pb.T << " H=" << pb.H << " Hkv=" << pb.Hkv
                                << " D=" << pb.D);
  const Emulated fwd = run_emulated(pb, sim::Schedule::forward);
  CHECK(fwd.guards_ok);
  CHECK(fwd.stats.cp_async_dropped == 0);  // every copy issued was waited for
  compare_forward_to_reference(pb, fwd.out, fwd.lse);
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

TEST_CASE("emulated forward kernel matches the reference under the visible divisor", "[flash][sim][attention]") {
  for (int64_t D : {64, 128})
    for (int64_t T : {7, 130}) {
      Problem pb(T <= 65 ? 3 : 1, T, 3, 1, D, AttentionVariant::affine, 3000 * T + D);
      pb.divisor = AffineBiasDivisor::visible;
      check_problem(pb);
    }
}

TEST_CASE("emulated forward kernel matches the reference at head dim 128", "[flash][sim][attention]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 33, 64, 65, 130, 257}) {
      const int64_t B = T <= 65 ? 3 : 1;
      check_problem(Problem(B, T, 3, 1, 128, v, 2000 * T + static_cast<int>(v)));
    }
  for (AttentionVariant v : kVariants) check_problem(Problem(1, 65, 2, 2, 128, v, 99 + static_cast<int>(v)));
}

TEST_CASE("emulated forward kernel maps query heads to kv heads as h / group", "[flash][sim][attention][gqa]") {
  // With Hkv = 1 or group = 1, h / group and h % Hkv agree; these shapes tell them apart.
  for (AttentionVariant v : kVariants) {
    check_problem(Problem(2, 130, 4, 2, 64, v, 31 + static_cast<int>(v)));
    check_problem(Problem(1, 65, 6, 2, 128, v, 37 + static_cast<int>(v)));
  }
}

TEST_CASE("emulated forward kernel keeps large logits finite", "[flash][sim][attention][large-logits]") {
  // q scaled by 2^5: logits up to ~300 (the inputs elsewhere stay within +-1.5).
  for (AttentionVariant v : kVariants)
    for (int64_t D : {64, 128}) check_problem(Problem(1, 130, 2, 1, D, v, 41 + static_cast<int>(v)).scale_queries(5));
}

TEST_CASE("emulated forward kernel rounds P to nearest: no bias where v is constant", "[flash][sim][attention]") {
  check_rounds_p_to_nearest(run_emulated, 53);
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

TEST_CASE("emulated forward kernel at T 1000, 2048 and 4096", "[.][flash][sim][long]") {
  // Hidden (minutes of CPU per T): run by hand with "[long]"; KDTRAIN_SIM_LONG_T picks one T.
  const char* only = std::getenv("KDTRAIN_SIM_LONG_T");
  for (int64_t T : {1000, 2048, 4096}) {
    if (only != nullptr && std::to_string(T) != only) continue;
    for (AttentionVariant v : kVariants)
      for (int64_t D : {64, 128}) check_problem(Problem(1, T, 2, 1, D, v, 7 * T + static_cast<int>(v)));
  }
}
