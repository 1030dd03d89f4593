// The cache rows' background reader (data/teacher_cache_prefetch.h).
#include "data/teacher_cache_prefetch.h"

#include <utility>

namespace kdtrain::data {

CachePrefetcher::CachePrefetcher(const TeacherCache& cache) : cache_(cache), thread_([this] { run(); }) {}

CachePrefetcher::~CachePrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CachedRows CachePrefetcher::read(const std::vector<int64_t>& windows) const {
  CachedRows rows;
  for (int64_t w : windows) cache_.append_window(w, rows);
  return rows;
}

void CachePrefetcher::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || pending_; });
    if (stop_) return;
    std::vector<int64_t> windows = std::move(wanted_);
    pending_ = false;
    busy_ = true;
    lock.unlock();
    CachedRows rows;
    std::exception_ptr error;
    try {
      rows = read(windows);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    ready_windows_ = std::move(windows);
    ready_ = std::move(rows);
    error_ = error;
    cv_.notify_all();
  }
}

void CachePrefetcher::request(const std::vector<int64_t>& windows) {
  if (windows.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wanted_ = windows;
    pending_ = true;
  }
  cv_.notify_all();
}

CachedRows CachePrefetcher::take(const std::vector<int64_t>& windows) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool requested = (pending_ && wanted_ == windows) || busy_ || ready_windows_ == windows;
  if (requested) {
    cv_.wait(lock, [&] { return !busy_ && !(pending_ && wanted_ == windows); });
    if (ready_windows_ == windows) {
      ready_windows_.clear();
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      ++hits_;
      return std::move(ready_);
    }
  }
  ++misses_;
  lock.unlock();
  return read(windows);
}

std::vector<int64_t> next_micro_windows(const Sampler& sampler, const std::vector<int64_t>& windows, int64_t micro,
                                        int64_t micro_batch, int64_t global_batch, int rank, int world) {
  const auto first = [&](const std::vector<int64_t>& w, int64_t m) {
    return std::vector<int64_t>(w.begin() + m * micro_batch, w.begin() + (m + 1) * micro_batch);
  };
  if ((micro + 2) * micro_batch <= static_cast<int64_t>(windows.size())) return first(windows, micro + 1);
  const std::vector<int64_t> next = sampler.peek_global_batch(global_batch);
  if (next.empty()) return {};
  return first(rank_slice(next, rank, world), 0);
}

}  // namespace kdtrain::data
