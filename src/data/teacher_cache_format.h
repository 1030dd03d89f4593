// The teacher cache's on-disk pieces (docs/distillation.md, "File format"): the
// shard header, the compact window record (ids packed in ceil(log2 V) bits,
// log-probs bf16 or f32, the log tail mass f32) and the checksum. The reader
// (data/teacher_cache.h) and the writer (data/teacher_cache_writer.h) both
// encode and decode through here; nothing else knows the byte layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kdtrain::data {

constexpr uint32_t kCacheVersion = 2;
constexpr int64_t kCacheHeaderBytes = 256;
constexpr int64_t kCacheTrailerBytes = 16;

enum class CacheValueType : uint32_t { bf16 = 0, f32 = 1 };
const char* to_string(CacheValueType t);

// What every shard of a cache shares: the manifest's fields.
struct CacheHeader {
  CacheValueType value_type = CacheValueType::bf16;
  int64_t K = 0, V = 0, seq_len = 0, windows = 0;  // windows: of the whole cache
  uint64_t data_fingerprint = 0;  // TokenDataset::fingerprint() of the data it was made from
  uint64_t teacher_hash = 0;      // hash of the teacher's config.json and weights
  int id_bits() const;            // ceil(log2 V), at least 1
  int64_t record_bytes() const;   // bytes per window record (padded to 8)
};

// One shard: windows [first_window, first_window + windows) of the cache.
struct ShardHeader {
  CacheHeader cache;
  int64_t shard = 0, shards = 0;
  int64_t first_window = 0, windows = 0;
  uint64_t file_bytes() const;  // header + records + trailer
};

// The header's 256 bytes, and back. decode refuses (naming `path`) a wrong magic,
// version or value type, out-of-range sizes and a record size that is not the
// one the fields imply.
std::vector<uint8_t> encode_shard_header(const ShardHeader& h);
ShardHeader decode_shard_header(const uint8_t* bytes, const std::string& path);

// The 16-byte trailer: checksum of header and records, then the end magic.
void encode_trailer(uint64_t checksum, uint8_t* out);
// The stored checksum; refuses a wrong end magic, naming `path`.
uint64_t decode_trailer(const uint8_t* bytes, const std::string& path);

// Streaming 64-bit checksum: FNV-1a over little-endian 64-bit words (inputs are
// multiples of 8 bytes), finished with the byte count.
class CacheChecksum {
 public:
  void update(const void* bytes, size_t n);  // n % 8 == 0
  uint64_t value() const;

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
  uint64_t bytes_ = 0;
};

// One window's record: ids (T, K), logp (T, K) rounded to the value type,
// log_tail (T); `out` has record_bytes() bytes.
void encode_record(const CacheHeader& h, const int32_t* ids, const float* logp, const float* log_tail,
                   uint8_t* out);
// The inverse: ids, logp and log_tail of T rows appended at the given pointers
// (T*K, T*K and T elements). No value checks: see check_values (data/teacher_cache.h).
void decode_record(const CacheHeader& h, const uint8_t* record, int32_t* ids, float* logp, float* log_tail);

}  // namespace kdtrain::data
