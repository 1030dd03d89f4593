// Per-kernel GPU times for `kdtrain bench --attention-only --kernel-times`
// (docs/performance.md): a process-wide timer that a launch site asks, with one branch
// on a flag, whether to bracket its launch with two marks on the stream. Off (the
// default, and always in training) a timed launch site costs that branch: no marks, no
// allocation. The bookkeeping here is plain C++; the marks come from a KernelMarks
// (CUDA events in CUDA builds: kernels/kernel_timer.cuh; a fake clock in the tests).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kdtrain {

// Timestamps in the order of a stream's work.
class KernelMarks {
 public:
  virtual ~KernelMarks() = default;
  // A mark after the work queued so far on `stream`; its id is valid until release_all().
  virtual int record(void* stream) = 0;
  // Milliseconds from mark `from` to mark `to`, waiting until `to` is reached.
  virtual double elapsed_ms(int from, int to) = 0;
  // Every mark may be reused.
  virtual void release_all() = 0;
};

struct KernelTime {
  double total_ms = 0;
  int64_t calls = 0;
  double mean_ms() const { return calls > 0 ? total_ms / double(calls) : 0.0; }
};

class KernelTimer {
 public:
  static bool on() { return on_.load(std::memory_order_relaxed); }
  // Clears the totals and turns timing on.
  void start();
  // Adds the launches bracketed since the last collect() to the totals, waiting for
  // their marks: call after the timed work is queued.
  void collect();
  // Turns timing off; launches not collected are dropped.
  void stop();
  const std::map<std::string, KernelTime>& totals() const { return totals_; }
  // One launch between two marks of `marks`, filed under `name` (timed() calls it).
  void bracketed(KernelMarks& marks, const char* name, int start_mark, int stop_mark) {
    pending_.push_back({&marks, name, start_mark, stop_mark});
  }

 private:
  struct Pending {
    KernelMarks* marks;
    std::string name;
    int start, stop;
  };
  void drop_pending();  // the marks of the pending launches released
  static inline std::atomic<bool> on_{false};
  std::vector<Pending> pending_;
  std::map<std::string, KernelTime> totals_;
};

// The process-wide timer. Inline, as is all that timed() reaches, so the CUDA library's
// launch sites need no symbol of the C++ library (static libraries link in one order).
inline KernelTimer& kernel_timer() {
  static KernelTimer timer;
  return timer;
}

// Runs `launch` (which queues work on `stream`). While timing is on, brackets it with two
// marks of `marks()` and files it under `name`; `marks` is not called when timing is off.
template <typename MarksFn, typename Launch>
void timed(const char* name, void* stream, MarksFn&& marks, Launch&& launch) {
  if (!KernelTimer::on()) {
    std::forward<Launch>(launch)();
    return;
  }
  KernelMarks& m = marks();
  const int start = m.record(stream);
  std::forward<Launch>(launch)();
  kernel_timer().bracketed(m, name, start, m.record(stream));
}

// Turns timing on for its lifetime (the totals cleared) and off after, also when a timed
// run throws.
class KernelTiming {
 public:
  KernelTiming() { kernel_timer().start(); }
  ~KernelTiming() { kernel_timer().stop(); }
  KernelTiming(const KernelTiming&) = delete;
  KernelTiming& operator=(const KernelTiming&) = delete;
};

}  // namespace kdtrain
