// Verifies a teacher cache's shards ahead of their first read, so that the
// reader (data/teacher_cache_prefetch.h) finds them summed instead of summing
// them while a step waits (docs/distillation.md, "Reading during training").
// One thread of its own sums, in the order the run will first read them, the
// shards of the windows it is given; a shard the reader is summing is skipped,
// and one this thread is summing the reader waits for, so no shard is summed
// twice. A mismatch found here is thrown by the read that needs the shard,
// naming the shard and that window (TeacherCache::verify_shard).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "data/teacher_cache.h"

namespace kdtrain::data {

class ShardVerifier {
 public:
  explicit ShardVerifier(const TeacherCache& cache);
  ~ShardVerifier();  // finishes the shard in hand, then stops the thread
  ShardVerifier(const ShardVerifier&) = delete;
  ShardVerifier& operator=(const ShardVerifier&) = delete;

  // Windows the run reads later, in order: the shards of those not yet summed
  // are summed in that order, replacing the list given before.
  void ahead(const std::vector<int64_t>& windows);
  // Waits until every shard of the last list is summed (tests).
  void wait_idle();

 private:
  void run();
  const TeacherCache& cache_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int64_t> shards_;  // to sum, in order
  size_t next_ = 0;              // the first of shards_ not taken yet
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace kdtrain::data
