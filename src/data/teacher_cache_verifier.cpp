#include "data/teacher_cache_verifier.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace kdtrain::data {

int verify_threads(int64_t configured, unsigned hardware_threads, int local_ranks) {
  if (configured > 0) return static_cast<int>(configured);
  const int64_t cores = static_cast<int64_t>(hardware_threads) / std::max(1, local_ranks);
  return static_cast<int>(std::clamp<int64_t>(cores - 2, 1, 4));
}

ShardVerifier::ShardVerifier(const TeacherCache& cache, int threads) : cache_(cache) {
  KD_CHECK(threads >= 1, "teacher cache verifier: ", threads, " threads, need at least 1");
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

ShardVerifier::~ShardVerifier() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ShardVerifier::ahead(const std::vector<int64_t>& windows) {
  std::vector<int64_t> shards;
  std::unordered_set<int64_t> listed;
  for (int64_t w : windows) {
    const int64_t s = cache_.shard_of(w);
    if (listed.insert(s).second && !cache_.shard_verified(s)) shards.push_back(s);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shards_ = std::move(shards);
    next_ = 0;
  }
  cv_.notify_all();
}

void ShardVerifier::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return next_ == shards_.size() && busy_ == 0; });
}

// Threads take shards from the list under mutex_; the cache's claim
// (verify_if_free) then skips one the reader or another thread took first.
void ShardVerifier::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || next_ < shards_.size(); });
    if (stop_) return;
    const int64_t shard = shards_[next_++];
    ++busy_;
    lock.unlock();
    cache_.verify_if_free(shard, true);
    lock.lock();
    --busy_;
    cv_.notify_all();
  }
}

}  // namespace kdtrain::data
