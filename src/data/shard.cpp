#include "data/shard.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kdtrain::data {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kdtrain shard I/O reads little-endian files with plain loads; big-endian hosts are unsupported"
#endif

namespace {

// splitmix64's finaliser: a cheap, well-mixing bijection on 64 bits.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

template <typename T>
inline uint32_t load_token(const uint8_t* base, int64_t i) {
  T v;
  std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Index of the first id >= vocab in tokens [0, n), or -1. Scans in blocks with a
// branch-free max reduction (vectorises) and only searches a block that fails.
template <typename T>
int64_t first_out_of_range(const T* tokens, int64_t n, uint64_t vocab) {
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    T block_max = 0;
    for (int64_t i = start; i < end; ++i) block_max = tokens[i] > block_max ? tokens[i] : block_max;
    if (block_max < vocab) continue;
    for (int64_t i = start; i < end; ++i)
      if (tokens[i] >= vocab) return i;
  }
  return -1;
}

}  // namespace

uint64_t token_fingerprint(const uint8_t* bytes, uint64_t nbytes, int width) {
  // Word-at-a-time so a multi-GB shard hashes at memory speed: each 8-byte
  // little-endian word is mixed independently (pipelines well) and folded into a
  // rotate-xor-multiply chain; the width and length enter at both ends so the
  // same bytes read as uint16 vs uint32, or a zero-padded tail, hash differently.
  uint64_t h = 0xcbf29ce484222325ULL ^ static_cast<uint64_t>(width);
  h = mix64(h ^ nbytes);
  const uint64_t words = nbytes / 8;
  for (uint64_t w = 0; w < words; ++w) {
    uint64_t v;
    std::memcpy(&v, bytes + 8 * w, 8);
    h = (rotl64(h, 29) ^ mix64(v)) * 0x9e3779b97f4a7c15ULL;
  }
  const uint64_t tail = nbytes - 8 * words;
  if (tail > 0) {
    uint64_t v = 0;
    std::memcpy(&v, bytes + 8 * words, tail);
    h = (rotl64(h, 29) ^ mix64(v)) * 0x9e3779b97f4a7c15ULL;
  }
  return mix64(h ^ nbytes);
}

TokenShard::TokenShard(const std::string& path) : file_(path) {
  const uint64_t size = file_.size();
  KD_CHECK(size >= static_cast<uint64_t>(kShardHeaderBytes), path, ": token shard is ", size,
           " bytes, shorter than the ", kShardHeaderBytes, "-byte header");
  int32_t header[3];
  std::memcpy(header, file_.data(), sizeof(header));
  const int32_t magic = header[0], version = header[1], count = header[2];
  if (magic == kShardMagicU16) {
    KD_CHECK(version == kShardVersionU16, path, ": token shard magic ", magic,
             " (uint16 tokens) requires version ", kShardVersionU16, ", got version ", version);
    width_ = 2;
  } else if (magic == kShardMagicU32) {
    KD_CHECK(version == kShardVersionU32, path, ": token shard magic ", magic,
             " (uint32 tokens) requires version ", kShardVersionU32, ", got version ", version);
    width_ = 4;
  } else {
    fail(path, ": not a token shard: bad magic ", magic, " (expected ", kShardMagicU16, " or ",
         kShardMagicU32, ")");
  }
  version_ = version;
  KD_CHECK(count >= 0, path, ": token shard header has a negative token count ", count);
  count_ = count;
  const uint64_t expected = static_cast<uint64_t>(kShardHeaderBytes) +
                            static_cast<uint64_t>(count_) * static_cast<uint64_t>(width_);
  KD_CHECK(size == expected, path, ": token shard size ", size, " bytes does not match the header (",
           count_, " tokens x ", width_, " bytes + ", kShardHeaderBytes, " = ", expected, "): ",
           size < expected ? "file is truncated" : "trailing bytes after the tokens");
}

uint32_t TokenShard::token(int64_t i) const {
  KD_CHECK(i >= 0 && i < count_, path(), ": token index ", i, " out of range [0, ", count_, ")");
  return width_ == 2 ? load_token<uint16_t>(token_bytes(), i) : load_token<uint32_t>(token_bytes(), i);
}

void TokenShard::copy_tokens(int64_t begin, int64_t n, int32_t* out) const {
  KD_CHECK(begin >= 0 && n >= 0 && begin + n <= count_, path(), ": token range [", begin, ", ",
           begin + n, ") out of range [0, ", count_, ")");
  const uint8_t* base = token_bytes();
  if (width_ == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(load_token<uint16_t>(base, begin + i));
  } else {
    // Ids were range-checked by validate_vocab, so the reinterpretation is exact.
    std::memcpy(out, base + begin * 4, static_cast<size_t>(n) * 4);
  }
}

void TokenShard::validate_vocab(int64_t vocab_size) const {
  KD_CHECK(vocab_size > 0, path(), ": vocabulary size must be positive, got ", vocab_size);
  const uint64_t vocab = static_cast<uint64_t>(vocab_size);
  int64_t bad = -1;
  // The header is 1024 bytes, so the token array in the page-aligned map is
  // aligned for both widths and can be scanned with plain loads.
  if (width_ == 2) {
    if (vocab > 0xffff) return;  // every uint16 id fits
    bad = first_out_of_range(reinterpret_cast<const uint16_t*>(token_bytes()), count_, vocab);
  } else {
    bad = first_out_of_range(reinterpret_cast<const uint32_t*>(token_bytes()), count_, vocab);
  }
  KD_CHECK(bad < 0, path(), ": token id ", (bad < 0 ? 0 : token(bad)), " at position ", bad,
           " is out of range for vocabulary size ", vocab_size);
}

uint64_t TokenShard::fingerprint() const {
  if (!have_fingerprint_) {
    fingerprint_ = token_fingerprint(token_bytes(), static_cast<uint64_t>(count_) * width_, width_);
    have_fingerprint_ = true;
  }
  return fingerprint_;
}

ShardStats TokenShard::stats() const {
  ShardStats s;
  if (count_ > 0) {
    uint32_t lo = 0xffffffffu, hi = 0;
    const uint8_t* base = token_bytes();
    for (int64_t i = 0; i < count_; ++i) {
      uint32_t t = width_ == 2 ? load_token<uint16_t>(base, i) : load_token<uint32_t>(base, i);
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
    s.min_id = lo;
    s.max_id = hi;
  }
  s.fingerprint = fingerprint();
  return s;
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int version) {
  KD_CHECK(version == kShardVersionU16 || version == kShardVersionU32, path,
           ": unsupported shard version ", version, " (use 1 for uint16 or 7 for uint32 tokens)");
  KD_CHECK(tokens.size() <= 0x7fffffffULL, path, ": ", tokens.size(),
           " tokens exceed the int32 count of the shard header; split into several shards");
  int32_t header[kShardHeaderInts] = {};
  header[0] = version == kShardVersionU16 ? kShardMagicU16 : kShardMagicU32;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  io::AtomicFileWriter out(path);
  out.write(header, sizeof(header));
  if (version == kShardVersionU16) {
    std::vector<uint16_t> narrow(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      KD_CHECK(tokens[i] <= 0xffff, path, ": token id ", tokens[i], " at position ", i,
               " does not fit version 1 (uint16) shards; use version 7");
      narrow[i] = static_cast<uint16_t>(tokens[i]);
    }
    out.write(narrow.data(), narrow.size() * 2);
  } else {
    out.write(tokens.data(), tokens.size() * 4);
  }
  out.commit();
}

}  // namespace kdtrain::data
