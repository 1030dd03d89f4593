// The sm_90a (wgmma) forward kernels' source, the warp-specialised pipelined kernel
// (kernels/attention/flash_forward_sm90a_ws_kernel.cuh) and the lockstep one
// (flash_forward_sm90a_kernel.cuh), executed by the host SIMT emulator, wgmma, named
// barriers and setmaxnreg included (kernels/tc/sim/),
// against the CPU reference in double, with the mma.sync forward's bounds
// (forward_reference_check.h: the same precision, bf16 P and output, fp32 elsewhere):
// every variant (affine under both bias divisors) at head dims 128 and 64, GQA (group 2, where h / group and h % Hkv differ), T in
// {1, 7, 1000, 2048} (64: up to 1000), outputs NaN-prefilled between guards. Up to T 1000 (64: 7) runs in the
// reverse fiber order with cp.async landing at issue, and in a seeded shuffled order, must
// give the same bits; and the lockstep kernel must give the warp-specialised one's bits
// (the same operations on O, m and l in the same order, only scheduled differently).
#include <catch2/catch.hpp>
#include <cstring>

#include "oracles/forward_reference_check.h"
#include "kernels/attention/flash_forward_sm90a_kernel.cuh"
#include "kernels/attention/flash_forward_sm90a_ws_kernel.cuh"
#include "kernels/attention/params.h"
#include "support/sim_test_util.h"

using namespace kdtrain;

namespace {

using namespace simtest;
enum class Kernel { warp_specialised, lockstep };

template <int D, bool kSink, bool kAffine>
sim::LaunchStats launch_sm90a(const flash::AttentionParams& p, const float* prefix, sim::Schedule sched, Kernel k) {
  if (k == Kernel::lockstep) {
    using L = flash::ForwardSm90a<D>;
    const sim::LaunchConfig c =
        forward_launch_config(flash::forward_blocks(p, L::kBr), L::kThreads, L::kSmemBytes, sched, 0x90a);
    return sim::launch(c, [&](unsigned char* smem) {
      flash::flash_forward_sm90a_block<D, L::Bc, L::kWarpgroups, kSink, kAffine>(p, prefix, smem);
    });
  }
  using L = flash::ForwardSm90aWs<D>;
  const sim::LaunchConfig c =
      forward_launch_config(flash::forward_blocks(p, L::kBr), L::kThreads, L::kSmemBytes, sched, 0x90a);
  return sim::launch(c, [&](unsigned char* smem) {
    flash::flash_forward_sm90a_ws_block<D, kSink, kAffine>(p, prefix, smem);
  });
}

EmulatedForward run_kernel(const AttnInputs& pb, sim::Schedule sched, Kernel k) {
  return run_forward_emulated(pb, sched, [&](const flash::AttentionParams& p, const float* prefix, auto flags) {
    using F = decltype(flags);
    return pb.D == 64 ? launch_sm90a<64, F::kSink, F::kAffine>(p, prefix, sched, k)
                      : launch_sm90a<128, F::kSink, F::kAffine>(p, prefix, sched, k);
  });
}

EmulatedForward run(const AttnInputs& pb, sim::Schedule sched) {
  return run_kernel(pb, sched, Kernel::warp_specialised);
}

void check_same_bits(const EmulatedForward& a, const EmulatedForward& b) {
  CHECK(b.guards_ok);
  CHECK(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2) == 0);
  CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
}

void check_problem(const AttnInputs& pb, bool both_schedules) {
  INFO(to_string(pb.variant) << " divisor " << pb.divisor << " B=" << pb.B << " T=" << pb.T << " H=" << pb.H
                            << " Hkv=" << pb.Hkv << " D=" << pb.D);
  const EmulatedForward fwd = run(pb, sim::Schedule::forward);
  CHECK(fwd.guards_ok);
  CHECK(fwd.stats.cp_async_dropped == 0);
  CHECK(fwd.stats.wgmma > 0);
  CHECK(fwd.stats.mma == 0);  // no mma.sync left on this path
  compare_forward_to_reference(pb, fwd.out, fwd.lse);
  check_same_bits(fwd, run_kernel(pb, sim::Schedule::forward, Kernel::lockstep));
  if (!both_schedules) return;
  for (sim::Schedule other : {sim::Schedule::reverse, sim::Schedule::shuffled}) check_same_bits(fwd, run(pb, other));
}

constexpr auto kVariants = all_attention_variants();

}  // namespace

TEST_CASE("emulated sm_90a forward kernel matches the reference at head dim 128", "[flash][sim][attention][sm90a]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 1000}) {
      const int64_t B = T <= 7 ? 2 : 1;
      check_problem(AttnInputs(B, T, 4, 2, 128, v, 3000 * T + static_cast<int>(v)), true);
    }
}

TEST_CASE("emulated sm_90a forward kernel matches the reference at head dim 64", "[flash][sim][attention][sm90a]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 1000}) {
      const int64_t B = T <= 7 ? 2 : 1;
      check_problem(AttnInputs(B, T, 4, 2, 64, v, 5000 * T + static_cast<int>(v)), T <= 7);
    }
}

TEST_CASE("emulated sm_90a forward kernel matches the reference under the visible divisor",
          "[flash][sim][attention][sm90a]") {
  for (int64_t T : {7, 130}) {
    AttnInputs pb(T <= 7 ? 2 : 1, T, 4, 2, 128, AttentionVariant::affine, 3100 * T);
    pb.divisor = AffineBiasDivisor::visible;
    check_problem(pb, true);
  }
}

TEST_CASE("emulated sm_90a forward kernel keeps its running max on scaled logits", "[flash][sim][attention][sm90a]") {
  // q x 2^5 (exact in bf16): logits up to ~30 / sqrt(D) x 48 D; a running max kept on the
  // unscaled logits overflows exp2 there (NaN), while the inputs in +-1.5 hide it.
  for (int64_t D : {128, 64})
    for (AttentionVariant v : kVariants)
      check_problem(AttnInputs(1, 130, 4, 2, D, v, 6000 + D + static_cast<int>(v)).scale_queries(5), false);
}

TEST_CASE("emulated sm_90a forward kernel rounds P to nearest: no bias where v is constant",
          "[flash][sim][attention][sm90a]") {
  check_rounds_p_to_nearest(run, 57);
}

TEST_CASE("emulated sm_90a forward kernel matches the reference at T 2048", "[flash][sim][attention][sm90a]") {
  for (AttentionVariant v : kVariants) check_problem(AttnInputs(1, 2048, 2, 1, 128, v, 4100 + static_cast<int>(v)), false);
}
