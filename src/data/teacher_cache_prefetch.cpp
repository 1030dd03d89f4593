// The cache rows' background reader (data/teacher_cache_prefetch.h).
#include "data/teacher_cache_prefetch.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace kdtrain::data {

CachePrefetcher::CachePrefetcher(const TeacherCache& cache, int verify_threads)
    : CachePrefetcher(cache, nullptr, 0, verify_threads) {}

CachePrefetcher::CachePrefetcher(const TeacherCache& cache, Backend& backend, int64_t max_windows, int verify_threads)
    : CachePrefetcher(cache, make_upload_lane(backend, slot_bytes(cache.header(), max_windows)), max_windows,
                      verify_threads) {}

CachePrefetcher::CachePrefetcher(const TeacherCache& cache, std::unique_ptr<UploadLane> lane, int64_t max_windows,
                                 int verify_threads)
    : cache_(cache),
      verifier_(cache, verify_threads),
      lane_(std::move(lane)),
      max_windows_(max_windows),
      thread_([this] { run(); }) {}

CachePrefetcher::~CachePrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

size_t CachePrefetcher::slot_bytes(const CacheHeader& h, int64_t max_windows) {
  return static_cast<size_t>(max_windows * h.seq_len * (8 * h.K + 4));
}

void CachePrefetcher::verify_free_shards(const std::vector<int64_t>& windows) const {
  for (int64_t w : windows) cache_.verify_if_free(cache_.shard_of(w), false);
}

CachedRows CachePrefetcher::read(const std::vector<int64_t>& windows) const {
  verify_free_shards(windows);
  CachedRows rows;
  for (int64_t w : windows) cache_.append_window(w, rows);
  return rows;
}

// The slot holds, for n = windows x T rows: ids (n, K) int32, logp (n, K) f32,
// log_tail (n) f32, at the same offsets on the host and the device.
CachedRows CachePrefetcher::fill(int slot, const std::vector<int64_t>& windows) const {
  const CacheHeader& h = cache_.header();
  KD_CHECK(static_cast<int64_t>(windows.size()) <= max_windows_, "teacher cache reader: ", windows.size(),
           " windows asked for at once, its slots hold ", max_windows_);
  const int64_t T = h.seq_len, K = h.K, n = static_cast<int64_t>(windows.size()) * T;
  verify_free_shards(windows);
  lane_->begin_fill(slot);
  auto* ids = static_cast<int32_t*>(lane_->host(slot));
  float* logp = reinterpret_cast<float*>(ids + n * K);
  float* tail = logp + n * K;
  for (size_t i = 0; i < windows.size(); ++i)
    cache_.decode_window(windows[i], ids + i * T * K, logp + i * T * K, tail + i * T);
  lane_->upload(slot, static_cast<size_t>(n * (8 * K + 4)));
  CachedRows rows;
  rows.K = K;
  const auto* device_ids = static_cast<const int32_t*>(lane_->device(slot));
  rows.device.ids = device_ids;
  rows.device.logp = reinterpret_cast<const float*>(device_ids + n * K);
  rows.device.log_tail = rows.device.logp + n * K;
  rows.device.rows = n;
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
    const int slot = lane_ ? free_slot() : -1;
    lock.unlock();
    CachedRows rows;
    std::exception_ptr error;
    try {
      rows = read_into(slot, windows);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    ready_windows_ = std::move(windows);
    ready_ = std::move(rows);
    ready_slot_ = slot;
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

void CachePrefetcher::hand_out(int slot) {
  if (handed_out_ >= 0) lane_->release(handed_out_);
  lane_->acquire(slot);
  handed_out_ = slot;
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
      if (lane_) hand_out(ready_slot_);
      return std::move(ready_);
    }
  }
  ++misses_;
  if (!lane_) {
    lock.unlock();
    return read(windows);
  }
  // The reader is idle; with nothing pending it stays so while the free slot is
  // filled here (a pending request for other windows, and any ready rows, are
  // stale: the step asked for these).
  pending_ = false;
  ready_windows_.clear();
  error_ = nullptr;
  const int slot = free_slot();
  CachedRows rows = fill(slot, windows);
  hand_out(slot);
  return rows;
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

std::vector<int64_t> windows_ahead(const Sampler& sampler, int64_t global_batch, int64_t steps, int rank, int world,
                                   const std::vector<int64_t>& requested) {
  const std::vector<int64_t> next = sampler.peek_in_epoch(steps * global_batch);
  std::vector<int64_t> out;
  for (int64_t s = 0; (s + 1) * global_batch <= static_cast<int64_t>(next.size()); ++s) {
    const std::vector<int64_t> batch(next.begin() + s * global_batch, next.begin() + (s + 1) * global_batch);
    for (int64_t w : rank_slice(batch, rank, world))
      if (std::find(requested.begin(), requested.end(), w) == requested.end()) out.push_back(w);
  }
  return out;
}

}  // namespace kdtrain::data
