// Teacher cache shards: header fields, sizes and the trailer, then window
// records (ids, values, the value checks). The checksum would stop almost every
// mutation, so an input whose header decodes gets a manifest that matches it
// and a correct trailer patched in, and the fuzzer reaches the records behind
// them (a shard with a matching checksum must still be safe to read).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "data/teacher_cache.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdtrain::data;
  std::vector<uint8_t> bytes(data, data + size);
  const size_t trailer = static_cast<size_t>(kCacheTrailerBytes);
  if (size < static_cast<size_t>(kCacheHeaderBytes) + trailer || size % 8 != 0) return 0;
  ShardHeader header;
  try {
    header = decode_shard_header(bytes.data(), "fuzz");
  } catch (const kdtrain::Error&) {
    return 0;
  }
  if (header.shards != 1 || header.shard != 0 || header.first_window != 0 ||
      header.windows != header.cache.windows)
    return 0;
  CacheChecksum sum;
  sum.update(bytes.data(), size - trailer);
  encode_trailer(sum.value(), bytes.data() + size - trailer);
  const std::filesystem::path dir = kdtrain::fuzz::scratch_dir() / "cache";
  std::filesystem::create_directories(dir);
  CacheManifest manifest = plan_cache(header.cache, std::max<int64_t>(header.windows, 1));
  if (!manifest.shards.empty()) manifest.shards[0].checksum = sum.value();
  write_cache_manifest(dir.string(), manifest);
  kdtrain::fuzz::write_scratch("cache/" + cache_shard_file(0), bytes.data(), bytes.size());
  kdtrain::fuzz::expect_only_kdtrain_errors([&] {
    const TeacherCache cache(dir.string());
    const int64_t windows = cache.header().windows;
    kdtrain::CachedRows rows;
    if (windows > 0) cache.append_window(0, rows);
    if (windows > 1) cache.append_window(windows - 1, rows);
  });
  return 0;
}
