// A unique temporary directory per test, removed with everything in it.
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace kdtrain::testing {

// /dev/shm where there is one, as the ranks' shared memory uses in a run
// (dist/node_shared_memory.h): the temporary directory's file system may lack
// what that memory needs (fallocate, open-file-description locks).
inline std::filesystem::path shared_memory_base() {
  std::error_code ec;
  return std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm")
                                                       : std::filesystem::temp_directory_path();
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "test",
                   const std::filesystem::path& base = std::filesystem::temp_directory_path()) {
    static std::atomic<int> counter{0};
    path = base / ("kdtrain_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace kdtrain::testing
