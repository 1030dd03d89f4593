// The process-wide kernel timer (core/kernel_timer.h).
#include "core/kernel_timer.h"

#include <set>

namespace kdtrain {

void KernelTimer::start() {
  stop();
  totals_.clear();
  on_.store(true, std::memory_order_relaxed);
}

void KernelTimer::collect() {
  for (const Pending& p : pending_) {
    KernelTime& t = totals_[p.name];
    t.total_ms += p.marks->elapsed_ms(p.start, p.stop);
    t.calls += 1;
  }
  drop_pending();
}

void KernelTimer::stop() {
  on_.store(false, std::memory_order_relaxed);
  drop_pending();
}

void KernelTimer::drop_pending() {
  std::set<KernelMarks*> sources;
  for (const Pending& p : pending_) sources.insert(p.marks);
  pending_.clear();
  for (KernelMarks* m : sources) m->release_all();
}

}  // namespace kdtrain
