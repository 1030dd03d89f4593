// Reads the next micro-batch's cache rows while the current one computes: one
// background thread decodes (and validates, and on a shard's first read
// verifies) the windows of the last request, so the step finds them ready.
// The step's hook is two calls per micro-batch: take(these windows), then
// request(the next micro-batch's windows).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/sampler.h"
#include "data/teacher_cache.h"

namespace kdtrain::data {

class CachePrefetcher {
 public:
  explicit CachePrefetcher(const TeacherCache& cache);
  ~CachePrefetcher();  // waits for the read in flight, then stops the thread
  CachePrefetcher(const CachePrefetcher&) = delete;
  CachePrefetcher& operator=(const CachePrefetcher&) = delete;

  // Starts reading `windows` in the background; replaces a request not yet
  // taken. An empty list asks for nothing.
  void request(const std::vector<int64_t>& windows);
  // The rows of `windows`, in order: the request's when it was for these windows
  // (waiting for it to finish), else read now. An error of the background read
  // is thrown here, by the step that needs the rows.
  CachedRows take(const std::vector<int64_t>& windows);

  int64_t hits() const { return hits_; }      // takes served by a request
  int64_t misses() const { return misses_; }  // takes read on the spot

 private:
  void run();
  CachedRows read(const std::vector<int64_t>& windows) const;

  const TeacherCache& cache_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int64_t> wanted_;  // the pending request
  bool pending_ = false, busy_ = false, stop_ = false;
  std::vector<int64_t> ready_windows_;
  CachedRows ready_;
  std::exception_ptr error_;
  int64_t hits_ = 0, misses_ = 0;
  std::thread thread_;
};

// The windows this rank's step reads after micro-batch `micro` of its `windows`
// (micro-batches of `micro_batch`): the next micro-batch's, or after the last one
// the next step's first (from the sampler, without drawing), or none when the
// sampler cannot tell yet.
std::vector<int64_t> next_micro_windows(const Sampler& sampler, const std::vector<int64_t>& windows, int64_t micro,
                                        int64_t micro_batch, int64_t global_batch, int rank, int world);

}  // namespace kdtrain::data
