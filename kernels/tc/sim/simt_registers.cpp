// SIMT emulator: setmaxnreg (PTX ISA, setmaxnreg). Model: simt.h. What the ISA asks:
// - .dec releases registers to a pool kept per block (CTA); .inc takes registers from it
//   and blocks until the pool holds enough. .dec needs a count no higher than the warp's,
//   .inc one no lower; counts are 24..256 in steps of 8.
// - .sync: the warp's threads wait for each other; .aligned: every thread of the warpgroup
//   executes the same setmaxnreg, so its 4 warps execute the same sequence of them.
// So each warp executes its own part (32 lanes' registers) when its last lane arrives: a
// lowering warp frees its part without waiting for its siblings, a raising warp takes its
// part once the pool holds it (waiting raises are served in warp order). The warpgroup
// keeps the sequence its warps executed; every warp must follow it to the end.
// Exits free nothing: the ISA does not say what becomes of an exited warp's registers, so a
// kernel whose raise needs them is reported (CUTLASS's warp-specialised kernels and
// FlashAttention-3 lower the whole producer warpgroup before its idle warps leave).
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/tc/register_budget.h"
#include "kernels/tc/sim/simt_internal.h"

namespace kdtrain::sim {
namespace detail {

namespace {
constexpr unsigned kGroupWarps = 4, kLanes = 32;
}  // namespace

// One setmaxnreg: its count and direction.
struct RegisterChange {
  int count = 0;
  bool raise = false;
  bool same(const RegisterChange& o) const { return count == o.count && raise == o.raise; }
};

struct WarpRegisters {
  int count = 0;             // registers per thread now
  RegisterChange gathering;  // the setmaxnreg its lanes are gathering at
  unsigned arrived = 0;      // lanes there
  bool waiting = false;      // all there, at a raise the pool cannot pay for yet
  size_t executed = 0;       // setmaxnreg executed: its position in its warpgroup's sequence
};

// A step of a warpgroup's setmaxnreg sequence, and the warp that executed it first.
struct SequenceStep {
  RegisterChange change;
  unsigned first_warp = 0;
};

struct RegisterState {
  int64_t pool = 0;  // released by .dec and not yet taken by .inc
  std::vector<WarpRegisters> warps;
  std::vector<std::vector<SequenceStep>> sequences;  // per warpgroup
};

namespace {

std::string name_of(const RegisterChange& c) {
  return std::string("setmaxnreg.") + (c.raise ? "inc " : "dec ") + std::to_string(c.count);
}

std::string group_of(unsigned warp) {
  const unsigned first = warp / kGroupWarps * kGroupWarps;
  return "warpgroup " + std::to_string(warp / kGroupWarps) + " (warps " + std::to_string(first) + ".." +
         std::to_string(first + kGroupWarps - 1) + ")";
}

[[noreturn]] void fail_unaligned(unsigned warp, const std::string& what) {
  fail(group_of(warp) + ": " + what +
       " (setmaxnreg is .aligned: every warp of a warpgroup executes the same ones, in the same order)");
}

// The block's register state, made on its first setmaxnreg: every warp at the entry count
// (a kernel whose highest raise is below it starts lower on hardware: there the emulator
// reports that raise as one below the warp's count, a raise that raises nothing).
RegisterState& state_of(BlockRun& r) {
  if (r.registers) return *r.registers;
  const size_t threads = r.fibers->size();
  if (threads % (kGroupWarps * kLanes) != 0)
    fail("setmaxnreg needs whole warpgroups of 128 threads; the block has " + std::to_string(threads));
  const int entry = tc::entry_registers_per_thread(static_cast<int>(threads));
  if (entry > tc::kMaxThreadRegisters)
    fail("setmaxnreg in a block of " + std::to_string(threads) +
         " threads: ptxas starts such a kernel at 255 registers or at its highest raise, which the emulator does not "
         "know (kernels/tc/register_budget.h)");
  auto s = std::make_shared<RegisterState>();
  s->warps.resize(threads / kLanes);
  for (WarpRegisters& w : s->warps) w.count = entry;
  s->sequences.resize(threads / (kGroupWarps * kLanes));
  r.registers = s;
  return *s;
}

bool warp_exited(const BlockRun& r, unsigned warp) {
  for (unsigned l = 0; l < kLanes; ++l)
    if ((*r.fibers)[warp * kLanes + l].state != FiberState::done) return false;
  return true;
}

// Warp `warp` executes its next setmaxnreg, `c`: it must be the one its siblings executed
// at that step, and no sibling may have exited before reaching it.
void follow_sequence(const BlockRun& r, RegisterState& s, unsigned warp, const RegisterChange& c) {
  WarpRegisters& w = s.warps[warp];
  std::vector<SequenceStep>& seq = s.sequences[warp / kGroupWarps];
  if (w.executed < seq.size() && !seq[w.executed].change.same(c))
    fail_unaligned(warp, "warp " + std::to_string(warp) + " executed " + name_of(c) + " where warp " +
                             std::to_string(seq[w.executed].first_warp) + " executed " +
                             name_of(seq[w.executed].change));
  if (w.executed == seq.size()) seq.push_back({c, warp});
  const unsigned first = warp / kGroupWarps * kGroupWarps;
  for (unsigned o = first; o < first + kGroupWarps; ++o)
    if (o != warp && s.warps[o].executed <= w.executed && warp_exited(r, o))
      fail_unaligned(warp, "warp " + std::to_string(o) + " exited without executing " + name_of(c) + ", which warp " +
                               std::to_string(warp) + " executed");
  ++w.executed;
}

void check_direction(unsigned warp, int current, const RegisterChange& c) {
  if (c.raise ? c.count >= current : c.count <= current) return;
  fail("warp " + std::to_string(warp) + ": " + name_of(c) + (c.raise ? " is below" : " is above") + " its current " +
       std::to_string(current) + " registers per thread (.inc may only raise the count, .dec only lower it)");
}

int64_t registers_wanted(const WarpRegisters& w) { return int64_t{w.gathering.count - w.count} * kLanes; }

// The warp's lanes waiting at its setmaxnreg run on.
void release_lanes(BlockRun& r, unsigned warp) {
  for (unsigned l = 0; l < kLanes; ++l) {
    Fiber& f = (*r.fibers)[warp * kLanes + l];
    if (f.state == FiberState::at_setmaxnreg) f.state = FiberState::ready;
  }
}

void take_from_pool(RegisterState& s, WarpRegisters& w) {
  s.pool -= registers_wanted(w);
  w.count = w.gathering.count;
  w.waiting = false;
}

// Waiting raises, in warp order, take their registers while the pool holds them. They may be
// in any warpgroup: the scheduler must look beyond the running one.
void serve_waiting_raises(BlockRun& r, RegisterState& s) {
  for (unsigned k = 0; k < s.warps.size(); ++k) {
    WarpRegisters& w = s.warps[k];
    if (!w.waiting || s.pool < registers_wanted(w)) continue;
    take_from_pool(s, w);
    release_lanes(r, k);
    r.released_elsewhere = true;
  }
}

// The warp's last lane has arrived: the warp executes its setmaxnreg. False when it is a
// raise that must wait for the pool.
bool execute(BlockRun& r, RegisterState& s, unsigned warp) {
  WarpRegisters& w = s.warps[warp];
  const RegisterChange c = w.gathering;
  follow_sequence(r, s, warp, c);
  check_direction(warp, w.count, c);
  w.arrived = 0;
  if (!c.raise) {
    s.pool += int64_t{w.count - c.count} * kLanes;
    w.count = c.count;
    release_lanes(r, warp);
    serve_waiting_raises(r, s);
    return true;
  }
  if (s.pool >= registers_wanted(w)) {
    take_from_pool(s, w);
    release_lanes(r, warp);
    return true;
  }
  w.waiting = true;
  ++r.stats->setmaxnreg_waits;
  return false;
}

}  // namespace

void reset_registers(BlockRun& r) { r.registers.reset(); }

void check_exit_registers(BlockRun& r, const Fiber& f) {
  if (!r.registers) return;
  for (unsigned l = 0; l < kLanes; ++l) {
    const Fiber& lane = (*r.fibers)[f.warp * kLanes + l];
    if (&lane != &f && lane.state != FiberState::done) return;  // not the warp's last thread
  }
  const std::vector<SequenceStep>& seq = r.registers->sequences[f.warp / kGroupWarps];
  const size_t executed = r.registers->warps[f.warp].executed;
  if (executed < seq.size())
    fail_unaligned(f.warp, "warp " + std::to_string(f.warp) + " exited without executing " +
                               name_of(seq[executed].change) + ", which warp " +
                               std::to_string(seq[executed].first_warp) + " executed");
}

std::string describe_register_waits(const BlockRun& r) {
  if (!r.registers) return "";
  const RegisterState& s = *r.registers;
  std::vector<std::string> what(s.warps.size());  // per warp: what it waits at, if anything
  bool raise_waits = false;
  for (unsigned k = 0; k < s.warps.size(); ++k) {
    const WarpRegisters& w = s.warps[k];
    if (w.waiting)
      what[k] = name_of(w.gathering) + " from " + std::to_string(w.count) + " (" +
                std::to_string(registers_wanted(w)) + " registers wanted)";
    else if (w.arrived > 0)
      what[k] = std::to_string(w.arrived) + " of " + std::to_string(kLanes) + " lanes at " + name_of(w.gathering);
    raise_waits = raise_waits || w.waiting;
  }
  std::ostringstream out;
  if (raise_waits)
    out << "setmaxnreg.inc waiting for registers no warp will free (deadlock): the pool holds " << s.pool
        << " (exited warps return none to it)";
  for (size_t k = 0, end = 0; k < what.size(); k = end) {  // runs of warps waiting alike
    for (end = k + 1; end < what.size() && what[end] == what[k];) ++end;
    if (what[k].empty()) continue;
    out << (out.tellp() == 0 ? "" : "; ") << (end - k > 1 ? "warps " : "warp ") << k;
    if (end - k > 1) out << ".." << end - 1;
    out << ": " << what[k];
  }
  return out.str();
}

}  // namespace detail

using namespace detail;

void set_max_registers(int count, bool raise) {
  BlockRun& r = current_run();
  if (count < 24 || count > 256 || count % tc::kRegisterStep != 0)
    fail("setmaxnreg count " + std::to_string(count) + ": 24..256, a multiple of 8");
  RegisterState& s = state_of(r);
  const unsigned warp = r.current->warp;
  WarpRegisters& w = s.warps[warp];
  const RegisterChange c{count, raise};
  if (w.arrived == 0) w.gathering = c;
  else if (!w.gathering.same(c))
    fail("lanes of warp " + std::to_string(warp) + " reached different setmaxnreg (" + name_of(w.gathering) + " and " +
         name_of(c) + "): divergent warp-synchronous code");
  if (++w.arrived < kLanes || !execute(r, s, warp)) wait_as(FiberState::at_setmaxnreg);
}

}  // namespace kdtrain::sim
