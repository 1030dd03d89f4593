// The real CUDA backward kernel source (kernels/flash_backward_{prep,kernel}.cuh,
// the prefix scan it uses for affine, and the launch sequence
// kernels/attention/flash_backward_sequence.h) executed by the host SIMT emulator
// (kernels/tc/sim/) against the CPU reference (cpu_attention.cpp, double) on the same bf16
// inputs: every variant (affine under both bias divisors), head dims 64 and 128, MHA and GQA, odd B and H,
// T in {1, 7, 33, 64, 65, 130, 257}: dq, dk, dv, dsinks, dalpha. Outputs are NaN-prefilled
// (dsinks starts at 0.25: it is accumulated) between guard sentinels, the workspace too
// is framed by guards and starts as garbage; results must be bit-identical across fiber
// schedules (forward and reverse: each warp runs as far ahead of the others as its
// barriers allow, in opposite orders, the reverse one landing cp.async copies at issue;
// shuffled for some shapes).
//
// Inputs: qkv, dO, alpha bf16; out = the double reference forward rounded to bf16 and
// lse rounded to fp32, as a GPU forward would hand them over.
//
// Tolerances, per element, from where the kernel rounds (u = 2^-8, the unit roundoff of
// bf16 round-to-nearest: 8 significand bits). With P_ij = e^{x_ij - lse_i},
// dPraw_ij = dO_i . v_j, dS_ij = P_ij (alpha_i dPraw_ij - D_i), E_i = sum_d |dO_id out_id|:
//  - D_i is computed from the bf16 out: |dD_i| <= u E_i;
//  - dS is rounded to bf16 before dS K and dS^T Q: |d dS_ij| <= u (|dS_ij| + P_ij E_i);
//  - alpha P is rounded to bf16 before (alpha P)^T dO: |d| <= u |alpha_i| P_ij;
//  - every output is rounded to bf16 (u |ref|), except dsinks (fp32);
//  - everything else is fp32 (the products S = q.k and dP over D terms, ex2.approx,
//    lse in fp32, sums over <= T keys or rows, the scans): below 2^-14 of the magnitude
//    sums M below, two orders above its typical size and two below the bf16 terms.
// So |kernel - ref| <= 1.01 (u |ref| + u M) + 2^-14 M + 2^-20 with
//   dq_id: M = scale sum_j (|dS_ij| + P_ij E_i) |k_jd|
//   dk_jd: M = scale sum_{h, i} (|dS_ij| + P_ij E_i) |q_id|
//   dv_jd: M = sum_{h, i} |alpha_i| P_ij |dO_id|      (+ 2^-14 sum_{h, i>=j} |beta_i dO_id|)
//   dalpha_i: M = 0 for the bf16 part; fp32 part 2^-14 (sum_j P_ij |dPraw_ij| + |sigma_i| / N_i)
//   dsinks_h: M = sum_{b, i} e^{s_h - lse_i} E_i (no output rounding)
// A dropped or doubled tile pair, a wrong mask or a wrong dq order moves an element by a
// whole term P_ij (...), far above u M for most elements.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "kernels/attention/flash_backward_kernel.cuh"
#include "kernels/attention/flash_backward_prep.cuh"
#include "kernels/attention/flash_backward_sequence.h"
#include "kernels/attention/params.h"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/prefix_scan_kernel.cuh"
#include "support/sim_test_util.h"

using namespace kdtrain;

namespace {

using namespace simtest;

constexpr uint8_t kGuardByte = 0xa5;  // around the workspace

// Inputs of the backward: the forward's inputs, dO, and what a GPU forward hands over
// (out = the double reference forward rounded to bf16, lse rounded to fp32).
struct Problem : AttnInputs {
  std::vector<uint16_t> dout, out;  // bf16 bits
  std::vector<float> lse;
  std::vector<double> lse_ref;      // the double forward's

  // q_exp: queries scaled by 2^q_exp (AttnInputs::scale_queries) before the forward.
  Problem(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t d, AttentionVariant v, uint64_t seed,
          AffineBiasDivisor bias_divisor = AffineBiasDivisor::sequence, int q_exp = 0)
      : AttnInputs(b, t, h, hkv, d, v, seed) {
    divisor = bias_divisor;
    if (q_exp != 0) scale_queries(q_exp);
    std::uniform_real_distribution<float> go(-1.f, 1.f);
    dout.resize(static_cast<size_t>(B * T * H * D));
    for (auto& e : dout) e = sim::bf16_round(go(rng));
    std::vector<double> out_ref(dout.size());
    lse_ref.resize(static_cast<size_t>(B * H * T));
    const std::vector<double> q = widen(qkv), al = widen(alpha);
    const std::vector<double> sk(sinks.begin(), sinks.end()), am(alpha_ma.begin(), alpha_ma.end());
    cpu::attention_forward<double>(out_ref.data(), lse_ref.data(), q.data(), sk.data(), al.data(), am.data(),
                                   dims(), scale(), features());
    for (double o : out_ref) out.push_back(sim::bf16_round(static_cast<float>(o)));
    for (double l : lse_ref) lse.push_back(static_cast<float>(l));
  }
  AttentionShape dims() const { return AttentionShape{B, T, H, Hkv, D}; }
};

struct Emulated {
  std::vector<uint16_t> dqkv, dalpha;
  std::vector<float> dsinks;
  bool guards_ok = false;
  uint64_t cp_async_dropped = 0;
  uint64_t main_wgmma = 0;
};

// The launch sequence's Launcher, on the emulator.
struct SimLauncher {
  sim::Schedule schedule;
  int first_ticket = 0;  // > 0: the main kernel's first block skips the items before it
  unsigned resident = 1;  // > 1: the main kernel's blocks run together (sim::LaunchConfig)
  bool wgmma = false;     // the main kernel's sm_90a build (kWgmma)
  uint64_t dropped = 0;
  uint64_t main_wgmma = 0;  // the main kernel's wgmma instructions
  sim::LaunchConfig config(const flash::BwdGrid& g, unsigned threads, size_t smem) const {
    sim::LaunchConfig c;
    c.grid = {static_cast<unsigned>(g.x), static_cast<unsigned>(g.y), static_cast<unsigned>(g.z)};
    c.block = {threads, 1, 1};
    c.shared_bytes = smem;
    c.schedule = schedule;
    // The reverse schedule also lands cp.async copies at issue: a Q/dO stage refilled
    // while another warp still reads it then changes the result.
    c.cp_async_at_issue = schedule == sim::Schedule::reverse;
    c.seed = 0x5eed;
    return c;
  }
  void zero(void* p, size_t bytes, const char* /*timer name*/) {
    std::memset(p, 0, bytes);
    static_cast<int*>(p)[flash::BwdWorkspace::kTicket] = first_ticket;
  }
  template <typename In>
  void scan(const flash::ScanArgs<In>& a) {
    dropped += run_scan(a, schedule).cp_async_dropped;
  }
  template <int D, bool kSink, bool kAffine>
  void prep(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    const sim::LaunchConfig c = config(g, flash_bwd::kPrepThreads, flash_bwd::PrepLayout::kBytes);
    dropped += sim::launch(c, [&](unsigned char* smem) { flash_bwd::bwd_prep<D, kSink, kAffine>(a, smem); })
                   .cp_async_dropped;
  }
  template <int D, bool kAffine, bool kAtomic>
  void main(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    using L = flash_bwd::MainLayout<D, kAffine>;
    const bool writer = wgmma && !kAtomic;  // the sm_90a writer warp's second dQ buffer
    sim::LaunchConfig c = config(g, flash::bwd_main_threads(wgmma, kAtomic), writer ? L::kBytesTwoDq : L::kBytes);
    c.resident_blocks = resident;
    const sim::LaunchStats st = sim::launch(c, [&](unsigned char* smem) {
      if (wgmma) flash_bwd::bwd_main<D, kAffine, kAtomic, true>(a, smem);
      else flash_bwd::bwd_main<D, kAffine, kAtomic, false>(a, smem);
    });
    dropped += st.cp_async_dropped;
    main_wgmma += st.wgmma;
  }
  template <int D, bool kAffine>
  void finalize(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    sim::launch(config(g, flash::kBwdThreads, 0), [&](unsigned char*) { flash_bwd::bwd_finalize<D, kAffine>(a); });
  }
};

// atomic: the timing build's float-atomic dq accumulation (flash::kBwdAtomicDq);
// wgmma: the main kernel's sm_90a build.
Emulated run_emulated(const Problem& pb, sim::Schedule schedule, int first_ticket = 0, unsigned resident = 1,
                      bool atomic = false, bool wgmma = false) {
  const bool sink = features_of(pb.variant).sink, affine = features_of(pb.variant).affine;
  Guarded<uint16_t> dqkv(pb.qkv.size(), 0x7fc0, kGuardHalf);
  Guarded<uint16_t> dalpha(pb.alpha.size(), affine ? 0x7fc0 : 0, kGuardHalf);
  Guarded<float> dsinks(static_cast<size_t>(pb.H), 0.25f, guard_float());
  flash::AttentionParams p = pb.params();
  p.out = const_cast<uint16_t*>(pb.out.data());  // the backward only reads out and lse (params.h)
  p.lse = const_cast<float*>(pb.lse.data());
  p.dout = pb.dout.data();
  p.dqkv = dqkv.data();
  p.dalpha = dalpha.data();
  p.dsinks = dsinks.data();
  const flash::BwdWorkspace layout = flash::bwd_workspace(pb.B, pb.T, pb.H, pb.Hkv, pb.D, sink, affine);
  // Garbage (NaN bytes) in the workspace: the kernels must not read what they did not write.
  Guarded<uint8_t> ws(layout.bytes + 256, 0xff, kGuardByte);
  auto* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(ws.data()) + 255) & ~uintptr_t{255});
  const flash::BwdArgs a = flash::make_bwd_args(p, base);
  SimLauncher launch{schedule, first_ticket, resident, wgmma};
  flash::flash_dispatch(sink, affine, [&](auto flags) {
    using F = decltype(flags);
    if (pb.D == 64 && atomic)
      flash::run_bwd_sequence<64, F::kSink, F::kAffine, true>(launch, a, base);
    else if (pb.D == 64)
      flash::run_bwd_sequence<64, F::kSink, F::kAffine, false>(launch, a, base);
    else if (atomic)
      flash::run_bwd_sequence<128, F::kSink, F::kAffine, true>(launch, a, base);
    else
      flash::run_bwd_sequence<128, F::kSink, F::kAffine, false>(launch, a, base);
  });
  Emulated r;
  r.guards_ok = dqkv.guards_intact(kGuardHalf) && dalpha.guards_intact(kGuardHalf) &&
                dsinks.guards_intact(guard_float()) && ws.guards_intact(kGuardByte);
  r.dqkv.assign(dqkv.data(), dqkv.data() + dqkv.n);
  r.dalpha.assign(dalpha.data(), dalpha.data() + dalpha.n);
  r.dsinks.assign(dsinks.data(), dsinks.data() + dsinks.n);
  r.cp_async_dropped = launch.dropped;
  r.main_wgmma = launch.main_wgmma;
  return r;
}

// Worst |kernel - ref| / bound of one output, and whether every kernel value is finite.
struct Worst {
  double ratio = 0;
  bool finite = true;
  void add(double kern, double ref, double bound) {
    finite = finite && std::isfinite(kern);
    ratio = std::max(ratio, std::fabs(kern - ref) / bound);
  }
};

void compare_to_reference(const Problem& pb, const Emulated& got) {
  const int64_t B = pb.B, T = pb.T, H = pb.H, Hkv = pb.Hkv, D = pb.D, group = H / Hkv;
  const int64_t tok = (H + 2 * Hkv) * D;
  const bool sink = features_of(pb.variant).sink, affine = features_of(pb.variant).affine;
  const double scale = pb.scale(), u = std::ldexp(1.0, -8), f32 = std::ldexp(1.0, -14), floor = std::ldexp(1.0, -20);
  const std::vector<double> qkv = widen(pb.qkv), alpha = widen(pb.alpha);
  const std::vector<double> dout = widen(pb.dout), out = widen(pb.out);
  const std::vector<double> sinks(pb.sinks.begin(), pb.sinks.end()), ama(pb.alpha_ma.begin(), pb.alpha_ma.end());
  std::vector<double> dqkv(qkv.size()), dalpha(alpha.size()), dsinks(static_cast<size_t>(H), 0.25);
  cpu::attention_backward<double>(dqkv.data(), dsinks.data(), dalpha.data(), dout.data(), qkv.data(),
                                  pb.lse_ref.data(), sinks.data(), alpha.data(), ama.data(), pb.dims(), scale,
                                  pb.features());
  // Magnitude sums M of the bound, per element of dqkv, dalpha (fp32 part) and dsinks.
  std::vector<double> M(qkv.size(), 0.0), Ma(alpha.size(), 0.0), Ms(static_cast<size_t>(H), 0.0);
  std::vector<double> Mr(qkv.size(), 0.0);  // sum |beta dO| into dv (the reverse scan, fp32)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[(b * T + i) * tok + h * D];
        const double* dO = &dout[((b * T + i) * H + h) * D];
        const double* o = &out[((b * T + i) * H + h) * D];
        const double lse = pb.lse_ref[(b * H + h) * T + i];
        const double a = affine ? alpha[(b * T + i) * H + h] : 1.0;
        const double n_keys = affine_bias_count(pb.divisor, i, T);
        const double beta = affine ? (ama[h] - a) / n_keys : 0.0;
        double E = 0, Dfull = 0;
        for (int64_t d = 0; d < D; ++d) E += std::fabs(dO[d] * o[d]);
        // D_i = sum_j P_ij alpha dPraw_ij (exact, from the keys).
        std::vector<double> P(static_cast<size_t>(i + 1)), dP(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = &qkv[(b * T + j) * tok + (H + g) * D];
          const double* v = &qkv[(b * T + j) * tok + (H + Hkv + g) * D];
          P[j] = std::exp(scale * dot(q, k, D) - lse);
          dP[j] = dot(dO, v, D);
          Dfull += P[j] * a * dP[j];
        }
        double ma = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double w = std::fabs(P[j] * (a * dP[j] - Dfull)) + P[j] * E;  // |dS| + P E
          const int64_t kq = (b * T + i) * tok + h * D, kk = (b * T + j) * tok + (H + g) * D;
          const int64_t kv = (b * T + j) * tok + (H + Hkv + g) * D;
          for (int64_t d = 0; d < D; ++d) {
            M[kq + d] += scale * w * std::fabs(qkv[kk + d]);
            M[kk + d] += scale * w * std::fabs(q[d]);
            M[kv + d] += std::fabs(a) * P[j] * std::fabs(dO[d]);
            Mr[kv + d] += std::fabs(beta * dO[d]);
          }
          ma += P[j] * std::fabs(dP[j]);
        }
        if (affine) {
          double sig = 0;
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t d = 0; d < D; ++d) sig += std::fabs(dO[d] * qkv[(b * T + j) * tok + (H + Hkv + g) * D + d]);
          Ma[(b * T + i) * H + h] = ma + sig / n_keys;
        }
        if (sink) Ms[static_cast<size_t>(h)] += std::exp(sinks[h] - lse) * E;
      }
    }
  Worst wq, wa, ws;
  for (size_t k = 0; k < dqkv.size(); ++k)
    wq.add(sim::bf16_value(got.dqkv[k]), dqkv[k], 1.01 * (u * std::fabs(dqkv[k]) + u * M[k]) + f32 * (M[k] + Mr[k]) + floor);
  if (affine)
    for (size_t k = 0; k < dalpha.size(); ++k)
      wa.add(sim::bf16_value(got.dalpha[k]), dalpha[k], 1.01 * u * std::fabs(dalpha[k]) + f32 * Ma[k] + floor);
  bool untouched = true;
  for (int64_t h = 0; h < H; ++h) {
    if (sink) ws.add(got.dsinks[h], dsinks[h], 1.01 * u * Ms[h] + f32 * Ms[h] + floor);
    else untouched = untouched && got.dsinks[h] == 0.25f;
  }
  INFO("worst error / bound: dqkv " << wq.ratio << ", dalpha " << wa.ratio << ", dsinks " << ws.ratio);
  CHECK(wq.finite);
  CHECK(wa.finite);
  CHECK(ws.finite);
  CHECK(wq.ratio <= 1.0);
  CHECK(wa.ratio <= 1.0);
  CHECK(ws.ratio <= 1.0);
  CHECK(untouched);
}

bool same_bits(const Emulated& x, const Emulated& y) {
  return x.dqkv == y.dqkv && x.dalpha == y.dalpha &&
         std::memcmp(x.dsinks.data(), y.dsinks.data(), x.dsinks.size() * sizeof(float)) == 0;
}

constexpr auto kVariants = all_attention_variants();

void check_problem(const Problem& pb, bool all_schedules, bool wgmma = false) {
  INFO(to_string(pb.variant) << " divisor " << pb.divisor << " B=" << pb.B << " T=" << pb.T << " H=" << pb.H
                             << " Hkv=" << pb.Hkv << " D=" << pb.D << (wgmma ? " wgmma" : " mma.sync"));
  const Emulated fwd = run_emulated(pb, sim::Schedule::forward, 0, 1, false, wgmma);
  CHECK(fwd.guards_ok);
  CHECK(fwd.cp_async_dropped == 0);  // every copy issued was waited for
  CHECK((fwd.main_wgmma > 0) == wgmma);  // the build asked for ran
  compare_to_reference(pb, fwd);
  const Emulated rev = run_emulated(pb, sim::Schedule::reverse, 0, 1, false, wgmma);
  CHECK(rev.guards_ok);
  CHECK(same_bits(fwd, rev));
  if (all_schedules) {
    const Emulated shuf = run_emulated(pb, sim::Schedule::shuffled, 0, 1, false, wgmma);
    CHECK(shuf.guards_ok);
    CHECK(same_bits(fwd, shuf));
  }
}

}  // namespace

TEST_CASE("emulated backward kernel matches the reference at head dim 64", "[flash][sim][attention]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 33, 64, 65, 130, 257}) {
      const int64_t B = T <= 65 ? 3 : 1;
      check_problem(Problem(B, T, 3, 1, 64, v, 3000 * T + static_cast<int>(v)), T == 65);  // GQA, group 3
    }
  for (AttentionVariant v : kVariants) check_problem(Problem(1, 130, 2, 2, 64, v, 177 + static_cast<int>(v)), false);
}

TEST_CASE("emulated backward kernel matches the reference under the visible divisor", "[flash][sim][attention]") {
  for (int64_t D : {64, 128})
    for (int64_t T : {7, 130})
      check_problem(Problem(T <= 65 ? 3 : 1, T, 3, 1, D, AttentionVariant::affine, 5000 * T + D,
                            AffineBiasDivisor::visible),
                    false);
}

TEST_CASE("emulated backward kernel matches the reference at head dim 128", "[flash][sim][attention]") {
  for (AttentionVariant v : kVariants)
    for (int64_t T : {1, 7, 33, 64, 65, 130, 257}) {
      const int64_t B = T <= 65 ? 3 : 1;
      check_problem(Problem(B, T, 3, 1, 128, v, 4000 * T + static_cast<int>(v)), T == 130);
    }
  for (AttentionVariant v : kVariants) check_problem(Problem(1, 65, 2, 2, 128, v, 199 + static_cast<int>(v)), false);
}

TEST_CASE("emulated backward kernel maps query heads to kv heads as h / group", "[flash][sim][attention][gqa]") {
  // With Hkv = 1 or group = 1, h / group and h % Hkv agree; these shapes tell them apart.
  for (AttentionVariant v : kVariants) {
    check_problem(Problem(2, 130, 4, 2, 64, v, 51 + static_cast<int>(v)), false);
    check_problem(Problem(1, 65, 6, 2, 128, v, 57 + static_cast<int>(v)), false);
  }
}

TEST_CASE("emulated backward kernel keeps large logits finite", "[flash][sim][attention][large-logits]") {
  // q scaled by 2^5: logits up to ~300 (the inputs elsewhere stay within +-1.5).
  for (AttentionVariant v : kVariants)
    for (int64_t D : {64, 128}) check_problem(Problem(1, 130, 2, 1, D, v, 61 + static_cast<int>(v), AffineBiasDivisor::sequence, 5), false);
}

TEST_CASE("emulated backward kernel orders dq between blocks running together", "[flash][sim][attention][concurrent]") {
  // Blocks resident together, each semaphore release handing control to the next
  // contributor of that dq tile: a partial dq stored after the release (or not at all
  // before it) is read stale there. Bits must equal the one-block-at-a-time run's.
  for (AttentionVariant v : kVariants)
    for (const auto& [T, Hkv, D] : {std::tuple<int64_t, int64_t, int64_t>{130, 1, 64}, {257, 2, 64}, {300, 2, 128}}) {
      const Problem pb(1, T, 2 * Hkv, Hkv, D, v, 71 * T + static_cast<int>(v));
      INFO(to_string(v) << " T=" << T << " Hkv=" << Hkv << " D=" << D);
      const Emulated one = run_emulated(pb, sim::Schedule::forward);
      compare_to_reference(pb, one);
      for (unsigned resident : {2u, 3u}) {
        INFO("resident blocks " << resident);
        const Emulated together = run_emulated(pb, sim::Schedule::forward, 0, resident);
        CHECK(together.guards_ok);
        CHECK(same_bits(one, together));
      }
      CHECK(same_bits(one, run_emulated(pb, sim::Schedule::reverse, 0, 2)));
    }
}

TEST_CASE("emulated backward kernel of the atomics timing build matches the reference", "[flash][sim][attention][atomic]") {
  // kBwdAtomicDq (CMake KDTRAIN_ATTN_ATOMIC_DQ, timing only): float atomics into a zeroed
  // accumulator, then bwd_finalize. Same bounds; blocks resident together (any order).
  // Both main kernels: the sm_90a one (kWgmma, no writer warp) is what the wgmma
  // backward's attn_determinism_cost is timed against.
  for (bool wgmma : {false, true})
    for (AttentionVariant v : kVariants)
      for (const auto& [T, D] : {std::pair<int64_t, int64_t>{130, 64}, {65, 128}}) {
        const Problem pb(2, T, 4, 2, D, v, 91 * T + static_cast<int>(v));
        INFO(to_string(v) << " T=" << T << " D=" << D << (wgmma ? " wgmma" : " mma.sync"));
        const Emulated got = run_emulated(pb, sim::Schedule::forward, 0, 3, true, wgmma);
        CHECK(got.guards_ok);
        CHECK((got.main_wgmma > 0) == wgmma);
        compare_to_reference(pb, got);
      }
}

TEST_CASE("emulated backward kernel reports a dq tile whose earlier key tile never came", "[flash][sim][attention]") {
  // T = 130, one (b, kv head): key tiles 0 and 1. Starting the tickets at 1 runs key tile 1
  // first; its first dq contribution must wait for key tile 0's release, which in the
  // emulator (blocks one at a time) can never come: the kernel must be caught waiting.
  const Problem pb(1, 130, 2, 1, 64, AttentionVariant::baseline, 5);
  CHECK_THROWS_WITH(run_emulated(pb, sim::Schedule::forward, 1), Catch::Contains("deadlock"));
  CHECK_THROWS_WITH(run_emulated(pb, sim::Schedule::forward, 1, 2), Catch::Contains("deadlock"));
}

// The hidden [long] cases (minutes of CPU per T): run by hand with "[long]";
// KDTRAIN_SIM_LONG_T picks one T, KDTRAIN_SIM_LONG_BUILD=mma_sync or wgmma one build of the
// main kernel (default: both). check(T, wgmma) for each chosen pair.
template <typename F>
void for_long_cases(F&& check) {
  const char* only = std::getenv("KDTRAIN_SIM_LONG_T");
  const char* build = std::getenv("KDTRAIN_SIM_LONG_BUILD");
  for (int64_t T : {1000, 2048, 4096}) {
    if (only != nullptr && std::to_string(T) != only) continue;
    for (bool wgmma : {false, true})
      if (build == nullptr || std::string(build) == (wgmma ? "wgmma" : "mma_sync")) check(T, wgmma);
  }
}

TEST_CASE("emulated backward kernel at T 1000, 2048 and 4096", "[.][flash][sim][long]") {
  for_long_cases([](int64_t T, bool wgmma) {  // affine under the sequence divisor
    for (AttentionVariant v : kVariants)
      for (int64_t D : {64, 128}) check_problem(Problem(1, T, 2, 1, D, v, 7 * T + static_cast<int>(v)), false, wgmma);
  });
}

TEST_CASE("emulated backward kernel under the visible divisor at T 1000, 2048 and 4096", "[.][flash][sim][long]") {
  for_long_cases([](int64_t T, bool wgmma) {
    for (int64_t D : {64, 128})
      check_problem(Problem(1, T, 2, 1, D, AttentionVariant::affine, 11 * T + D, AffineBiasDivisor::visible), false,
                    wgmma);
  });
}

TEST_CASE("emulated sm_90a backward kernel matches the reference", "[flash][sim][attention][sm90a]") {
  // bwd_main with kWgmma (S^T, dP^T, dV, dK on wgmma; flash_backward_wgmma.cuh): the same
  // bounds as the mma.sync build (the products are exact bf16 products summed in fp32, as
  // mma.sync's; only the operands' path differs). Every variant, both head dims, GQA
  // (group 2, h / group differs from h % Hkv), T 1, 7 and 130 (three key tiles of 64
  // queries, a partial last tile, masked and unmasked pairs).
  for (int64_t D : {64, 128})
    for (AttentionVariant v : kVariants)
      for (int64_t T : {1, 7, 130})
        check_problem(Problem(T <= 7 ? 2 : 1, T, 4, 2, D, v, 8000 * T + 10 * D + static_cast<int>(v)), T == 7, true);
}

TEST_CASE("emulated sm_90a backward kernel under the visible divisor and with blocks together",
          "[flash][sim][attention][sm90a]") {
  for (int64_t D : {64, 128}) {
    check_problem(Problem(2, 7, 4, 2, D, AttentionVariant::affine, 8100 + D, AffineBiasDivisor::visible), false, true);
    check_problem(Problem(1, 130, 4, 2, D, AttentionVariant::affine, 8200 + D, AffineBiasDivisor::visible), false,
                  true);
  }
  // Blocks resident together must give the bits of blocks one at a time, in either
  // schedule: the writer warps of different key tiles then race for each dq tile, and only
  // the semaphore orders them (the reverse schedule runs a later key tile's writer first).
  // Both head dims: the staged tile, its bulk reduction and the MMA warps' slices differ.
  for (int64_t D : {64, 128}) {
    const Problem pb(1, 257, 4, 2, D, AttentionVariant::baseline, D == 64 ? 8300 : 8301);
    const Emulated one = run_emulated(pb, sim::Schedule::forward, 0, 1, false, true);
    compare_to_reference(pb, one);
    for (unsigned resident : {2u, 3u}) {
      INFO("D " << D << ", resident blocks " << resident);
      CHECK(same_bits(one, run_emulated(pb, sim::Schedule::forward, 0, resident, false, true)));
      CHECK(same_bits(one, run_emulated(pb, sim::Schedule::reverse, 0, resident, false, true)));
    }
  }
}

TEST_CASE("emulated sm_90a backward kernel's dq writer warp waits for the earlier key tile",
          "[flash][sim][attention][sm90a]") {
  // As "reports a dq tile whose earlier key tile never came", for the sm_90a build, whose
  // semaphore wait is the writer warp's (flash_backward_dq_warp.cuh): key tile 1 runs
  // without key tile 0, so its writer must be caught waiting, never add on its own.
  const Problem pb(1, 130, 2, 1, 64, AttentionVariant::baseline, 5);
  CHECK_THROWS_WITH(run_emulated(pb, sim::Schedule::forward, 1, 1, false, true), Catch::Contains("deadlock"));
  CHECK_THROWS_WITH(run_emulated(pb, sim::Schedule::forward, 1, 2, false, true), Catch::Contains("deadlock"));
}
