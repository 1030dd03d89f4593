#include "dist/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kdtrain::dist {

Watchdog::Watchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::arm(const char* what) {
  if (timeout_s_ <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = true;
    what_ = what;
    // Saturated: a timeout beyond what the clock's int64 ticks hold (the config
    // bounds it far below) must mean "later than any deadline", not wrap around.
    const double max_s = std::chrono::duration<double>(Clock::time_point::max() - Clock::now()).count() / 2;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::min(timeout_s_, max_s)));
  }
  wake_.notify_all();
}

void Watchdog::disarm() {
  if (timeout_s_ <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      wake_.wait(lock);
      continue;
    }
    if (Clock::now() < deadline_) {
      wake_.wait_until(lock, deadline_);
      continue;
    }
    std::fprintf(stderr,
                 "kdtrain: rank %d: error: collective '%s' did not complete within dist.timeout_s = "
                 "%g s; another rank has died or hangs. Aborting the job.\n",
                 rank_, what_, timeout_s_);
    std::fflush(stderr);
    std::_Exit(kExitCode);
  }
}

}  // namespace kdtrain::dist
