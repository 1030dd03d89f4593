// The version-1 teacher cache reader (data/teacher_cache_v1.h). Layout: a
// 256-byte header (magic "KDTCACHE", version 1, value type, K, V, seq_len,
// windows, data fingerprint, teacher hash, record bytes), W records of uint32
// ids (T, K), bf16|f32 log-probs (T, K), f32 log tails (T) padded to 8 bytes, and
// a 16-byte trailer (checksum, "KDTCEND\0").
#include "data/teacher_cache_v1.h"

#include <cstring>
#include <filesystem>

#include "config/limits.h"
#include "core/bf16.h"
#include "core/error.h"

namespace kdtrain::data {

namespace {

constexpr char kMagic[8] = {'K', 'D', 'T', 'C', 'A', 'C', 'H', 'E'};

template <typename T>
T get(const uint8_t* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

int64_t v1_record_bytes(const CacheHeader& h) {
  const int64_t vb = h.value_type == CacheValueType::bf16 ? 2 : 4;
  return (h.seq_len * h.K * (4 + vb) + h.seq_len * 4 + 7) / 8 * 8;
}

}  // namespace

TeacherCacheV1::TeacherCacheV1(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kCacheV1FileName).string();
  KD_CHECK(std::filesystem::exists(path), dir, ": no ", kCacheV1FileName, " (not a version-1 teacher cache)");
  file_ = io::MappedFile(path);
  const uint8_t* b = file_.data();
  const uint64_t size = file_.size();
  KD_CHECK(size >= static_cast<uint64_t>(kCacheHeaderBytes + kCacheTrailerBytes), path, ": teacher cache is ",
           size, " bytes, shorter than its header and trailer (truncated?)");
  KD_CHECK(std::memcmp(b, kMagic, 8) == 0, path, ": not a kdtrain teacher cache (bad magic)");
  const uint32_t version = get<uint32_t>(b, 8), vt = get<uint32_t>(b, 12);
  KD_CHECK(version == 1, path, ": teacher cache version ", version, ", expected 1");
  KD_CHECK(vt <= 1, path, ": unknown value type ", vt);
  header_.value_type = static_cast<CacheValueType>(vt);
  header_.K = get<int64_t>(b, 16);
  header_.V = get<int64_t>(b, 24);
  header_.seq_len = get<int64_t>(b, 32);
  header_.windows = get<int64_t>(b, 40);
  header_.data_fingerprint = get<uint64_t>(b, 48);
  header_.teacher_hash = get<uint64_t>(b, 56);
  KD_CHECK(header_.V > 0 && header_.V <= SizeLimits::vocab_size && header_.K >= 1 && header_.K <= header_.V &&
               header_.seq_len > 0 && header_.seq_len <= SizeLimits::seq_len && header_.windows >= 0,
           path, ": corrupt header (K ", header_.K, ", V ", header_.V, ", seq_len ", header_.seq_len, ", windows ",
           header_.windows, ")");
  record_bytes_ = v1_record_bytes(header_);
  KD_CHECK(get<int64_t>(b, 64) == record_bytes_, path, ": corrupt header (record size ", get<int64_t>(b, 64),
           ", expected ", record_bytes_, ")");
  KD_CHECK(static_cast<uint64_t>(header_.windows) <=
               (size - kCacheHeaderBytes - kCacheTrailerBytes) / static_cast<uint64_t>(record_bytes_),
           path, ": teacher cache is ", size, " bytes, too short for its ", header_.windows, " windows: truncated");
  const uint64_t payload = static_cast<uint64_t>(kCacheHeaderBytes) +
                           static_cast<uint64_t>(header_.windows) * static_cast<uint64_t>(record_bytes_);
  KD_CHECK(size == payload + kCacheTrailerBytes, path, ": teacher cache is ", size, " bytes but its header describes ",
           payload + kCacheTrailerBytes);
  const uint64_t stored = decode_trailer(b + payload, path);
  CacheChecksum sum;
  sum.update(b, payload);
  KD_CHECK(sum.value() == stored, path, ": checksum mismatch (stored ", stored, ", computed ", sum.value(),
           "): the cache is corrupt");
}

void TeacherCacheV1::read_window(int64_t window, int32_t* ids, float* logp, float* log_tail) const {
  KD_CHECK(window >= 0 && window < header_.windows, path(), ": window ", window, " out of range");
  const int64_t TK = header_.seq_len * header_.K;
  const uint8_t* rec = file_.data() + kCacheHeaderBytes + window * record_bytes_;
  std::memcpy(ids, rec, TK * 4);
  const uint8_t* values = rec + TK * 4;
  const bool bf16 = header_.value_type == CacheValueType::bf16;
  if (bf16) {
    for (int64_t i = 0; i < TK; ++i) logp[i] = bf16_bits_to_float(get<uint16_t>(values, 2 * i));
  } else {
    std::memcpy(logp, values, TK * 4);
  }
  std::memcpy(log_tail, values + TK * (bf16 ? 2 : 4), header_.seq_len * 4);
}

}  // namespace kdtrain::data
