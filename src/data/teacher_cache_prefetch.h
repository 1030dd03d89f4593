// Reads the next micro-batch's cache rows while the current one computes: one
// background thread decodes (and validates, and sums the checksum of a shard
// not summed yet) the windows of the last request, so the step finds them ready. On
// a backend with an upload lane (CUDA, backend/upload_lane.h) the thread also
// uploads them, from pinned memory on a stream of its own, into the slot the
// step is not reading; the step's queue waits for that copy on the device.
// The step's hook is two calls per micro-batch: take(these windows), then
// request(the next micro-batch's windows); and once per step verify_ahead(the
// windows of the steps after), whose shards verifier threads sum before
// their first read (data/teacher_cache_verifier.h).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/upload_lane.h"
#include "data/sampler.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_verifier.h"

namespace kdtrain::data {

class CachePrefetcher {
 public:
  // Host rows, handed over by value (the CPU backend). `verify_threads`: the
  // verifier's threads (ShardVerifier, verify_threads()).
  explicit CachePrefetcher(const TeacherCache& cache, int verify_threads = 1);
  // Rows of up to max_windows windows per take, uploaded to `backend`'s memory
  // where it has an upload lane (take's rows are then CachedRows::device, valid
  // until the next take), else host rows as above.
  CachePrefetcher(const TeacherCache& cache, Backend& backend, int64_t max_windows, int verify_threads = 1);
  // The same through a given lane (null: host rows); tests pass a fake device.
  CachePrefetcher(const TeacherCache& cache, std::unique_ptr<UploadLane> lane, int64_t max_windows,
                  int verify_threads = 1);
  ~CachePrefetcher();  // waits for the read in flight, then stops the thread
  CachePrefetcher(const CachePrefetcher&) = delete;
  CachePrefetcher& operator=(const CachePrefetcher&) = delete;

  // Starts reading `windows` in the background; replaces a request not yet
  // taken. An empty list asks for nothing.
  void request(const std::vector<int64_t>& windows);
  // The rows of `windows`, in order: the request's when it was for these windows
  // (waiting for it to finish), else read now (with a lane, a request for other
  // windows is then dropped). An error of the background read is thrown here, by
  // the step that needs the rows. With a lane, this take hands the previous
  // take's slot back: the step's work queued so far is its last use.
  CachedRows take(const std::vector<int64_t>& windows);

  // Windows read after the request, in order: their shards are summed ahead by
  // the verifier's threads (ShardVerifier::ahead).
  void verify_ahead(const std::vector<int64_t>& windows) { verifier_.ahead(windows); }
  void wait_verified_ahead() { verifier_.wait_idle(); }  // tests
  int verify_threads() const { return verifier_.threads(); }

  // Bytes of one slot for max_windows windows of `cache`: ids, log-probs, tails.
  static size_t slot_bytes(const CacheHeader& h, int64_t max_windows);

  int64_t hits() const { return hits_; }      // takes served by a request
  int64_t misses() const { return misses_; }  // takes read on the spot
  bool uploads() const { return lane_ != nullptr; }  // the rows are uploaded (CachedRows::device)

 private:
  void run();
  // Sums the checksums of the windows' shards no thread has summed or is summing,
  // before decoding waits for any the verifier is summing.
  void verify_free_shards(const std::vector<int64_t>& windows) const;
  CachedRows read(const std::vector<int64_t>& windows) const;
  // Decodes `windows` into the lane's slot and uploads them (reader thread, or
  // the step's on-the-spot read while the reader is idle).
  CachedRows fill(int slot, const std::vector<int64_t>& windows) const;
  CachedRows read_into(int slot, const std::vector<int64_t>& windows) const {
    return lane_ ? fill(slot, windows) : read(windows);
  }
  void hand_out(int slot);  // step thread: release the slot held, acquire `slot`
  int free_slot() const { return handed_out_ == 0 ? 1 : 0; }  // the slot the step does not hold

  const TeacherCache& cache_;
  ShardVerifier verifier_;
  std::unique_ptr<UploadLane> lane_;  // null: host rows
  int64_t max_windows_ = 0;
  int handed_out_ = -1;               // the slot the step reads (lane), -1 none; under mutex_
  int ready_slot_ = -1;               // the slot ready_ was uploaded to
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

// The windows this rank reads in the `steps` steps after the sampler's
// position, in order, as far as the epoch's order goes, less those `requested`
// (the reader is reading them): the verifier's list.
std::vector<int64_t> windows_ahead(const Sampler& sampler, int64_t global_batch, int64_t steps, int rank, int world,
                                   const std::vector<int64_t>& requested);

}  // namespace kdtrain::data
