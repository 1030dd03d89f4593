#include "data/shard_tools.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "io/file_util.h"

namespace kdtrain::data {

std::vector<uint32_t> read_token_ids_text(const std::string& path) {
  std::ifstream in(path);
  KD_CHECK(in.good(), path, ": cannot open: ", errno_text());
  std::vector<uint32_t> ids;
  std::string word;
  while (in >> word) {
    // Parse by hand: stream extraction would accept "-1" into an unsigned and wrap it.
    uint64_t value = 0;
    bool ok = !word.empty() && word.size() <= 10;
    for (char c : word) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        ok = false;
        break;
      }
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    KD_CHECK(ok && value <= 0xffffffffULL, path, ": entry ", ids.size(), " ('", word,
             "') is not a token id (a non-negative integer below 2^32)");
    ids.push_back(static_cast<uint32_t>(value));
  }
  KD_CHECK(in.eof(), path, ": read error after ", ids.size(), " ids");
  return ids;
}

std::vector<uint32_t> read_bytes_as_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KD_CHECK(in.good(), path, ": cannot open: ", errno_text());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = static_cast<unsigned char>(bytes[i]);
  return ids;
}

int smallest_shard_version(const std::vector<uint32_t>& tokens) {
  const bool narrow = std::all_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t <= 0xffff; });
  return narrow ? kShardVersionU16 : kShardVersionU32;
}

void print_shard_info(const std::vector<std::string>& patterns, std::ostream& out) {
  int64_t total_tokens = 0;
  uint32_t lo = 0xffffffffu, hi = 0;
  std::vector<std::string> paths = expand_shard_patterns(patterns);
  char line[512];
  for (const std::string& path : paths) {
    TokenShard shard(path);
    ShardStats s = shard.stats();
    if (shard.size() > 0) {
      lo = std::min(lo, s.min_id);
      hi = std::max(hi, s.max_id);
    }
    total_tokens += shard.size();
    std::snprintf(line, sizeof(line),
                  "version %d  width %d  tokens %" PRId64 "  min %" PRIu32 "  max %" PRIu32
                  "  fingerprint %016" PRIx64,
                  shard.version(), shard.width(), shard.size(), s.min_id, s.max_id, s.fingerprint);
    out << path << "  " << line << "\n";
  }
  if (total_tokens == 0) lo = 0;
  std::snprintf(line, sizeof(line), "total: %zu shards  tokens %" PRId64 "  min %" PRIu32 "  max %" PRIu32,
                paths.size(), total_tokens, lo, hi);
  out << line << "\n";
}

}  // namespace kdtrain::data
