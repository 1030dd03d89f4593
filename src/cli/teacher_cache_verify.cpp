#include "cli/teacher_cache_verify.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/read_file.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_v1.h"

namespace kdtrain::cli {

bool is_teacher_cache_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / data::kCacheV1FileName)) return true;
  // Token shards have a manifest.json too (data/shard_manifest.h): a cache's names its format.
  const fs::path manifest = fs::path(dir) / data::kCacheManifestName;
  return fs::is_regular_file(manifest) && read_text_file(manifest.string()).find(data::kCacheFormat) != std::string::npos;
}

void verify_teacher_cache(const std::string& dir) {
  const auto started = std::chrono::steady_clock::now();
  const data::TeacherCache cache(dir);  // refuses a version-1 cache, naming --convert
  const data::CacheManifest& m = cache.manifest();
  const data::CacheHeader& h = m.header;
  for (size_t s = 0; s < m.shards.size(); ++s) {
    const data::CacheShardInfo& info = m.shards[s];
    cache.verify_shard(static_cast<int64_t>(s), info.first_window);
    for (int64_t w = info.first_window; w < info.first_window + info.windows; ++w) {
      CachedRows rows;
      cache.append_window(w, rows);
    }
    std::printf("ok    %s: checksum matches, %lld windows valid\n", cache.describe(static_cast<int64_t>(s)).c_str(),
                static_cast<long long>(info.windows));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("ok    %s: %zu shards, %lld windows x %lld tokens, top-%lld of %lld, %s (%.1fs)\n", dir.c_str(),
              m.shards.size(), static_cast<long long>(h.windows), static_cast<long long>(h.seq_len),
              static_cast<long long>(h.K), static_cast<long long>(h.V), data::to_string(h.value_type), seconds);
}

}  // namespace kdtrain::cli
