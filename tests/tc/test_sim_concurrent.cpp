// The emulator's concurrent blocks (LaunchConfig::resident_blocks, kernels/tc/sim/
// simt_blocks.cpp): ties in the scheduler go to the latest-started block, so a block
// reaches its semaphore wait before its predecessor releases, and a read that is not
// ordered after the waiting lane (no barrier between that lane's wait and the others'
// reads) sees the data as it was before the release. This is the ordered accumulation of
// the attention backward (lane 0 waits, a named barrier lets the warp's lanes read):
// without the barrier the result must come out wrong here, not only on a GPU.
#include <catch2/catch.hpp>
#include <vector>

#include "kernels/tc/named_barrier.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"

using namespace kdtrain;

namespace {

// Blocks 0..3 of one warp each add 1 to every element of `total` in block order, handing
// over through a semaphore; `barrier`: the warp meets after lane 0's wait (the correct
// form) or not.
std::vector<int> ordered_adds(bool barrier, unsigned resident) {
  std::vector<int> total(32, 0);
  int sem = 0;
  sim::LaunchConfig c;
  c.grid = {4, 1, 1};
  c.block = {32, 1, 1};
  c.resident_blocks = resident;
  sim::launch(c, [&](unsigned char*) {
    const int b = static_cast<int>(tc::block_idx().x), lane = static_cast<int>(tc::thread_idx().x);
    if (lane == 0) tc::wait_equal(&sem, b);
    if (barrier) tc::named_barrier_sync(1, 32);
    const int before = total[static_cast<size_t>(lane)];  // what the block before left
    tc::sync_warp();  // (the warp's loads complete before its stores)
    total[static_cast<size_t>(lane)] = before + 1;
    tc::sync_warp();
    if (lane == 0) tc::store_release(&sem, b + 1);
  });
  return total;
}

}  // namespace

TEST_CASE("sim concurrent blocks: a read not ordered after the waiting lane sees the data before the release",
          "[sim][concurrent]") {
  const std::vector<int> four(32, 4);
  for (unsigned resident : {2u, 3u, 4u}) {
    INFO("resident blocks " << resident);
    CHECK(ordered_adds(true, resident) == four);
    CHECK(ordered_adds(false, resident) != four);  // lanes 1..31 read before block b - 1 released
  }
}
