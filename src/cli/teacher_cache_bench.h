// `kdtrain bench --teacher-cache-read`: how fast one core reads a teacher cache
// (docs/distillation.md, "Reading"): the shard checksum pass (once per shard) and
// the decode and validation of every window (every read), in tokens per second.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace kdtrain::cli {

struct CacheReadBenchOptions {
  std::string cache;   // a cache directory; "" = a synthetic one in a temporary directory
  int64_t top_k = 64;  // synthetic cache: K, V, T and windows
  int64_t vocab_size = 128256, seq_len = 2048, windows = 8;
  int repeats = 20;    // decode passes over every window
};

nlohmann::json run_cache_read_bench(const CacheReadBenchOptions& options);

}  // namespace kdtrain::cli
