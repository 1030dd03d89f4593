// Synthetic teacher caches for the tests of reading and verifying
// (data/teacher_cache_synthetic.h): any number of shards of any size, and a
// tampered record whose shard still opens (its trailer and the manifest keep
// the old checksum) but fails its checksum.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "data/teacher_cache.h"
#include "data/teacher_cache_synthetic.h"
#include "support/temp_dir.h"

namespace kdtrain::testing {

// `windows` windows of T `seq_len`, K 4, V 64 in shards of `shard_windows`
// windows, at dir/`name`.
inline std::string synthetic_cache(const TempDir& dir, int64_t windows, int64_t shard_windows, int64_t seq_len = 6,
                                   const std::string& name = "cache") {
  data::CacheHeader shape;
  shape.K = 4;
  shape.V = 64;
  shape.seq_len = seq_len;
  shape.windows = windows;
  const std::string path = dir.file(name);
  std::filesystem::create_directories(path);
  data::write_synthetic_cache(path, shape, shard_windows, 11);
  return path;
}

inline std::vector<int64_t> first_windows(int64_t n) {
  std::vector<int64_t> w(static_cast<size_t>(n));
  std::iota(w.begin(), w.end(), int64_t{0});
  return w;
}

// Flips one bit of a record of shard `shard`.
inline void tamper_record(const std::string& dir, int64_t shard) {
  std::fstream f(dir + "/" + data::cache_shard_file(shard), std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(256 + 40);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(256 + 40);
  f.write(&c, 1);
}

}  // namespace kdtrain::testing
