// One writer per run directory. Two `kdtrain train` processes on one run
// directory (or a `train` and a `train --resume`) would interleave their
// checkpoints, config and metrics; the second is refused instead.
//
// The lock is flock(2) on <run_dir>/kdtrain.lock, held for the life of the
// process: the kernel drops it when the descriptor closes, so it is released on
// any exit — return, exception, SIGKILL, a crash — and never goes stale. The
// file holds the holder's pid, host and start time, for the refusal message
// (the file itself stays; only the flock on it means "in use"). Under MPI rank 0
// holds it for the job. flock works across NFS clients on Linux >= 2.6.12
// (emulated with POSIX byte-range locks).
#pragma once
#include <string>

#include "core/noncopyable.h"
#include "io/run_layout.h"

namespace kdtrain {

class RunLock : NonCopyable {
 public:
  // Creates run_dir if needed and takes the lock; throws naming the run
  // directory and the holder's pid and host when another process has it.
  explicit RunLock(const std::string& run_dir);
  ~RunLock();

 private:
  int fd_ = -1;
};

}  // namespace kdtrain
