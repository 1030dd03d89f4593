#include "io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/staging.h"

namespace kdtrain::io {

std::string parent_directory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

namespace {

// The live mappings, for the SIGBUS handler: fixed storage it can scan without
// allocating or locking (async-signal-safe). A mapping beyond kMaxMapped is not
// listed; its fault is then reported without the file name.
struct MappedRange {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[512] = {};
};
constexpr int kMaxMapped = 256;
MappedRange g_mapped[kMaxMapped];

void register_mapping(const void* data, size_t size, const std::string& path) {
  for (MappedRange& r : g_mapped) {
    if (r.used.exchange(true)) continue;
    std::strncpy(r.path, path.c_str(), sizeof r.path - 1);
    r.path[sizeof r.path - 1] = 0;
    r.end.store(reinterpret_cast<uintptr_t>(data) + size);
    r.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return;
  }
}

void unregister_mapping(const void* data) {
  for (MappedRange& r : g_mapped)
    if (r.used.load() && r.begin.load() == reinterpret_cast<uintptr_t>(data)) {
      r.begin.store(0);
      r.end.store(0);
      r.used.store(false);
      return;
    }
}

void write_stderr(const char* text) {
  size_t n = std::strlen(text);
  while (n > 0) {
    const ssize_t w = ::write(2, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

extern "C" void on_bus_error(int, siginfo_t* info, void*) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  const char* path = nullptr;
  for (const MappedRange& r : g_mapped) {
    const uintptr_t b = r.begin.load(std::memory_order_acquire);
    if (b != 0 && b <= at && at < r.end.load()) path = r.path;
  }
  write_stderr("kdtrain: error: ");
  write_stderr(path ? path : "a memory-mapped input file");
  write_stderr(": the file shrank while kdtrain was reading it (truncated or rewritten in place by another "
               "process; bus error). Input files must not change while a command reads them: restore the "
               "file and run again (a training run resumes from its last checkpoint).\n");
  ::_exit(1);
}

}  // namespace

void install_mapped_file_fault_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_bus_error;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    fail(path, ": cannot stat: ", why);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = errno_text();
      ::close(fd);
      fail(path, ": cannot mmap ", size_, " bytes: ", why);
    }
    data_ = static_cast<const uint8_t*>(p);
    register_mapping(data_, size_, path_);
  }
  // The mapping keeps the file alive; the descriptor is no longer needed.
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::prefetch(size_t offset, size_t bytes) const {
  if (!data_ || offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, offset + bytes);
  (void)::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_WILLNEED);
}

void MappedFile::release() {
  if (data_ != nullptr) {
    unregister_mapping(data_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : path_(path), temp_path_(sibling_staging_path(path, "tmp")) {
  // A stale temporary of an earlier process with our pid goes first; O_EXCL and
  // O_NOFOLLOW then create a new file of ours, never writing through a link or
  // into a file another name shares.
  ::unlink(temp_path_.c_str());
  register_staged(temp_path_);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) unregister_staged(temp_path_);
  KD_CHECK(fd_ >= 0, temp_path_, ": cannot create (writing ", path_, "): ", errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
  unregister_staged(temp_path_);
}

void AtomicFileWriter::write(const void* bytes, size_t n) {
  KD_CHECK(!committed_ && fd_ >= 0, path_, ": write after commit");
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    KD_CHECK(w > 0, temp_path_, ": write failed (writing ", path_, "): ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  KD_CHECK(!committed_ && fd_ >= 0, path_, ": committed twice");
  KD_CHECK(::fsync(fd_) == 0, temp_path_, ": fsync failed: ", errno_text());
  int rc = ::close(fd_);
  fd_ = -1;
  KD_CHECK(rc == 0, temp_path_, ": close failed: ", errno_text());
  {
    // rename replaces a link at `path` itself, never the file it points to.
    const auto hold = lock_staged();
    KD_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "cannot rename ", temp_path_,
             " to ", path_, ": ", errno_text());
    committed_ = true;
  }
  unregister_staged(temp_path_);
  fsync_directory(parent_directory(path_));
}

bool is_link_to_a_file(const std::string& path) {
  struct stat st {}, target {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  return ::stat(path.c_str(), &target) != 0 || !S_ISCHR(target.st_mode);
}

bool own_file_before_writing(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;
  KD_CHECK(!is_link_to_a_file(path), path, ": is a symbolic link; kdtrain writes only files of its own, never "
           "through a link (its target lies outside the directory). Replace the link by a copy of the file");
  if (!S_ISREG(st.st_mode)) return false;  // a link to a device, written through
  if (st.st_nlink <= 1) return false;
  const std::string text = read_text_file(path, std::string::npos);
  AtomicFileWriter copy(path);  // a new inode under the same name; the other names keep the old one
  copy.write(text.data(), text.size());
  copy.commit();
  return true;
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  KD_CHECK(fd >= 0, dir, ": cannot open directory for fsync: ", errno_text());
  int rc = ::fsync(fd);
  int err = errno;
  std::string why = rc == 0 ? "" : errno_text();
  ::close(fd);
  // Some filesystems (e.g. certain network mounts) refuse fsync on directories;
  // EINVAL there means "not supported", not data loss.
  KD_CHECK(rc == 0 || err == EINVAL, dir, ": directory fsync failed: ", why);
}

void fsync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KD_CHECK(fd >= 0, path, ": cannot open for fsync: ", errno_text());
  int rc = ::fsync(fd);
  std::string why = rc == 0 ? "" : errno_text();
  ::close(fd);
  KD_CHECK(rc == 0, path, ": fsync failed: ", why);
}

}  // namespace kdtrain::io
