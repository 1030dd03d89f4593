// Verifies a teacher cache's shards ahead of their first read, so that the
// reader (data/teacher_cache_prefetch.h) finds them summed instead of summing
// them while a step waits (docs/cache_checksums.md).
// Threads of its own (kd.cache_verify_threads) each take the next shard no
// thread has taken (of any rank of the node when the cache shares its table,
// TeacherCache::share_checks_on_node), in the order the run will first read
// them, among the shards of the windows it is given: a shard's checksum is one chain of
// dependent multiplies, summed on one core, so threads sum several shards at
// once. A shard the reader is summing is skipped, and one a verifier is summing
// the reader waits for, so no shard is summed twice. A mismatch found here is
// thrown by the read that needs the shard, naming the shard and that window
// (TeacherCache::verify_shard).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "data/teacher_cache.h"

namespace kdtrain::data {

// The verifier threads a rank runs: `configured` when it is not 0, else one per
// core this rank has beyond the step's and the reader's, at least 1 and at most
// 4 (beyond 4 x ~5 GB/s a rank's share of a node's disk, not its cores, limits
// the sums).
int verify_threads(int64_t configured, unsigned hardware_threads, int local_ranks);

class ShardVerifier {
 public:
  ShardVerifier(const TeacherCache& cache, int threads);
  ~ShardVerifier();  // each thread finishes the shard in hand, then stops
  ShardVerifier(const ShardVerifier&) = delete;
  ShardVerifier& operator=(const ShardVerifier&) = delete;

  // Windows the run reads later, in order: the shards of those not yet summed
  // are summed in that order, replacing the list given before.
  void ahead(const std::vector<int64_t>& windows);
  // Waits until every shard of the last list is summed (tests).
  void wait_idle();
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void run();
  const TeacherCache& cache_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int64_t> shards_;  // to sum, in order
  size_t next_ = 0;              // the first of shards_ not taken yet
  int busy_ = 0;                 // threads summing a shard
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kdtrain::data
