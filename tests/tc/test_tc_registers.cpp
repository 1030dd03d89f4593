// The setmaxnreg wrapper (kernels/tc/registers.cuh) through its probe
// (tests/tc/sm90a/registers_probe_body.cuh: what a run can show of a register count, and
// what it cannot): in the emulator against the tests' own computation of every word, and
// on an sm_90 device against the emulator, bit for bit. The device case skips, visibly,
// without a device of compute capability 9.0 or a build with KDTRAIN_CUDA_SM90A.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/tc/sim/simt.h"
#include "tc/sm90a/registers_probe_body.cuh"
#if defined(KDTRAIN_HAVE_SM90A)
#include "tc/sm90a/registers_probe.h"
#endif

using namespace kdtrain;
using namespace kdtrain::regprobe;

namespace {

constexpr uint32_t kUnwritten = 0x7fc0dead;

std::vector<uint32_t> probe_inputs() {
  std::mt19937 rng(31);
  std::vector<uint32_t> in(kWords);
  for (auto& w : in) w = rng();
  return in;
}

std::vector<uint32_t> run_emulated(const std::vector<uint32_t>& in) {
  std::vector<uint32_t> out(kWords, kUnwritten);
  sim::LaunchConfig c;
  c.block = {kThreads, 1, 1};
  sim::launch(c, [&](unsigned char*) { registers_probe_body(in.data(), out.data()); });
  return out;
}

// The words the probe claims, computed again on plain vectors: thread t's kHeld words, the
// lowered warpgroup's running sums or the raised ones' rounds.
std::vector<uint32_t> expected_words(const std::vector<uint32_t>& in) {
  std::vector<uint32_t> want(kWords);
  for (int t = 0; t < kThreads; ++t) {
    const uint32_t* x = in.data() + t * kHeld;
    uint32_t* y = want.data() + t * kHeld;
    if (t < 128) {
      uint32_t sum = 0;
      for (int i = 0; i < kHeld; ++i) {
        y[i] = x[i] + 3u * x[kHeld - 1 - i % kLowAcross] + sum;
        sum = sum * 31u + x[i];
      }
      continue;
    }
    std::vector<uint32_t> v(x, x + kHeld);
    for (uint32_t r = 0; r < kRounds; ++r)
      for (int i = 0; i < kHeld; ++i) {
        const uint32_t m = v[i] ^ v[(i + 7) % kHeld];
        v[i] = ((m << 5) | (m >> 27)) * 0x9e3779b9u + r;
      }
    std::copy(v.begin(), v.end(), y);
  }
  return want;
}

// Mismatching words, the first few named by thread and word.
int mismatches(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want) {
  int n = 0;
  for (int k = 0; k < kWords; ++k)
    if (got[k] != want[k] && ++n <= 8)
      UNSCOPED_INFO("thread " << k / kHeld << " (warpgroup " << k / kHeld / 128 << ") word " << k % kHeld << ": got 0x"
                              << std::hex << got[k] << ", want 0x" << want[k] << std::dec);
  return n;
}

}  // namespace

TEST_CASE("the setmaxnreg probe reports every word it claims, in the emulator", "[tc][sim][primitives]") {
  const std::vector<uint32_t> in = probe_inputs();
  CHECK(mismatches(run_emulated(in), expected_words(in)) == 0);
}

TEST_CASE("setmaxnreg: every warpgroup's words on the GPU equal the emulator's", "[cuda][tc][sm90a]") {
#if !defined(KDTRAIN_HAVE_SM90A)
  WARN("SKIPPED: built without the sm_90a target (CUDA, KDTRAIN_CUDA_SM90A)");
#else
  const std::vector<uint32_t> in = probe_inputs();
  std::vector<uint32_t> got(kWords, kUnwritten);
  const std::string error = run_registers_probe_on_device(in, got);
  if (error.rfind("SKIPPED", 0) == 0) {
    WARN(error);
    return;
  }
  if (!error.empty()) FAIL(error);
  CHECK(mismatches(got, run_emulated(in)) == 0);
#endif
}
