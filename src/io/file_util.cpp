#include "io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace kdtrain::io {

std::string parent_directory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
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

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : path_(path), temp_path_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KD_CHECK(fd_ >= 0, temp_path_, ": cannot create (writing ", path_, "): ", errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
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
  KD_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "cannot rename ", temp_path_,
           " to ", path_, ": ", errno_text());
  committed_ = true;
  fsync_directory(parent_directory(path_));
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
