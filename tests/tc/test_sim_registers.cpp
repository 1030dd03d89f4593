// The emulator's setmaxnreg (kernels/tc/sim/simt_registers.cpp, kernels/tc/registers.cuh):
// the sm_90a backward's register split (flash_backward_dq_warp.cuh: 12 warps start at 168,
// the writer warpgroup lowers to 24, the 8 MMA warps raise to 240) runs in every schedule,
// a raise waiting until a later lowering pays for it; each misuse the PTX ISA forbids fails
// on its hazard: a warp of a warpgroup skipping the setmaxnreg its siblings execute, or
// executing another count or direction, a count moved the wrong way, and a raise no
// lowering will ever pay for (exited warps return nothing to the pool).
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tc/registers.cuh"

using namespace kdtrain;

namespace {

constexpr int kThreads = 384;              // 3 warpgroups, as the sm_90a backward
constexpr int kMma = 240, kWriter = 24;    // its counts (flash_backward_dq_warp.cuh)

sim::LaunchConfig block_of(int threads, sim::Schedule s) {
  sim::LaunchConfig c;
  c.block = {static_cast<unsigned>(threads), 1, 1};
  c.schedule = s;
  c.seed = 5;
  return c;
}

template <typename Body>
std::string error_of(Body body, sim::Schedule s = sim::Schedule::forward, int threads = kThreads) {
  try {
    sim::launch(block_of(threads, s), body);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

int warp() { return tc::warp_id(); }

// Warps 0..7 raise to 240 (then the warp's first lane records `after_raise()`), warps 8..11
// lower to 24 (each thread first counting itself in `lowering`) and warps 9..11 leave: the
// backward's split.
template <typename AfterRaise>
void backward_split(int& lowering, AfterRaise after_raise) {
  if (warp() >= 8) {
    ++lowering;
    tc::set_max_registers<kWriter, false>();
    return;
  }
  tc::set_max_registers<kMma, true>();
  if (tc::lane_id() == 0) after_raise();
}

}  // namespace

TEST_CASE("sim setmaxnreg: the entry count comes from the launch", "[tc][sim][setmaxnreg]") {
  // ptxas's counts for __launch_bounds__(threads, 1) and a raise to 240 (ptxas -v, nvcc 13.0).
  STATIC_REQUIRE(tc::entry_registers_per_thread(384) == 168);
  STATIC_REQUIRE(tc::entry_registers_per_thread(640) == 96);
  // Moving to the entry count is allowed either way; one step past it is not.
  CHECK(error_of([](unsigned char*) { tc::set_max_registers<168, true>(); }).empty());
  CHECK(error_of([](unsigned char*) { tc::set_max_registers<168, false>(); }).empty());
  CHECK(error_of([](unsigned char*) { tc::set_max_registers<96, true>(); }, sim::Schedule::forward, 640).empty());
  CHECK_THAT(error_of([](unsigned char*) { tc::set_max_registers<104, false>(); }, sim::Schedule::forward, 640),
             Catch::Contains("setmaxnreg.dec 104 is above its current 96 registers per thread"));
  // Blocks of 128 or 256 threads: ptxas's count depends on the kernel, so the emulator refuses.
  for (int threads : {128, 256})
    CHECK_THAT(error_of([](unsigned char*) { tc::set_max_registers<240, true>(); }, sim::Schedule::forward, threads),
               Catch::Contains("ptxas starts such a kernel at 255 registers or at its highest raise"));
  CHECK_THAT(error_of([](unsigned char*) { tc::set_max_registers<24, false>(); }, sim::Schedule::forward, 96),
             Catch::Contains("whole warpgroups of 128 threads"));
}

TEST_CASE("sim setmaxnreg: the backward's split runs, a raise waiting for a later lowering",
          "[tc][sim][setmaxnreg]") {
  for (sim::Schedule s : {sim::Schedule::forward, sim::Schedule::reverse, sim::Schedule::shuffled}) {
    INFO("schedule " << static_cast<int>(s));
    int lowering = 0;
    std::vector<int> seen(8, -1);  // per MMA warp: lowering threads counted when its raise returned
    const sim::LaunchStats st = sim::launch(block_of(kThreads, s), [&](unsigned char*) {
      backward_split(lowering, [&] { seen[warp()] = lowering; });
    });
    // Each lowering warp frees 32 x (168 - 24) registers, two raises' worth (32 x (240 - 168)):
    // raise k (served in warp order) returns only after lowering warp k / 2 has executed.
    for (int k = 0; k < 8; ++k) CHECK(seen[k] >= 32 * (k / 2 + 1));
    // Forward runs warps 0..7 first: every raise waits. Reverse lowers first: none does.
    if (s == sim::Schedule::forward) CHECK(st.setmaxnreg_waits == 8);
    if (s == sim::Schedule::reverse) CHECK(st.setmaxnreg_waits == 0);
  }
}

TEST_CASE("sim setmaxnreg: a warp skipping its warpgroup's setmaxnreg is reported", "[tc][sim][setmaxnreg]") {
  // The writer warpgroup lowers, but one of its warps leaves first (on hardware the others'
  // registers may never be freed, or the instruction's behaviour is undefined). Warp 8 runs
  // first in forward order, 11 in reverse: both orders of exit and execution.
  for (sim::Schedule s : {sim::Schedule::forward, sim::Schedule::reverse})
    for (int skipper : {8, 11}) {
      INFO("schedule " << static_cast<int>(s) << ", warp " << skipper << " skips");
      const std::string e = error_of(
          [&](unsigned char*) {
            if (warp() < 8 || warp() == skipper) return;
            tc::set_max_registers<kWriter, false>();
          },
          s);
      const std::string skipped = "warp " + std::to_string(skipper) + " exited without executing setmaxnreg.dec 24";
      CHECK_THAT(e, Catch::Contains("warpgroup 2 (warps 8..11)") && Catch::Contains(skipped));
    }
}

TEST_CASE("sim setmaxnreg: warps of a warpgroup at different counts or directions are reported",
          "[tc][sim][setmaxnreg]") {
  CHECK_THAT(error_of([](unsigned char*) {
               if (warp() < 8) return;
               if (warp() == 10) tc::set_max_registers<32, false>();
               else tc::set_max_registers<kWriter, false>();
             }),
             Catch::Contains("warpgroup 2 (warps 8..11): warp 10 executed setmaxnreg.dec 32 where warp 8 executed "
                             "setmaxnreg.dec 24"));
  CHECK_THAT(error_of([](unsigned char*) {
               if (warp() >= 4) return;
               if (warp() == 3) tc::set_max_registers<kMma, true>();
               else tc::set_max_registers<kWriter, false>();
             }),
             Catch::Contains("warp 3 executed setmaxnreg.inc 240 where warp 0 executed setmaxnreg.dec 24"));
  // Within one warp: lanes at different setmaxnreg.
  CHECK_THAT(error_of([](unsigned char*) {
               if (warp() >= 4) return;
               if (tc::lane_id() == 5) tc::set_max_registers<32, false>();
               else tc::set_max_registers<kWriter, false>();
             }),
             Catch::Contains("lanes of warp 0 reached different setmaxnreg"));
  // A lane that leaves while its warp gathers at a setmaxnreg: the rest wait forever.
  CHECK_THAT(error_of([](unsigned char*) {
               if (warp() >= 4 || tc::lane_id() == 0) return;
               tc::set_max_registers<kWriter, false>();
             }),
             Catch::Contains("stalled") && Catch::Contains("warps 0..3: 31 of 32 lanes at setmaxnreg.dec 24"));
}

TEST_CASE("sim setmaxnreg: .inc below or .dec above the warp's count is reported", "[tc][sim][setmaxnreg]") {
  CHECK_THAT(error_of([](unsigned char*) { tc::set_max_registers<160, true>(); }),
             Catch::Contains("setmaxnreg.inc 160 is below its current 168 registers per thread"));
  CHECK_THAT(error_of([](unsigned char*) { tc::set_max_registers<176, false>(); }),
             Catch::Contains("setmaxnreg.dec 176 is above its current 168 registers per thread"));
  // After a lowering the count is the new one.
  CHECK_THAT(error_of([](unsigned char*) {
               tc::set_max_registers<kWriter, false>();
               tc::sync_block();
               tc::set_max_registers<32, false>();
             }),
             Catch::Contains("setmaxnreg.dec 32 is above its current 24 registers per thread"));
}

TEST_CASE("sim setmaxnreg: a raise no lowering pays for is a deadlock", "[tc][sim][setmaxnreg]") {
  for (sim::Schedule s : {sim::Schedule::forward, sim::Schedule::reverse}) {
    INFO("schedule " << static_cast<int>(s));
    // The writer warpgroup leaves without lowering: its registers never reach the pool.
    CHECK_THAT(error_of(
                   [](unsigned char*) {
                     if (warp() < 8) tc::set_max_registers<kMma, true>();
                   },
                   s),
               Catch::Contains("setmaxnreg.inc waiting for registers no warp will free (deadlock): the pool holds 0") &&
                   Catch::Contains("warps 0..7: setmaxnreg.inc 240 from 168 (2304 registers wanted)"));
    // It lowers to 96 only: 4 x 32 x 72 registers, enough for half the raises (the first four
    // served: forward, warps 0..3, each as a lowering warp pays for it; reverse, the lowering
    // comes first and warps 7..4, running first, take it).
    const std::string half = error_of(
        [](unsigned char*) {
          if (warp() < 8) tc::set_max_registers<kMma, true>();
          else tc::set_max_registers<96, false>();
        },
        s);
    CHECK_THAT(half, Catch::Contains("no warp will free (deadlock)") &&
                         Catch::Contains(s == sim::Schedule::forward ? "warps 4..7: setmaxnreg.inc 240 from 168"
                                                                     : "warps 0..3: setmaxnreg.inc 240 from 168"));
  }
}
