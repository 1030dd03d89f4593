#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/json_parse.h"

namespace kdtrain {

std::string errno_text() { return std::strerror(errno); }

namespace {

std::string file_type_reason(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory, not a file";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a regular file";
  if (S_ISCHR(mode)) return "is a character device, not a regular file";
  if (S_ISBLK(mode)) return "is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  if (!S_ISREG(mode)) return "is not a regular file";
  return "";
}

}  // namespace

std::string not_a_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "no such file or directory" : errno_text();
  return file_type_reason(st.st_mode);
}

int open_regular_file(const std::string& path) {
  const std::string why = not_a_regular_file(path);
  KD_CHECK(why.empty(), path, ": ", why);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  KD_CHECK(fd >= 0, path, ": cannot open: ", errno_text());
  struct stat st {};
  const std::string reason = ::fstat(fd, &st) != 0 ? "cannot stat: " + errno_text() : file_type_reason(st.st_mode);
  if (!reason.empty()) {
    ::close(fd);
    fail(path, ": ", reason);
  }
  return fd;
}

void read_chunks(const std::string& path, size_t max_bytes,
                 const std::function<void(const char* data, size_t n)>& consume) {
  const int fd = open_regular_file(path);
  std::vector<char> buf(4u << 20);
  size_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    std::string why;
    if (n < 0) why = "read failed: " + errno_text();
    else if (total + static_cast<size_t>(n) > max_bytes)
      why = "larger than " + std::to_string(max_bytes) + " bytes; not a file kdtrain reads whole";
    if (!why.empty()) {
      ::close(fd);
      fail(path, ": ", why);
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
    consume(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  std::string text;
  read_chunks(path, max_bytes, [&](const char* data, size_t n) { text.append(data, n); });
  return text;
}

nlohmann::json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

}  // namespace kdtrain
