// Teacher logit cache (docs/distillation.md): for every target position of
// every window of a TokenDataset, the teacher's top-K token ids, their
// log-probabilities at temperature 1 and the log of the remaining tail mass, so
// training can distil without running the teacher.
//
// A cache is a directory: manifest.json (what it was made from, K, V, value
// type, and per shard its window range and checksum) and shard_NNNNN.bin files,
// each a run of consecutive windows with its own header and checksum
// (data/teacher_cache_format.h). Opening reads the manifest and each shard's
// header, size and trailer: O(shards), never the records. A shard's checksum is
// verified before the first read of a window of it returns (training reads in
// its prefetch thread, and verifier threads sum the shards the next steps
// read ahead of time, data/teacher_cache_prefetch.h), once per node where the
// ranks share their checks (share_checks_on_node); every decoded row's
// values are checked (io/teacher_cache_values.h). Every error names the shard
// and the window.
//
// The loss against these rows is model/cached_teacher_loss.h; `kdtrain
// teacher-cache` writes caches (cli/teacher_cache_builder.h).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "data/shard_checks.h"
#include "data/teacher_cache_format.h"
#include "dist/node_shared_memory.h"
#include "io/file_util.h"
#include "model/cached_teacher_loss.h"

namespace kdtrain {
struct LoadedModel;
}  // namespace kdtrain

namespace kdtrain::data {

constexpr char kCacheManifestName[] = "manifest.json";
constexpr char kCacheFormat[] = "kdtrain.teacher_cache/2";

std::string cache_shard_file(int64_t shard);  // "shard_00042.bin"

struct CacheShardInfo {
  std::string file;  // relative to the cache directory
  int64_t first_window = 0, windows = 0;
  uint64_t checksum = 0;
};

struct CacheManifest {
  CacheHeader header;
  int64_t shard_windows = 0;            // windows per shard (the last may hold fewer)
  std::vector<CacheShardInfo> shards;   // in window order, tiling [0, windows)
  nlohmann::json made_from;             // teacher, data patterns: for people
};

// Shards of `shard_windows` windows tiling [0, header.windows); checksums 0.
CacheManifest plan_cache(const CacheHeader& header, int64_t shard_windows);
// Reads and checks <dir>/manifest.json (fields, shard ranges tiling the windows),
// naming the file and the field. A version-1 cache is refused naming
// `kdtrain teacher-cache --convert`.
CacheManifest read_cache_manifest(const std::string& dir);
void write_cache_manifest(const std::string& dir, const CacheManifest& manifest);  // atomic

// One window's decoded rows through io::check_teacher_cache_rows (the one
// place the values are checked) at the value type's rounding; errors name
// `where` and the window.
void check_values(const CacheHeader& h, const int32_t* ids, const float* logp, const float* log_tail,
                  const std::string& where, int64_t window);

class TeacherCache {
 public:
  explicit TeacherCache(const std::string& dir);  // O(shards): manifest, shard headers, sizes, trailers
  const CacheHeader& header() const { return manifest_.header; }
  const CacheManifest& manifest() const { return manifest_; }
  const std::string& path() const { return dir_; }

  // Refuses (naming `key` and the cache) a cache made for other data, another
  // seq_len or another vocabulary size.
  void require_match(const TokenDataset& data, int64_t vocab_size, const std::string& key) const;

  // Appends window `window`'s T rows to out (ids, logp, log_tail), decoded and
  // their values checked (io::check_teacher_cache_rows); the first read of a
  // shard verifies its checksum. Thread-safe.
  void append_window(int64_t window, CachedRows& out) const;
  // The same into T*K ids, T*K log-probs and T tails at the given pointers
  // (the reader's reused buffers: no allocation per window).
  void decode_window(int64_t window, int32_t* ids, float* logp, float* log_tail) const;

  int64_t shard_of(int64_t window) const;
  // Collective over `comm`'s ranks, before any shard is summed: the ranks of a
  // node keep one table of summed shards (data/shard_checks.h), so each shard
  // is summed once per node, by whichever thread of whichever rank claims it
  // first, and a mismatch any of them finds stops the read of every rank.
  void share_checks_on_node(dist::Communicator& comm);
  // The same over the table in `memory` (from `checks_key()`, for this cache's
  // ShardChecks::bytes), before any shard is summed: share_checks_in_file
  // gives it the table in a file the caller names (tests: two caches of one
  // process, or a forked process, each a member of the file).
  void share_checks(std::unique_ptr<dist::NodeSharedMemory> memory);
  void share_checks_in_file(const std::string& file);
  uint64_t checks_key() const;  // names this cache's table in a node's memory
  // The table is shared (false: this rank's alone, checks_private_reason says why).
  bool checks_shared() const { return node_memory_ && node_memory_->shared(); }
  // Ranks of this node sharing the table share_checks_on_node made (1: this rank's alone).
  int checks_sharers() const { return node_memory_ ? node_memory_->sharers() : 1; }
  std::string checks_private_reason() const;
  // The shard's checksum over its header and records (every byte); throws naming
  // the shard and `window` on a mismatch. Summed once per shard: a shard another
  // thread is summing is waited for, and a mismatch found ahead is thrown here.
  void verify_shard(int64_t shard, int64_t window) const;
  // Sums the shard's checksum unless it is summed or another thread is at it; a
  // mismatch is kept for verify_shard to throw. `ahead`: before its first read
  // (a verifier thread), else for a read. Returns whether it summed.
  bool verify_if_free(int64_t shard, bool ahead) const;
  bool shard_verified(int64_t shard) const;  // summed, and the checksum matched
  int64_t shards_summed_on_read() const;     // by verify_if_free(·, false) or verify_shard
  int64_t shards_summed_ahead() const;       // by verify_if_free(·, true)
  // "<dir>: shard <file> (windows a..b)", for errors.
  std::string describe(int64_t shard) const;

 private:
  std::string dir_;
  CacheManifest manifest_;
  std::vector<io::MappedFile> files_;
  void sum_claimed(int64_t shard, bool ahead) const;
  size_t checks_bytes() const;  // the table's, for this cache's shards
  void use_checks(void* memory);
  uint32_t checks_member() const { return node_memory_ ? node_memory_->member() : 1; }
  bool claimer_died(uint32_t claimer) const;
  std::vector<uint64_t> own_checks_;                     // the table's memory until shared
  std::unique_ptr<dist::NodeSharedMemory> node_memory_;  // the node's, once shared
  std::unique_ptr<ShardChecks> checks_;                  // summed shards; lock-free
  // Wakes a thread waiting for a shard this process sums; another rank's sum
  // is seen by polling (kRemoteSumPoll).
  mutable std::mutex verify_mutex_;
  mutable std::condition_variable verify_done_;
  mutable int64_t summed_on_read_ = 0, summed_ahead_ = 0;  // by this process, under verify_mutex_
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
