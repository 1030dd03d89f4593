// Low-level file helpers shared by the safetensors, shard and checkpoint code:
// a read-only memory map and an atomic single-file writer. Every error names
// the file and the failing system call's reason (errno text).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kdtrain::io {

// Read-only mmap of a whole file. Moving is allowed so readers can live in vectors.
// An empty file maps to (nullptr, 0) since mmap rejects zero-length mappings.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws naming the path
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Writes `path` atomically: bytes go to "<path>.tmp.<pid>", which is fsynced and
// renamed over `path` on commit(), then the parent directory is fsynced so the
// rename itself survives a crash. Destroying an uncommitted writer deletes the
// temporary, so a failed write never leaves a half-written file under `path`.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* bytes, size_t n);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Why `path` cannot be read as a file, as a message fragment: "no such file or
// directory", "is a directory, not a file", "is a FIFO (named pipe), not a regular
// file", ...; "" when it is a regular file.
std::string not_a_regular_file(const std::string& path);
// Opens a regular file read-only. What is not a regular file is refused before
// open() (a FIFO would block there forever), and the open is non-blocking with
// the type re-checked on the descriptor, so a FIFO swapped in meanwhile cannot
// hang it either. Returns the descriptor; throws "<path>: <why>".
int open_regular_file(const std::string& path);
// Reads a regular file front to back, passing each chunk to `consume`; throws
// naming the file on a read error or when it holds more than max_bytes.
void read_chunks(const std::string& path, size_t max_bytes,
                 const std::function<void(const char* data, size_t n)>& consume);
// The whole file as text; refuses files above max_bytes (a sane bound for the
// small JSON / text files read this way).
constexpr size_t kMaxTextFileBytes = 256u << 20;
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

// A whole JSON file, parsed strictly (io/json_parse.h: duplicate keys refused);
// errors name the file.
nlohmann::json read_json_file(const std::string& path);

// fsync of a directory (so renames and new entries in it are durable).
void fsync_directory(const std::string& dir);
// fsync of a regular file by path.
void fsync_file(const std::string& path);
// Parent directory of a path ("." when it has none).
std::string parent_directory(const std::string& path);
// strerror(errno) as a std::string, for messages.
std::string errno_text();

}  // namespace kdtrain::io
