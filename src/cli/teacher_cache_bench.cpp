#include "cli/teacher_cache_bench.h"

#include <time.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "config/limits.h"
#include "core/error.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_synthetic.h"

namespace kdtrain::cli {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the calling thread: on a shared machine the wall time also
// counts the time other processes held the core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

nlohmann::json run_cache_read_bench(const CacheReadBenchOptions& o) {
  KD_CHECK(o.repeats >= 1 && o.windows >= 1, "bench --teacher-cache-read: repeats and windows must be at least 1");
  KD_CHECK(!o.cache.empty() || (o.top_k >= 1 && o.vocab_size >= o.top_k && o.vocab_size <= SizeLimits::vocab_size),
           "bench --teacher-cache-read: the synthetic cache needs 1 <= K <= --cache-vocab <= ", SizeLimits::vocab_size,
           " (K ", o.top_k, ", vocabulary ", o.vocab_size, ")");
  const std::string dir = o.cache.empty() ? data::synthetic_cache_dir("cache_bench") : o.cache;
  nlohmann::json r;
  try {
    if (o.cache.empty()) {
      data::CacheHeader shape;
      shape.K = o.top_k;
      shape.V = o.vocab_size;
      shape.seq_len = o.seq_len;
      shape.windows = o.windows;
      data::write_synthetic_cache(dir, shape, o.windows, 1);
    }
    auto t0 = std::chrono::steady_clock::now();
    const data::TeacherCache cache(dir);
    r["open_s"] = seconds_since(t0);
    const data::CacheManifest& m = cache.manifest();
    const data::CacheHeader& h = m.header;
    const double verify_cpu0 = thread_cpu_seconds();
    for (size_t s = 0; s < m.shards.size(); ++s) cache.verify_shard(static_cast<int64_t>(s), m.shards[s].first_window);
    const double verify_s = thread_cpu_seconds() - verify_cpu0;
    const double bytes = static_cast<double>(h.windows) * h.record_bytes(), tokens = double(h.windows) * h.seq_len;
    t0 = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_seconds();
    // One window's buffers, reused, as the reader thread reuses its own.
    std::vector<int32_t> ids(h.seq_len * h.K);
    std::vector<float> logp(h.seq_len * h.K), log_tail(h.seq_len);
    for (int rep = 0; rep < o.repeats; ++rep)
      for (int64_t w = 0; w < h.windows; ++w) cache.decode_window(w, ids.data(), logp.data(), log_tail.data());
    const double decode_s = seconds_since(t0) / o.repeats;
    const double decode_cpu_s = (thread_cpu_seconds() - cpu0) / o.repeats;
    r["cache"] = o.cache.empty() ? "synthetic" : dir;
    r["top_k"] = h.K;
    r["vocab_size"] = h.V;
    r["id_bits"] = h.id_bits();
    r["value_type"] = data::to_string(h.value_type);
    r["bytes_per_token"] = h.record_bytes() / static_cast<double>(h.seq_len);
    r["tokens"] = tokens;
    r["checksum_gb_per_cpu_s"] = bytes / verify_s / 1e9;  // once per shard, first read
    r["checksum_tokens_per_cpu_s"] = tokens / verify_s;
    r["decode_tokens_per_s_wall"] = tokens / decode_s;
    r["decode_tokens_per_cpu_s"] = tokens / decode_cpu_s;  // one core's rate
  } catch (...) {
    if (o.cache.empty()) fs::remove_all(dir);
    throw;
  }
  if (o.cache.empty()) fs::remove_all(dir);
  return r;
}

}  // namespace kdtrain::cli
