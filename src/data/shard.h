// Token shards in llm.c's .bin layout, memory-mapped:
//   256 x int32 header: [0] magic, [1] version, [2] token count, rest zero;
//   then the tokens, little-endian.
//   magic 20240520, version 1: uint16 tokens (vocabularies up to 65536, GPT-2);
//   magic 20240801, version 7: uint32 tokens (Llama-3 / Qwen vocabularies).
// The file size must be exactly 1024 + count * width: a truncated copy or
// trailing garbage is an error, never silently read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/file_util.h"

namespace kdtrain::data {

constexpr int32_t kShardMagicU16 = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;
constexpr int64_t kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// Summary of one full scan over a shard's tokens.
struct ShardStats {
  uint32_t min_id = 0;
  uint32_t max_id = 0;
  uint64_t fingerprint = 0;
};

class TokenShard {
 public:
  explicit TokenShard(const std::string& path);  // maps and validates the header and size

  const std::string& path() const { return file_.path(); }
  int version() const { return version_; }
  int width() const { return width_; }        // bytes per token: 2 or 4
  int64_t size() const { return count_; }     // number of tokens

  uint32_t token(int64_t i) const;  // bounds-checked
  // Copies tokens [begin, begin + n) to out as int32 (ids must fit; see validate_vocab).
  void copy_tokens(int64_t begin, int64_t n, int32_t* out) const;

  // One pass over the tokens; throws naming the file, the first position with an
  // id >= vocab_size and its value.
  void validate_vocab(int64_t vocab_size) const;
  // 64-bit hash of width + token bytes (docs/formats.md); computed once and cached,
  // so the first call is not thread-safe (call it at start-up; reads are).
  uint64_t fingerprint() const;
  // Min / max id and fingerprint in one pass (for `kdtrain data info`).
  ShardStats stats() const;

 private:
  const uint8_t* token_bytes() const { return file_.data() + kShardHeaderBytes; }
  io::MappedFile file_;
  int version_ = 0;
  int width_ = 0;
  int64_t count_ = 0;
  mutable bool have_fingerprint_ = false;
  mutable uint64_t fingerprint_ = 0;
};

// The fingerprint of a token byte stream (exposed so tests and tools can
// recompute it independently of a file).
uint64_t token_fingerprint(const uint8_t* bytes, uint64_t nbytes, int width);

// Writes a shard atomically (temp + fsync + rename). version 1 stores uint16 and
// refuses ids >= 65536; version 7 stores uint32.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int version);

}  // namespace kdtrain::data
