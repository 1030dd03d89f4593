// The work order of the fused attention backward (kernels/attention/flash_backward_schedule.h), on the
// host: tickets <-> items, which tile pairs an item visits, the causal-mask predicate,
// the order of the dq contributions, and a model of the GPU running the items on a
// fixed number of block slots with the semaphore waits, which must never deadlock.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention/flash_backward_args.h"
#include "kernels/attention/flash_backward_schedule.h"
#include "kernels/attention/params.h"
#include "kernels/attention/flash_tiles.h"

using namespace kdtrain;
using flash::BwdItem;
using flash::BwdSchedule;

namespace {

struct Shape {
  int64_t B, T, H, Hkv;
  int Br, Bc;
  int64_t chunk;
};

BwdSchedule schedule_of(const Shape& s) {
  const flash::FlashParams p = flash::make_flash_params(s.B, s.T, s.H, s.Hkv, 64, 0.125f);
  return flash::make_bwd_schedule(p, flash::FlashTiles{s.Br, s.Bc, s.Bc / 16}, s.chunk);
}

const Shape kShapes[] = {
    {1, 1, 1, 1, 64, 128, 1},    {2, 7, 4, 2, 64, 128, 3},    {1, 130, 6, 2, 64, 128, 2},
    {3, 257, 3, 1, 64, 128, 2},  {2, 257, 8, 2, 16, 16, 4},   {1, 100, 2, 1, 7, 5, 1},
    {2, 65, 4, 4, 5, 7, 3},      {1, 2048, 32, 8, 64, 128, 8}, {2, 1000, 4, 2, 128, 64, 5},
};

// Result of running the items on `slots` block slots, each step one time unit.
struct Run {
  bool deadlock = false;
  int64_t ticks = 0;       // makespan
  int64_t busy = 0;        // slot-ticks spent on steps
  int64_t waited = 0;      // slot-ticks spent waiting on a semaphore
  bool order_ok = true;    // every dq tile saw key tiles 0, 1, ... in order
};

// Blocks take tickets in order as slots free up; an item's step on (qt, h) may run once
// the (b, h, qt) semaphore equals its key tile (the previous contributors are done).
// Steps of one tick see the semaphores as they were at the start of the tick.
Run simulate(const BwdSchedule& sc, int64_t Hkv, int64_t slots, bool reverse_tickets = false) {
  struct Slot {
    bool active = false;
    BwdItem item;
    int64_t step = 0;
  };
  const int64_t heads = sc.groups * sc.group;  // (b, h) pairs
  std::vector<int> sem(static_cast<size_t>(heads * sc.n_qt), 0);
  std::vector<Slot> slot(static_cast<size_t>(slots));
  int64_t next_ticket = 0, done = 0;
  Run run;
  auto sem_of = [&](const BwdItem& it, const flash::BwdStep& st) -> int& {
    const int64_t bh = (it.b * Hkv + it.g) * sc.group + st.head_in_group;
    return sem[static_cast<size_t>(bh * sc.n_qt + st.qt)];
  };
  while (done < sc.items) {
    for (Slot& s : slot) {
      if (s.active || next_ticket == sc.items) continue;
      const int64_t t = reverse_tickets ? sc.items - 1 - next_ticket : next_ticket;
      ++next_ticket;
      s = Slot{true, sc.item(t, Hkv), 0};
    }
    std::vector<std::pair<Slot*, int*>> ready;
    int64_t active = 0;
    for (Slot& s : slot) {
      if (!s.active) continue;
      ++active;
      const flash::BwdStep st = sc.step(static_cast<int>(s.step));
      int& v = sem_of(s.item, st);
      if (v == s.item.kt) ready.emplace_back(&s, &v);
      else if (v > s.item.kt) run.order_ok = false;
    }
    if (ready.empty()) {
      run.deadlock = true;
      return run;
    }
    ++run.ticks;
    run.busy += static_cast<int64_t>(ready.size());
    run.waited += active - static_cast<int64_t>(ready.size());
    for (auto& [s, v] : ready) {
      ++*v;
      if (++s->step == sc.steps(s->item.kt)) {
        s->active = false;
        ++done;
      }
    }
  }
  // Every dq tile received exactly its contributors.
  for (int64_t bh = 0; bh < heads; ++bh)
    for (int qt = 0; qt < sc.n_qt; ++qt)
      if (sem[static_cast<size_t>(bh * sc.n_qt + qt)] != sc.last_kt(qt) + 1) run.order_ok = false;
  return run;
}

}  // namespace

TEST_CASE("flash backward schedule: tickets are a bijection onto the items", "[flash][schedule]") {
  for (const Shape& s : kShapes) {
    const BwdSchedule sc = schedule_of(s);
    INFO("T=" << s.T << " Br=" << s.Br << " Bc=" << s.Bc << " chunk=" << s.chunk);
    REQUIRE(sc.items == s.B * s.Hkv * sc.n_kt);
    std::set<std::tuple<int64_t, int64_t, int>> seen;
    for (int64_t t = 0; t < sc.items; ++t) {
      const BwdItem it = sc.item(t, s.Hkv);
      REQUIRE(it.b >= 0);
      REQUIRE(it.b < s.B);
      REQUIRE(it.g >= 0);
      REQUIRE(it.g < s.Hkv);
      REQUIRE(it.kt >= 0);
      REQUIRE(it.kt < sc.n_kt);
      REQUIRE(sc.ticket(it, s.Hkv) == t);
      seen.emplace(it.b, it.g, it.kt);
      // What an item waits on (the previous key tile of its group) has a smaller ticket.
      if (it.kt > 0) CHECK(sc.ticket(BwdItem{it.b, it.g, it.kt - 1}, s.Hkv) < t);
    }
    CHECK(static_cast<int64_t>(seen.size()) == sc.items);
  }
}

TEST_CASE("flash backward schedule: pairs visited, mask and contributor order", "[flash][schedule]") {
  for (const Shape& s : kShapes) {
    if (s.T > 300) continue;  // brute force over elements
    const BwdSchedule sc = schedule_of(s);
    INFO("T=" << s.T << " Br=" << s.Br << " Bc=" << s.Bc);
    for (int kt = 0; kt < sc.n_kt; ++kt) {
      // The steps walk query tiles downwards from the last, every head of the group
      // once per tile, and stop at the first tile that sees the key tile.
      std::set<std::pair<int, int>> visited;
      int prev_qt = sc.n_qt;
      for (int64_t st = 0; st < sc.steps(kt); ++st) {
        const flash::BwdStep p = sc.step(static_cast<int>(st));
        CHECK(p.qt <= prev_qt);
        prev_qt = p.qt;
        visited.emplace(p.qt, p.head_in_group);
      }
      CHECK(static_cast<int64_t>(visited.size()) == sc.steps(kt));
      for (int qt = 0; qt < sc.n_qt; ++qt) {
        // Some (query i, key j) of the pair is visible (j <= i, both < T)?
        bool any_visible = false, all_plain = true;
        for (int64_t i = static_cast<int64_t>(qt) * s.Br; i < (qt + 1) * int64_t{s.Br}; ++i)
          for (int64_t j = static_cast<int64_t>(kt) * s.Bc; j < (kt + 1) * int64_t{s.Bc}; ++j) {
            if (i < s.T && j < s.T && j <= i) any_visible = true;
            // Without the mask every (real query row, key column) must be visible.
            if (i < s.T && (j > i || j >= s.T)) all_plain = false;
          }
        const bool visits = visited.count({qt, 0}) == 1;
        CHECK(visits == any_visible);
        CHECK(visits == (kt <= sc.last_kt(qt)));
        if (visits && !sc.masked(qt, kt)) CHECK(all_plain);
        if (visits && sc.masked(qt, kt)) CHECK_FALSE(all_plain);
      }
    }
  }
}

TEST_CASE("flash backward schedule: no deadlock on any number of block slots", "[flash][schedule]") {
  for (const Shape& s : kShapes) {
    if (s.T > 1000) continue;
    const BwdSchedule sc = schedule_of(s);
    for (int64_t slots : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{17}, sc.items}) {
      INFO("T=" << s.T << " Br=" << s.Br << " Bc=" << s.Bc << " chunk=" << s.chunk << " slots=" << slots);
      const Run r = simulate(sc, s.Hkv, slots);
      CHECK_FALSE(r.deadlock);
      CHECK(r.order_ok);
    }
  }
}

TEST_CASE("flash backward schedule: the model detects an order that deadlocks", "[flash][schedule]") {
  // Handing out tickets backwards puts each item before the one it waits on: with one
  // slot the first item (the last key tile) waits forever. The model must see that.
  const BwdSchedule sc = schedule_of(Shape{1, 300, 2, 1, 64, 128, 1});
  CHECK(simulate(sc, 1, 1, /*reverse_tickets=*/true).deadlock);
}

TEST_CASE("flash backward schedule: the real shapes keep the slots busy", "[flash][schedule]") {
  // B = 8, T = 2048; D = 64: H 32, Hkv 8; D = 128: H 16, Hkv 4. One 256-thread block per
  // SM, 132 SMs, every step costing the same: how much of the machine the order itself
  // leaves idle (semaphore waits and the tail of the grid). Measured with the kernel's
  // tiles and chunk: 96% / 92.5% of the slot time busy, 1.3% / 2.6% waiting.
  for (const auto& [H, Hkv] : {std::pair<int64_t, int64_t>{32, 8}, {16, 4}}) {
    const flash::FlashTiles t = flash::kBwdTiles;
    const BwdSchedule sc = schedule_of(Shape{8, 2048, H, Hkv, t.Br, t.Bc, flash::kBwdChunkGroups});
    const Run r = simulate(sc, Hkv, 132);
    const double use = static_cast<double>(r.busy) / static_cast<double>(r.ticks * 132);
    const double wait = static_cast<double>(r.waited) / static_cast<double>(r.ticks * 132);
    INFO("H=" << H << " Hkv=" << Hkv << " makespan " << r.ticks << " steps, slot use " << use
              << ", waiting " << wait);
    CHECK_FALSE(r.deadlock);
    CHECK(r.order_ok);
    CHECK(use > 0.9);
    CHECK(wait < 0.05);
  }
}
