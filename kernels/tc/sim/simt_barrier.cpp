// SIMT emulator: named barriers (PTX ISA 9.7.13.1, bar.sync / bar.arrive with a barrier
// id and a thread count). Model: simt.h.
#include <stdexcept>
#include <string>

#include "kernels/tc/sim/simt_internal.h"

namespace kdtrain::sim {
using namespace detail;

namespace {

BlockRun::NamedBarrier& arrive_at(BlockRun& r, int id, int threads) {
  if (id < 1 || id > 15) fail("named barrier id " + std::to_string(id) + " (1..15; 0 is sync_block's)");
  if (threads <= 0 || threads % 32 != 0 || static_cast<size_t>(threads) > r.fibers->size())
    fail("named barrier " + std::to_string(id) + ": thread count " + std::to_string(threads) +
         " is not a positive multiple of 32 within the block");
  BlockRun::NamedBarrier& b = r.named[id];
  if (b.arrived == 0) b.expected = threads;
  if (b.expected != threads)
    fail("named barrier " + std::to_string(id) + ": thread counts " + std::to_string(b.expected) + " and " +
         std::to_string(threads) + " in one phase");
  ++b.arrived;
  return b;
}

// The barrier completed: its waiting threads run again and it starts over.
void complete(BlockRun& r, BlockRun::NamedBarrier& b, int id) {
  b.arrived = 0;
  for (Fiber& f : *r.fibers)
    if (f.state == FiberState::at_warp_collective && f.named_barrier == id) {
      f.state = FiberState::ready;
      f.named_barrier = 0;
    }
  r.released_elsewhere = true;
  ++r.stats->block_barriers;
}

}  // namespace

namespace detail {
void finish_named_barriers(BlockRun& r) {
  for (size_t id = 1; id < r.named.size(); ++id)
    if (r.named[id].arrived != 0)
      throw std::runtime_error("sim: block (" + std::to_string(r.block.x) + "," + std::to_string(r.block.y) + "," +
                               std::to_string(r.block.z) + ") exited with " + std::to_string(r.named[id].arrived) +
                               " of " + std::to_string(r.named[id].expected) + " threads arrived at named barrier " +
                               std::to_string(id));
}
}  // namespace detail

void named_barrier_sync(int id, int threads) {
  BlockRun& r = current_run();
  BlockRun::NamedBarrier& b = arrive_at(r, id, threads);
  if (b.arrived == b.expected) {
    complete(r, b, id);
    return;
  }
  r.current->named_barrier = id;
  wait_as(FiberState::at_warp_collective);
}

// An arrival that completes the barrier is a switch point: the scheduler may run a thread
// it released before the arriving one goes on (in the reverse order it does, when the
// released threads are higher), so what the arriving thread does after its arrive, e.g.
// an operand still in flight that a released producer overwrites, shows.
void named_barrier_arrive(int id, int threads) {
  BlockRun& r = current_run();
  BlockRun::NamedBarrier& b = arrive_at(r, id, threads);
  if (b.arrived != b.expected) return;
  complete(r, b, id);
  wait_as(FiberState::ready);
}

}  // namespace kdtrain::sim
