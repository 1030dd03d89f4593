// Every wrapper of kernels/tc/primitives.cuh, sync.cuh and named_barrier.cuh, run on the GPU by
// the probes of tc_probes.h (nvcc-built, tests/tc/cuda/tc_probes.cu) and in the SIMT
// emulator on the same inputs: the outputs must agree bit for bit. The emulator encodes
// the PTX ISA's semantics (tests/tc/test_sim_simt.cpp checks it against hand-computed
// fragments), so a device-only asm wrapper with swapped operands or a wrong modifier
// differs from it here, in seconds, before any kernel result is looked at.
// Exceptions, stated per probe: ex2/lg2.approx are not bit-exactly specified, so their
// words (GPU and emulator alike) are checked against a float64 reference within the PTX
// ISA's documented error (tc/approx_bounds.h: 2 ulp for ex2; 2^-22 absolute in (0.5, 2),
// else relative, for lg2); atomic_add hands out its values in a hardware order (the set
// is compared).
// Without a device (or a CUDA build) the test case says SKIPPED.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/tc/sim/simt.h"
#include "tc/approx_bounds.h"
#include "tc/tc_probes.h"
#include "tc/tc_probes_gpu.h"

using namespace kdtrain;
using tcprobe::Probe;

namespace {

constexpr uint32_t kUnwritten = 0x7fc0dead;  // every probe overwrites what it reports

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float value(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t bf16_of_int(int k) { return sim::bf16_round(static_cast<float>(k)); }

// Inputs per probe: random words where any value goes, small-integer bf16 for mma (exact
// sums in any order), and floats that exercise round-to-nearest-even and its ties.
std::vector<uint32_t> probe_inputs(Probe p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> in(tcprobe::kProbeWords);
  std::uniform_real_distribution<float> f(-8.f, 8.f);
  for (auto& w : in) w = bits(f(rng));
  if (p == Probe::scalars)
    for (int k = 0; k < 32; ++k) {
      in[64 + k] = static_cast<uint32_t>(rng());                      // raw bf16x2 words
      if (k % 4 == 0) in[k] = bits(1.f + std::ldexp(1.f, -8)) + k;  // near a bf16 tie
      if (k % 4 == 1) in[k] = bits(-3.f) | 0x8000u;                   // exactly a tie
    }
  if (p == Probe::atomic_f32) {  // integers: every sum exact, whatever order the atomics take
    std::uniform_int_distribution<int> small(-64, 64);
    for (int k = 0; k < 64; ++k) in[k] = bits(static_cast<float>(small(rng)));
  }
  if (p == Probe::mma) {
    std::uniform_int_distribution<int> small(-8, 8);
    for (int k = 0; k < 192; ++k) in[k] = bf16_of_int(small(rng)) | (uint32_t{bf16_of_int(small(rng))} << 16);
    for (int k = 192; k < 320; ++k) in[k] = bits(static_cast<float>(small(rng)));
  }
  if (p == Probe::ldmatrix)
    for (int k = 0; k < tcprobe::kProbeWords; ++k) in[k] = (2u * k) | ((2u * k + 1) << 16);  // element index
  return in;
}

// Word k of the approx probe: ex2 of in[k] (k < 32) or lg2 of |in[k - 32]|, within the ISA's
// bound of the float64 value (the words' layout: probe_approx in tc_probes.h).
bool approx_word_within_isa(const std::vector<uint32_t>& in, int k, uint32_t word) {
  const float x = value(in[k % 32]);
  return k < 32 ? tcprobe::ex2_within_isa(x, value(word)) : tcprobe::lg2_within_isa(std::fabs(x), value(word));
}

uint64_t gpu_test_seed(Probe p) { return 1234 + static_cast<uint64_t>(p); }

std::vector<uint32_t> run_emulated(Probe p, const std::vector<uint32_t>& in) {
  std::vector<uint32_t> out(tcprobe::kProbeWords, kUnwritten);
  int counter[2] = {0, 0};
  sim::LaunchConfig c;
  c.block = {tcprobe::kProbeThreads, 1, 1};
  c.shared_bytes = tcprobe::kProbeSmemBytes;
  sim::launch(c, [&](unsigned char* smem) { tcprobe::run_probe(p, in.data(), out.data(), counter, smem); });
  return out;
}

}  // namespace

TEST_CASE("every tensor-core primitive wrapper agrees with the emulator on the GPU", "[cuda][tc][primitives]") {
  for (Probe p : tcprobe::kProbes) {
    INFO("probe: " << tcprobe::probe_name(p));
    const std::vector<uint32_t> in = probe_inputs(p, gpu_test_seed(p));
    std::vector<uint32_t> want = run_emulated(p, in);
    std::vector<uint32_t> got(tcprobe::kProbeWords, kUnwritten);
#if defined(KDTRAIN_HAVE_CUDA)
    std::string error;
    if (!tcprobe::run_probe_on_gpu(p, in, got, error)) {
      if (error == "no CUDA device") {
        WARN("SKIPPED: no CUDA device");
        return;
      }
      FAIL(error);
    }
#else
    WARN("SKIPPED: no CUDA device (built without CUDA)");
    return;
#endif
    if (p == Probe::sync) {  // the order atomic_add hands values out in is the hardware's
      std::sort(want.begin(), want.begin() + 32);
      std::sort(got.begin(), got.begin() + 32);
    }
    int mismatches = 0;
    for (int k = 0; k < tcprobe::kProbeWords; ++k) {
      const bool same = p == Probe::approx && k < 64 ? approx_word_within_isa(in, k, got[k]) : got[k] == want[k];
      if (!same && ++mismatches <= 8)
        UNSCOPED_INFO("word " << k << ": gpu 0x" << std::hex << got[k] << ", emulator 0x" << want[k] << std::dec);
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("the primitive probes report every word they claim, in the emulator", "[tc][sim][primitives]") {
  // The emulated side of the GPU test above, alone: each probe writes its words, and the
  // wrappers give the values the ISA defines on a few hand-checked words.
  const auto scal = run_emulated(Probe::scalars, probe_inputs(Probe::scalars, 1));
  for (int k = 0; k < 192; ++k) CHECK(scal[k] != kUnwritten);
  const std::vector<uint32_t> in = probe_inputs(Probe::scalars, 1);
  for (int lane = 0; lane < 32; ++lane) {  // pack_bf16x2(x, y): x in the low half
    CHECK((scal[64 + lane] & 0xffffu) == sim::bf16_round(value(in[lane])));
    CHECK((scal[64 + lane] >> 16) == sim::bf16_round(value(in[32 + lane])));
  }
  const auto idx = run_emulated(Probe::indices, in);
  for (int t = 0; t < tcprobe::kProbeThreads; ++t)
    CHECK(idx[t] == static_cast<uint32_t>((t % 32) | ((t / 32) << 8) | (tcprobe::kProbeThreads << 16)));
  const std::vector<uint32_t> nb_in = probe_inputs(Probe::named_barrier, 4);
  const auto nb = run_emulated(Probe::named_barrier, nb_in);
  for (int lane = 0; lane < 32; ++lane) {
    CHECK(nb[lane] == (nb_in[(lane * 7) % 32] ^ 0x5a5a5a5au));
    CHECK(nb[32 + lane] == nb_in[32 + (lane * 5) % 32] + 1u);
  }
  const std::vector<uint32_t> af_in = probe_inputs(Probe::atomic_f32, 5);
  const auto af = run_emulated(Probe::atomic_f32, af_in);
  for (int k = 0; k < 12; ++k) {
    double want = 0;
    for (int lane = 0; lane < 32; ++lane) {
      if (k < 4 && lane % 4 == k) want += value(af_in[lane]);
      if (k >= 4 && lane % 8 == k - 4) want += value(af_in[32 + lane]);
    }
    CHECK(value(af[k]) == want);
  }
  // The emulator's ex2/lg2 words on the GPU test's inputs, within the ISA's bounds too.
  const std::vector<uint32_t> ap_in = probe_inputs(Probe::approx, gpu_test_seed(Probe::approx));
  const auto ap = run_emulated(Probe::approx, ap_in);
  for (int k = 0; k < 64; ++k) CHECK(approx_word_within_isa(ap_in, k, ap[k]));
  const auto syn = run_emulated(Probe::sync, probe_inputs(Probe::sync, 2));
  for (int lane = 0; lane < 32; ++lane) {
    CHECK(syn[lane] == static_cast<uint32_t>(lane));
    CHECK(syn[192 + lane] == 7u);
  }
  for (Probe p : tcprobe::kProbes) {
    const auto out = run_emulated(p, probe_inputs(p, 3));
    CHECK(std::count(out.begin(), out.end(), kUnwritten) < tcprobe::kProbeWords);
  }
}
