// Teacher-cache values: a well-formed shard header, manifest and checksum around
// fuzzed window records (ids packed in ceil(log2 V) bits, docs/distillation.md), so every input reaches the value checks of the reader
// (io/teacher_cache_values.h) instead of stopping at the header or the
// checksum. The first four bytes pick the value type, K, V and T; the rest are
// the records. A finding, beyond a crash or an exception other than
// kdtrain::Error: a cache that opens although a row holds a value no teacher
// produces (checked here independently, with a looser mass bound).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "data/teacher_cache.h"
#include "fuzz_util.h"

namespace {

using namespace kdtrain::data;

// One shard holding every window: header, the fuzzed records (zero-padded), a
// correct trailer; *checksum gets the checksum the manifest must list.
std::vector<uint8_t> shard_file(const CacheHeader& h, const uint8_t* records, size_t bytes, uint64_t* checksum) {
  ShardHeader sh;
  sh.cache = h;
  sh.shards = 1;
  sh.windows = h.windows;
  std::vector<uint8_t> b = encode_shard_header(sh);
  const size_t body = static_cast<size_t>(h.windows * h.record_bytes());
  b.resize(b.size() + body, 0);
  std::memcpy(b.data() + kCacheHeaderBytes, records, std::min(bytes, body));
  CacheChecksum sum;
  sum.update(b.data(), b.size());
  *checksum = sum.value();
  b.resize(b.size() + kCacheTrailerBytes);
  encode_trailer(*checksum, b.data() + b.size() - kCacheTrailerBytes);
  return b;
}

// What any teacher's row is: ids distinct and in [0, V), log-probabilities
// finite and <= 0, the tail <= 0 or -inf, the mass 1 (within 0.02: the reader's
// bound for K <= 4 in bf16 is below 0.014).
bool row_is_a_distribution(const kdtrain::CachedRows& rows, int64_t t, int64_t V) {
  const int64_t K = rows.K;
  std::set<int32_t> ids;
  double mass = std::exp(static_cast<double>(rows.log_tail[t]));
  if (std::isnan(rows.log_tail[t]) || rows.log_tail[t] > 1e-3) return false;
  for (int64_t k = 0; k < K; ++k) {
    const int32_t id = rows.ids[t * K + k];
    const float l = rows.logp[t * K + k];
    if (id < 0 || id >= V || !ids.insert(id).second || !std::isfinite(l) || l > 1e-3) return false;
    mass += std::exp(static_cast<double>(l));
  }
  return std::fabs(mass - 1.0) <= 0.02;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  CacheHeader h;
  h.value_type = (data[0] & 1) ? CacheValueType::f32 : CacheValueType::bf16;
  h.K = 1 + data[1] % 4;
  h.V = h.K + data[2] % 16;
  h.seq_len = 1 + data[3] % 4;
  h.windows = std::max<int64_t>(1, std::min<int64_t>(3, static_cast<int64_t>(size - 4) / h.record_bytes()));
  uint64_t checksum = 0;
  const std::vector<uint8_t> file = shard_file(h, data + 4, size - 4, &checksum);
  const std::filesystem::path dir = kdtrain::fuzz::scratch_dir() / "cache_values";
  std::filesystem::create_directories(dir);
  CacheManifest manifest = plan_cache(h, h.windows);
  manifest.shards[0].checksum = checksum;
  write_cache_manifest(dir.string(), manifest);
  kdtrain::fuzz::write_scratch("cache_values/" + cache_shard_file(0), file.data(), file.size());
  kdtrain::fuzz::expect_only_kdtrain_errors([&] {
    const TeacherCache cache(dir.string());
    for (int64_t w = 0; w < h.windows; ++w) {
      kdtrain::CachedRows rows;
      cache.append_window(w, rows);
      for (int64_t t = 0; t < h.seq_len; ++t)
        if (!row_is_a_distribution(rows, t, h.V)) std::abort();  // accepted a value no teacher produces
    }
  });
  return 0;
}
