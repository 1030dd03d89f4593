#include "data/teacher_cache_verifier.h"

#include <unordered_set>

namespace kdtrain::data {

ShardVerifier::ShardVerifier(const TeacherCache& cache) : cache_(cache), thread_([this] { run(); }) {}

ShardVerifier::~ShardVerifier() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
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
  cv_.wait(lock, [this] { return next_ == shards_.size() && !busy_; });
}

void ShardVerifier::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || next_ < shards_.size(); });
    if (stop_) return;
    const int64_t shard = shards_[next_++];
    busy_ = true;
    lock.unlock();
    cache_.verify_if_free(shard, true);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace kdtrain::data
