#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "io/file_util.h"

namespace kdtrain {

namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The holder's record. It writes it right after taking the lock, so an empty
// read is retried briefly.
std::string describe_holder(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    char buf[1024];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      const nlohmann::json doc = nlohmann::json::parse(std::string(buf, static_cast<size_t>(n)), nullptr, false);
      if (doc.is_object() && doc.contains("pid") && doc.contains("host"))
        return "pid " + doc["pid"].dump() + " on host " + doc["host"].get<std::string>() +
               (doc.contains("started") ? ", running since " + doc["started"].get<std::string>() : "");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return "a process that did not record its pid";
}

}  // namespace

RunLock::RunLock(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  KD_CHECK(!ec, run_dir, ": cannot create the run directory: ", ec.message());
  const std::string path = (std::filesystem::path(run_dir) / kRunLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  KD_CHECK(fd_ >= 0, path, ": cannot open the run directory's lock file: ", errno_text());
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && st.st_nlink > 1) {
    // A run copied with hard links (cp -al) shares the original's lock file:
    // this directory gets one of its own, so the two runs never lock, or write
    // their holder's record into, each other's.
    ::close(fd_);
    ::unlink(path.c_str());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    KD_CHECK(fd_ >= 0, path, ": cannot create the run directory's own lock file: ", errno_text());
  }
  int rc;
  do {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? describe_holder(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    KD_CHECK(err != EWOULDBLOCK, "run directory ", run_dir, " is in use by another kdtrain process (",
             holder, "; lock ", path, "). Wait for it to finish, stop it, or choose another --run-dir.");
    fail(path, ": cannot lock the run directory: ", std::strerror(err));
  }
  const std::string record =
      nlohmann::json{{"pid", ::getpid()}, {"host", host_name()}, {"started", utc_now()}}.dump() + "\n";
  // Best effort: the lock is the flock; the record only improves the refusal message.
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t w = ::pwrite(fd_, record.data(), record.size(), 0);
    (void)w;
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace kdtrain
