// The emulator's named barriers (kernels/tc/sim/simt_barrier.cpp, kernels/tc/named_barrier.cuh):
// two warpgroups taking turns through a pair of barriers (the sm_90a forward's schedule)
// alternate in every fiber order; an arrival that completes a barrier lets the threads it
// released run before it goes on (reverse order); a barrier that never completes is a
// stall, and different thread counts in one phase, or arrivals left at block exit, an error.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tc/named_barrier.cuh"

using namespace kdtrain;

namespace {

sim::LaunchConfig two_groups(sim::Schedule s) {
  sim::LaunchConfig c;
  c.block = {256, 1, 1};
  c.schedule = s;
  c.seed = 7;
  return c;
}

}  // namespace

TEST_CASE("sim named barriers: two warpgroups take turns in every schedule", "[sim][barrier]") {
  for (sim::Schedule s : {sim::Schedule::forward, sim::Schedule::reverse, sim::Schedule::shuffled}) {
    constexpr int kTurns = 4;
    std::vector<int> order;  // warpgroup of each turn, logged by its thread 0
    sim::launch(two_groups(s), [&](unsigned char*) {
      const int t = static_cast<int>(tc::thread_idx().x), wg = t / 128;
      if (wg == 1) tc::named_barrier_arrive(1, 256);  // warpgroup 0 goes first
      for (int k = 0; k < kTurns; ++k) {
        tc::named_barrier_sync(1 + wg, 256);  // my turn
        if (t % 128 == 0) order.push_back(wg);
        if (wg == 0 || k + 1 < kTurns) tc::named_barrier_arrive(2 - wg, 256);  // the other's turn
      }
    });
    INFO("schedule " << static_cast<int>(s));
    REQUIRE(order.size() == 2 * kTurns);
    for (size_t k = 0; k < order.size(); ++k) CHECK(order[k] == static_cast<int>(k % 2));
  }
}

TEST_CASE("sim named barriers: an arrival that completes a barrier is a switch point", "[sim][barrier]") {
  // Warpgroup 1 waits at barrier 3; warpgroup 0 arrives, then writes. In the reverse order
  // the released (higher) threads run at the arrival that completes the barrier, so they
  // read before warpgroup 0's write: a consumer releasing a buffer before it is done with
  // it shows. In the forward order the arriving (lower) threads go on first.
  for (sim::Schedule s : {sim::Schedule::forward, sim::Schedule::reverse}) {
    int value = 0, seen = -1;
    sim::launch(two_groups(s), [&](unsigned char*) {
      const int t = static_cast<int>(tc::thread_idx().x);
      if (t >= 128) {
        tc::named_barrier_sync(3, 256);
        if (t == 128) seen = value;
      } else {
        tc::named_barrier_arrive(3, 256);
        if (t == 0) value = 1;
      }
    });
    INFO("schedule " << static_cast<int>(s));
    CHECK(seen == (s == sim::Schedule::reverse ? 0 : 1));
  }
}

TEST_CASE("sim named barriers: a barrier that never completes, and mismatched counts, are reported", "[sim][barrier]") {
  auto error_of = [](auto body) {
    try {
      sim::launch(two_groups(sim::Schedule::forward), body);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Warpgroup 1 never arrives: warpgroup 0 waits forever.
  CHECK_THAT(error_of([](unsigned char*) {
               if (tc::thread_idx().x < 128) tc::named_barrier_sync(3, 256);
             }),
             Catch::Contains("stalled"));
  CHECK_THAT(error_of([](unsigned char*) {
               tc::named_barrier_sync(3, tc::thread_idx().x < 128 ? 256 : 128);
             }),
             Catch::Contains("thread counts"));
  CHECK_THAT(error_of([](unsigned char*) { tc::named_barrier_sync(0, 256); }), Catch::Contains("id 0"));
  // A turn handed over that nobody takes.
  CHECK_THAT(error_of([](unsigned char*) {
               if (tc::thread_idx().x >= 128) tc::named_barrier_arrive(4, 256);
             }),
             Catch::Contains("exited with 128 of 256 threads arrived at named barrier 4"));
}
