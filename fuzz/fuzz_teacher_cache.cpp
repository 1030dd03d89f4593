// Teacher caches: header fields, sizes and the trailer, then window records.
// The checksum would stop almost every mutation at the trailer, so inputs long
// enough get a correct trailer patched in, and the fuzzer reaches the fields
// behind it (a file with a matching checksum must still be safe to read).
#include <cstring>
#include <filesystem>
#include <vector>

#include "data/teacher_cache.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdtrain::data;
  std::vector<uint8_t> bytes(data, data + size);
  const size_t trailer = static_cast<size_t>(kCacheTrailerBytes);
  if (size >= static_cast<size_t>(kCacheHeaderBytes) + trailer && size % 8 == 0) {
    CacheChecksum sum;
    sum.update(bytes.data(), size - trailer);
    const uint64_t value = sum.value();
    std::memcpy(bytes.data() + size - trailer, &value, 8);
    std::memcpy(bytes.data() + size - 8, "KDTCEND", 8);
  }
  const std::filesystem::path dir = kdtrain::fuzz::scratch_dir() / "cache";
  std::filesystem::create_directories(dir);
  kdtrain::fuzz::write_scratch("cache/teacher_cache.bin", bytes.data(), bytes.size());
  kdtrain::fuzz::expect_only_kdtrain_errors([&] {
    const TeacherCache cache(dir.string());
    const int64_t windows = cache.header().windows;
    kdtrain::CachedRows rows;
    if (windows > 0) cache.append_window(0, rows);
    if (windows > 1) cache.append_window(windows - 1, rows);
  });
  return 0;
}
