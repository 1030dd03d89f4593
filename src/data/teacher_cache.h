// Teacher logit cache (docs/distillation.md): for every target
// position of every window of a TokenDataset, the teacher's top-K token ids,
// their log-probabilities at temperature 1 and the log of the remaining tail
// mass, so training can distil without running the teacher.
//
// File <dir>/teacher_cache.bin, little-endian:
//   header (256 bytes)  magic "KDTCACHE", version, value dtype, K, V, seq_len,
//                       windows, data fingerprint, teacher hash, record bytes
//   records             one per window, in window order (aligned with the shards
//                       through TokenDataset's window index), each:
//                         ids      uint32 (T, K)   top-K ids, by descending log-prob
//                         logp     bf16|f32 (T, K) log softmax of the raw logits
//                         log_tail f32 (T)         log(1 - sum_K p), -inf when K = V
//                         zero padding to a multiple of 8 bytes
//   trailer (16 bytes)  checksum (64-bit, over header + records), magic "KDTCEND\0"
// The checksum and then every value (io/teacher_cache_values.h) are verified
// when the file is opened; any mismatch, a wrong size, a bad field or a value
// no teacher produces is refused with an error naming the file (and the window).
//
// This is the file format only. The loss against its rows is
// model/cached_teacher_loss.h; `kdtrain teacher-cache` writes it
// (cli/teacher_cache_builder.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "io/file_util.h"
#include "model/cached_teacher_loss.h"

namespace kdtrain {
struct LoadedModel;
}  // namespace kdtrain

namespace kdtrain::data {

constexpr char kCacheFileName[] = "teacher_cache.bin";
constexpr uint32_t kCacheVersion = 1;
constexpr int64_t kCacheHeaderBytes = 256;
constexpr int64_t kCacheTrailerBytes = 16;

enum class CacheValueType : uint32_t { bf16 = 0, f32 = 1 };

struct CacheHeader {
  CacheValueType value_type = CacheValueType::bf16;
  int64_t K = 0, V = 0, seq_len = 0, windows = 0;
  uint64_t data_fingerprint = 0;  // TokenDataset::fingerprint() of the data it was made from
  uint64_t teacher_hash = 0;      // hash of the teacher's config.json and weights
  int64_t record_bytes() const;   // bytes per window record (padded to 8)
};

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

class TeacherCache {
 public:
  explicit TeacherCache(const std::string& dir);  // maps, checksums, checks every value
  const CacheHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }

  // Refuses (naming `key` and the file) a cache made for other data, another
  // seq_len or another vocabulary size.
  void require_match(const TokenDataset& data, int64_t vocab_size, const std::string& key) const;

  // Appends window `window`'s T rows to out (ids, logp, log_tail).
  void append_window(int64_t window, CachedRows& out) const;

 private:
  void decode_window(int64_t window, CachedRows& out) const;  // appends, unchecked
  io::MappedFile file_;
  CacheHeader header_;
};

// Writes teacher_cache.bin atomically; records come from a callback in window order.
class TeacherCacheWriter {
 public:
  TeacherCacheWriter(const std::string& dir, const CacheHeader& header);
  ~TeacherCacheWriter();
  TeacherCacheWriter(const TeacherCacheWriter&) = delete;
  TeacherCacheWriter& operator=(const TeacherCacheWriter&) = delete;
  // ids (T, K), logp (T, K) fp32 (rounded to the header's value type), log_tail (T).
  void add_window(const int32_t* ids, const float* logp, const float* log_tail);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The teacher's fingerprint as a cache records it (CacheHeader::teacher_hash): a
// hash of its config and weights. Training records it too (trainer_state.json).
uint64_t teacher_hash(const LoadedModel& teacher);

// The same fingerprint fed a tensor at a time in arena order, for a teacher
// loaded without an fp32 copy of its weights (train/teacher_load.h).
class TeacherHasher {
 public:
  TeacherHasher(const ModelConfig& model, const AttentionConfig& attention);
  void add(const float* values, int64_t n);       // the next n parameters
  void add_bf16(const void* values, int64_t n);   // the same from bf16 bits (any alignment)
  uint64_t value();                               // once, after the last parameter

 private:
  CacheChecksum sum_;
  float carry_ = 0.f;  // an odd parameter waiting for its pair (the hash reads 8-byte words)
  bool has_carry_ = false;
};

}  // namespace kdtrain::data
