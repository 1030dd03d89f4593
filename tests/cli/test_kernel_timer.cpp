// The kernel timer behind `kdtrain bench --attention-only --kernel-times`
// (core/kernel_timer.h): names and call counts accumulated from the right pair of marks,
// nothing recorded while off, marks released at each collect, and off again after a
// throw. Marks come from a fake clock that each fake launch advances by a known time.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

#include "core/kernel_timer.h"

using kdtrain::KernelMarks;
using kdtrain::KernelTimer;
using kdtrain::KernelTiming;
using kdtrain::kernel_timer;
using kdtrain::timed;

namespace {

struct FakeMarks final : KernelMarks {
  double now_ms = 0;
  std::vector<double> at;  // each mark's time, by id
  std::vector<void*> streams;
  int releases = 0;
  int asked = 0;  // times timed() asked for the marks
  int record(void* stream) override {
    at.push_back(now_ms);
    streams.push_back(stream);
    return static_cast<int>(at.size()) - 1;
  }
  double elapsed_ms(int from, int to) override { return at.at(to) - at.at(from); }
  void release_all() override {
    at.clear();
    ++releases;
  }
};

// A launch that the fake clock says took `ms`, with `gap` ms of idle time before the next.
void launch(FakeMarks& m, const char* name, double ms, double gap = 0.5) {
  int* stream = nullptr;
  timed(name, &stream, [&]() -> KernelMarks& { ++m.asked; return m; }, [&] { m.now_ms += ms; });
  m.now_ms += gap;  // between launches: not the kernel's time
}

}  // namespace

TEST_CASE("kernel timer: off by default, then launches run and nothing is recorded", "[bench]") {
  REQUIRE_FALSE(KernelTimer::on());
  FakeMarks m;
  int ran = 0;
  timed("bwd_main", nullptr, [&]() -> KernelMarks& { ++m.asked; return m; }, [&] { ++ran; });
  CHECK(ran == 1);
  CHECK(m.asked == 0);  // the marks are not even asked for
  CHECK(m.at.empty());
  kernel_timer().collect();
  CHECK(kernel_timer().totals().empty());
}

TEST_CASE("kernel timer: per name, the total of its own marks and the call count", "[bench]") {
  FakeMarks m;
  {
    KernelTiming timing;
    REQUIRE(KernelTimer::on());
    launch(m, "bwd_prep", 0.25);
    launch(m, "bwd_main", 2.0);
    launch(m, "bwd_prep", 0.75);
    CHECK(m.at.size() == 6);  // two marks per launch
    kernel_timer().collect();
    CHECK(m.releases == 1);  // the marks reused after each collect
    launch(m, "bwd_main", 3.0);
    CHECK(m.at.size() == 2);
    kernel_timer().collect();
    const auto& t = kernel_timer().totals();
    REQUIRE(t.size() == 2);
    CHECK(t.at("bwd_prep").calls == 2);
    CHECK(t.at("bwd_prep").total_ms == Approx(1.0));  // the gaps between launches excluded
    CHECK(t.at("bwd_prep").mean_ms() == Approx(0.5));
    CHECK(t.at("bwd_main").calls == 2);
    CHECK(t.at("bwd_main").mean_ms() == Approx(2.5));
  }
  CHECK_FALSE(KernelTimer::on());
  CHECK(kernel_timer().totals().size() == 2);  // kept for reading after the timed run
  kernel_timer().start();                      // a new run starts from nothing
  CHECK(kernel_timer().totals().empty());
  kernel_timer().stop();
}

TEST_CASE("kernel timer: stop drops what was not collected; off after a throw", "[bench]") {
  FakeMarks m;
  kernel_timer().start();
  launch(m, "fwd wgmma", 1.0);
  kernel_timer().stop();
  CHECK(m.releases == 1);
  kernel_timer().collect();
  CHECK(kernel_timer().totals().empty());
  launch(m, "fwd wgmma", 1.0);  // off: not recorded
  CHECK(m.at.empty());
  try {
    KernelTiming timing;
    timed("fwd v_scan", nullptr, [&]() -> KernelMarks& { return m; },
          [] { throw std::runtime_error("launch failed"); });
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(KernelTimer::on());
}
