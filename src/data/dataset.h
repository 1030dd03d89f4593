// A training data source: a sorted list of token shards cut into windows of
// seq_len + 1 tokens (inputs and the targets shifted by one). Windows start
// every seq_len tokens within a shard, so consecutive windows share one token
// (the last target of one is the first input of the next) and no token is
// trained on twice as a target; a window never crosses a shard boundary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace kdtrain::data {

// Expands each path or glob(3) pattern; the union is sorted and holds each file
// once (by device and inode, so two spellings or a link do not double a shard).
// A path naming an existing file is taken literally, glob characters included.
// A pattern matching nothing is an error naming it.
std::vector<std::string> expand_shard_patterns(const std::vector<std::string>& patterns);

class TokenDataset {
 public:
  // Opens every shard; vocab_size > 0 also scans each for out-of-range ids.
  // A shard shorter than one window (seq_len + 1 tokens) is an error naming it.
  TokenDataset(const std::vector<std::string>& patterns, int64_t seq_len, int64_t vocab_size);

  int64_t seq_len() const { return seq_len_; }
  int64_t num_windows() const { return total_windows_; }
  const std::vector<TokenShard>& shards() const { return shards_; }

  struct WindowLocation {
    int64_t shard = 0;  // index into shards()
    int64_t start = 0;  // first token of the window in that shard
  };
  WindowLocation locate(int64_t window) const;  // throws if out of range

  // Copies window `window` (seq_len + 1 tokens) into out.
  void read_window(int64_t window, int32_t* out) const;
  // For B windows: inputs (B, T) = tokens [0, T), targets (B, T) = tokens [1, T + 1).
  void fill_batch(const std::vector<int64_t>& windows, int32_t* inputs, int32_t* targets) const;

  // Hash of the shard fingerprints in order plus seq_len: a resumed run checks it
  // to refuse silently changed data.
  uint64_t fingerprint() const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // cumulative window counts, size shards_ + 1
  int64_t seq_len_ = 0;
  int64_t total_windows_ = 0;
};

}  // namespace kdtrain::data
