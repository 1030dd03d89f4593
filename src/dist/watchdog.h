// A thread that ends the process when a guarded operation (a collective) has
// not finished within the timeout. Used so a rank that died or hangs makes
// the others exit with an error instead of waiting forever.
//
//   Watchdog dog(300.0, rank);
//   { Watchdog::Scope guard(dog, "reduce_scatter"); MPI_Alltoallv(...); }
//
// On expiry it prints "kdtrain: rank R: <what> did not complete within T s ..."
// to stderr and calls std::_Exit(kExitCode): no MPI call from this thread (the
// library is initialised for one calling thread); the launcher sees a rank
// exit without MPI_Finalize and ends the job.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kdtrain::dist {

class Watchdog {
 public:
  static constexpr int kExitCode = 124;

  Watchdog(double timeout_s, int rank);  // timeout_s <= 0: never fires, no thread
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void arm(const char* what);  // `what` must outlive the armed period (a literal)
  void disarm();

  class Scope {
   public:
    Scope(Watchdog& dog, const char* what) : dog_(dog) { dog_.arm(what); }
    ~Scope() { dog_.disarm(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& dog_;
  };

 private:
  using Clock = std::chrono::steady_clock;
  void loop();

  double timeout_s_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool armed_ = false;
  const char* what_ = "";
  Clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace kdtrain::dist
