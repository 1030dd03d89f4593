// A forked child that does something, tells the test a number, and then holds
// on (keeping what it made: mapped memory, locks, claims) until the test ends
// it; then it exits at once, without unwinding, as a killed process would
// leave things. The tests of the node's shared memory make their other ranks
// this way (dist/node_shared_memory.h).
#pragma once
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>

namespace kdtrain::testing {

class HeldChild {
 public:
  // Runs body(hold) in the child; body calls hold(number) once, which tells the
  // parent `number` (0 means the body failed) and waits for finish().
  using Body = std::function<void(const std::function<void(uint32_t)>& hold)>;
  explicit HeldChild(const Body& body) {
    int ready[2], release[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(release) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) run_child(body, ready, release);
    close(ready[1]);
    close(release[0]);
    release_fd_ = release[1];
    pollfd told{ready[0], POLLIN, 0};
    const bool answered = poll(&told, 1, 30000) == 1 && read(ready[0], &number_, sizeof number_) == sizeof number_;
    close(ready[0]);
    if (!answered || number_ == 0) {
      kill(pid_, SIGKILL);
      finish();
      FAIL("the child process did not get as far as holding on (" << (answered ? "its body failed" : "no answer")
                                                                  << ")");
    }
  }
  ~HeldChild() {
    if (pid_ > 0) finish();
  }
  HeldChild(const HeldChild&) = delete;
  HeldChild& operator=(const HeldChild&) = delete;

  uint32_t number() const { return number_; }
  // Ends the child (it exits without unwinding) and reaps it.
  void finish() {
    if (pid_ <= 0) return;
    close(release_fd_);  // the child's read returns
    int status = 0;
    const bool reaped = waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    CHECK(reaped);
  }

 private:
  [[noreturn]] static void run_child(const Body& body, const int ready[2], const int release[2]) {
    close(ready[0]);
    close(release[1]);  // or its read of release[0] never sees the end
    const auto hold = [&](uint32_t number) {
      char unused;
      if (write(ready[1], &number, sizeof number) != sizeof number) _exit(2);
      while (read(release[0], &unused, 1) > 0) {
      }
      _exit(0);  // what the body made stays as it is, as a killed process leaves it
    };
    try {
      body(hold);
    } catch (...) {
    }
    const uint32_t failed = 0;  // the body threw or never held on
    if (write(ready[1], &failed, sizeof failed) != sizeof failed) _exit(2);
    _exit(3);
  }

  pid_t pid_ = -1;
  int release_fd_ = -1;
  uint32_t number_ = 0;
};

}  // namespace kdtrain::testing
