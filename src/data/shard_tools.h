// The work behind `kdtrain data info` / `kdtrain data write`, kept out of the
// CLI file so it can be tested without parsing arguments.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kdtrain::data {

// Whitespace-separated decimal ids; errors name the file, the entry index and text.
std::vector<uint32_t> read_token_ids_text(const std::string& path);
// Every byte of the file as one token id 0..255 (for the vocab-256 presets).
std::vector<uint32_t> read_bytes_as_tokens(const std::string& path);
// Smallest shard version that holds every id: 1 (uint16) or 7 (uint32).
int smallest_shard_version(const std::vector<uint32_t>& tokens);

// One line per shard (path, version, width, tokens, min/max id, fingerprint) and
// a totals line, for the shards the paths / globs expand to.
void print_shard_info(const std::vector<std::string>& patterns, std::ostream& out);

}  // namespace kdtrain::data
