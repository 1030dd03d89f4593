// Low-level file helpers shared by the safetensors, shard and checkpoint code:
// a read-only memory map and an atomic single-file writer. Every error names
// the file and the failing system call's reason (errno text). Files read whole
// (text, JSON) go through core/read_file.h, which this header brings along.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/noncopyable.h"
#include "core/read_file.h"

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
  // Asks the kernel to start reading [offset, offset + bytes) in now (madvise
  // WILLNEED), so a reader about to scan that range finds it in memory. A hint:
  // failures are ignored.
  void prefetch(size_t offset, size_t bytes) const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Writes `path` atomically: bytes go to a new file "<path>.tmp.<pid>"
// (io/staging.h: created, never opened through a link), which is fsynced and
// renamed over `path` on commit() (replacing a link there, not its target),
// then the parent directory is fsynced so the rename itself survives a crash.
// Destroying an uncommitted writer, or interrupting the command, deletes the
// temporary, so a failed write never leaves a half-written file under `path`.
class AtomicFileWriter : NonCopyable {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();

  void write(const void* bytes, size_t n);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// A mapped file that shrinks under its mapping (truncated or rewritten in place
// by another process) makes the next read of the lost pages raise SIGBUS, which
// would end the process without a word. This installs a SIGBUS handler that
// names the file (every live MappedFile registers its range) and exits with
// status 1. The CLI installs it once at start.
void install_mapped_file_fault_handler();

// A symbolic link kdtrain must not write through: any link but one to a
// character device (/dev/null, /dev/full), where nothing can be truncated or
// overwritten (the disk-full tests write metrics.jsonl through one).
bool is_link_to_a_file(const std::string& path);

// Before a file kdtrain keeps appending to or rewriting in place (a run's
// metrics.jsonl) is opened: refuses a link (is_link_to_a_file: its target lies
// outside the run), and gives a file that shares its inode with another name (a
// run copied with `cp -al`) an inode of its own, same content, so the other copy
// never changes. Returns true when it made that copy. A missing file is left alone.
bool own_file_before_writing(const std::string& path);

// fsync of a directory (so renames and new entries in it are durable).
void fsync_directory(const std::string& dir);
// fsync of a regular file by path.
void fsync_file(const std::string& path);
// Parent directory of a path ("." when it has none).
std::string parent_directory(const std::string& path);

}  // namespace kdtrain::io
