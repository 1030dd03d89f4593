// The teacher cache's byte layout (data/teacher_cache_format.h): shard header,
// trailer, checksum and the compact window record.
#include "data/teacher_cache_format.h"

#include <array>
#include <cstring>
#include <utility>

#include "config/limits.h"
#include "core/bf16.h"
#include "core/error.h"

namespace kdtrain::data {

namespace {

constexpr char kMagic[8] = {'K', 'D', 'T', 'C', 'A', 'C', 'H', 'E'};
constexpr char kEndMagic[8] = {'K', 'D', 'T', 'C', 'E', 'N', 'D', '\0'};

// Header field offsets (bytes); the rest of the 256 bytes is zero.
struct Offsets {
  static constexpr size_t magic = 0, version = 8, value_type = 12, K = 16, V = 24, seq_len = 32,
                          windows = 40, data_fingerprint = 48, teacher_hash = 56, record_bytes = 64,
                          id_bits = 72, shard = 80, shards = 88, first_window = 96, shard_windows = 104;
};

template <typename T>
void put(uint8_t* base, size_t offset, T value) {
  std::memcpy(base + offset, &value, sizeof(T));
}
template <typename T>
T get(const uint8_t* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

int64_t value_bytes(CacheValueType t) { return t == CacheValueType::bf16 ? 2 : 4; }

int64_t packed_id_bytes(const CacheHeader& h) { return (h.seq_len * h.K * h.id_bits() + 63) / 64 * 8; }

}  // namespace

const char* to_string(CacheValueType t) { return t == CacheValueType::bf16 ? "bf16" : "f32"; }

int CacheHeader::id_bits() const {
  int bits = 1;
  while ((int64_t(1) << bits) < V) ++bits;
  return bits;
}

int64_t CacheHeader::record_bytes() const {
  const int64_t raw = packed_id_bytes(*this) + seq_len * K * value_bytes(value_type) + seq_len * 4;
  return (raw + 7) / 8 * 8;
}

uint64_t ShardHeader::file_bytes() const {
  return static_cast<uint64_t>(kCacheHeaderBytes + kCacheTrailerBytes) +
         static_cast<uint64_t>(windows) * static_cast<uint64_t>(cache.record_bytes());
}

std::vector<uint8_t> encode_shard_header(const ShardHeader& s) {
  const CacheHeader& h = s.cache;
  std::vector<uint8_t> b(kCacheHeaderBytes, 0);
  std::memcpy(b.data(), kMagic, 8);
  put<uint32_t>(b.data(), Offsets::version, kCacheVersion);
  put<uint32_t>(b.data(), Offsets::value_type, static_cast<uint32_t>(h.value_type));
  put<int64_t>(b.data(), Offsets::K, h.K);
  put<int64_t>(b.data(), Offsets::V, h.V);
  put<int64_t>(b.data(), Offsets::seq_len, h.seq_len);
  put<int64_t>(b.data(), Offsets::windows, h.windows);
  put<uint64_t>(b.data(), Offsets::data_fingerprint, h.data_fingerprint);
  put<uint64_t>(b.data(), Offsets::teacher_hash, h.teacher_hash);
  put<int64_t>(b.data(), Offsets::record_bytes, h.record_bytes());
  put<int64_t>(b.data(), Offsets::id_bits, h.id_bits());
  put<int64_t>(b.data(), Offsets::shard, s.shard);
  put<int64_t>(b.data(), Offsets::shards, s.shards);
  put<int64_t>(b.data(), Offsets::first_window, s.first_window);
  put<int64_t>(b.data(), Offsets::shard_windows, s.windows);
  return b;
}

ShardHeader decode_shard_header(const uint8_t* b, const std::string& path) {
  KD_CHECK(std::memcmp(b, kMagic, 8) == 0, path, ": not a kdtrain teacher cache shard (bad magic)");
  const uint32_t version = get<uint32_t>(b, Offsets::version);
  KD_CHECK(version == kCacheVersion, path, ": teacher cache version ", version, " is not supported (expected ",
           kCacheVersion, ")");
  const uint32_t vt = get<uint32_t>(b, Offsets::value_type);
  KD_CHECK(vt <= 1, path, ": unknown value type ", vt);
  ShardHeader s;
  CacheHeader& h = s.cache;
  h.value_type = static_cast<CacheValueType>(vt);
  h.K = get<int64_t>(b, Offsets::K);
  h.V = get<int64_t>(b, Offsets::V);
  h.seq_len = get<int64_t>(b, Offsets::seq_len);
  h.windows = get<int64_t>(b, Offsets::windows);
  h.data_fingerprint = get<uint64_t>(b, Offsets::data_fingerprint);
  h.teacher_hash = get<uint64_t>(b, Offsets::teacher_hash);
  s.shard = get<int64_t>(b, Offsets::shard);
  s.shards = get<int64_t>(b, Offsets::shards);
  s.first_window = get<int64_t>(b, Offsets::first_window);
  s.windows = get<int64_t>(b, Offsets::shard_windows);
  // Bounded first, so the sizes derived below cannot overflow.
  KD_CHECK(h.V > 0 && h.V <= SizeLimits::vocab_size && h.K >= 1 && h.K <= h.V && h.seq_len > 0 &&
               h.seq_len <= SizeLimits::seq_len && h.windows >= 0 && h.windows < (int64_t(1) << 40) &&
               s.shards >= 1 && s.shard >= 0 && s.shard < s.shards && s.first_window >= 0 && s.windows >= 0 &&
               s.first_window <= h.windows && s.windows <= h.windows - s.first_window,
           path, ": corrupt header (K ", h.K, ", V ", h.V, ", seq_len ", h.seq_len, ", windows ", h.windows,
           ", shard ", s.shard, " of ", s.shards, ", windows ", s.first_window, "+", s.windows, ")");
  KD_CHECK(get<int64_t>(b, Offsets::record_bytes) == h.record_bytes() && get<int64_t>(b, Offsets::id_bits) == h.id_bits(),
           path, ": corrupt header (record size ", get<int64_t>(b, Offsets::record_bytes), ", id bits ",
           get<int64_t>(b, Offsets::id_bits), "; the fields imply ", h.record_bytes(), " and ", h.id_bits(), ")");
  return s;
}

void encode_trailer(uint64_t checksum, uint8_t* out) {
  put<uint64_t>(out, 0, checksum);
  std::memcpy(out + 8, kEndMagic, 8);
}

uint64_t decode_trailer(const uint8_t* b, const std::string& path) {
  KD_CHECK(std::memcmp(b + 8, kEndMagic, 8) == 0, path, ": bad trailer magic (truncated or not a cache shard)");
  return get<uint64_t>(b, 0);
}

void CacheChecksum::update(const void* bytes, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h_ = (h_ ^ w) * 0x100000001b3ULL;
  }
  bytes_ += n;
}

uint64_t CacheChecksum::value() const { return (h_ ^ bytes_) * 0x100000001b3ULL; }

// Ids: a little-endian bit stream, id i in bits [i*b, (i+1)*b) (bit 0 = the lowest
// bit of byte 0), zero-padded to whole 64-bit words.
void encode_record(const CacheHeader& h, const int32_t* ids, const float* logp, const float* log_tail,
                   uint8_t* out) {
  const int64_t TK = h.seq_len * h.K, bits = h.id_bits();
  std::memset(out, 0, h.record_bytes());
  uint64_t acc = 0;
  int64_t used = 0;  // bits of acc filled, < 64
  uint8_t* word = out;
  for (int64_t i = 0; i < TK; ++i) {
    const uint64_t id = static_cast<uint32_t>(ids[i]);
    acc |= id << used;
    if (used + bits >= 64) {
      std::memcpy(word, &acc, 8);
      word += 8;
      acc = used > 0 ? id >> (64 - used) : 0;
      used += bits - 64;
    } else {
      used += bits;
    }
  }
  if (used > 0) std::memcpy(word, &acc, 8);
  uint8_t* values = out + packed_id_bytes(h);
  if (h.value_type == CacheValueType::bf16) {
    for (int64_t i = 0; i < TK; ++i) put<uint16_t>(values, 2 * i, float_to_bf16_bits(logp[i]));
  } else {
    std::memcpy(values, logp, TK * 4);
  }
  std::memcpy(values + TK * value_bytes(h.value_type), log_tail, h.seq_len * 4);
}

namespace {

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Ids [0, n) of a stream of B-bit ids starting at bit 0 of `in`. Eight ids fill
// B whole bytes, so within a group each id's byte and shift are constants and
// the unpacking is a load, a shift and a mask per id. An id (at most 24 bits)
// starts within a byte, so one 8-byte load at its byte holds it; the load stays
// inside the record, whose values and tails follow the word-padded ids.
template <int B>
void unpack_ids(const uint8_t* in, int64_t n, int32_t* out) {
  constexpr uint64_t mask = (uint64_t(1) << B) - 1;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8, in += B) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) out[i + j] = static_cast<int32_t>((load_u64(in + j * B / 8) >> (j * B % 8)) & mask);
  }
  for (int j = 0; i < n; ++i, ++j) out[i] = static_cast<int32_t>((load_u64(in + j * B / 8) >> (j * B % 8)) & mask);
}

using UnpackIds = void (*)(const uint8_t*, int64_t, int32_t*);
constexpr int kMaxIdBits = 24;  // SizeLimits::vocab_size = 2^24

template <int... B>
constexpr std::array<UnpackIds, sizeof...(B)> unpackers(std::integer_sequence<int, B...>) {
  return {&unpack_ids<B + 1>...};
}
constexpr std::array<UnpackIds, kMaxIdBits> kUnpackIds = unpackers(std::make_integer_sequence<int, kMaxIdBits>());

}  // namespace

void decode_record(const CacheHeader& h, const uint8_t* record, int32_t* ids, float* logp, float* log_tail) {
  const int64_t TK = h.seq_len * h.K, bits = h.id_bits();
  KD_CHECK(bits >= 1 && bits <= kMaxIdBits, "teacher cache: ", bits, "-bit ids (V ", h.V, ") are not supported");
  kUnpackIds[bits - 1](record, TK, ids);
  const uint8_t* values = record + packed_id_bytes(h);
  if (h.value_type == CacheValueType::bf16) {
#pragma omp simd
    for (int64_t i = 0; i < TK; ++i) logp[i] = bf16_bits_to_float(get<uint16_t>(values, 2 * i));
  } else {
    std::memcpy(logp, values, TK * 4);
  }
  std::memcpy(log_tail, values + TK * value_bytes(h.value_type), h.seq_len * 4);
}

}  // namespace kdtrain::data
