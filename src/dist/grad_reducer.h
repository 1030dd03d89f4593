// Bucketed gradient reduction, overlapped with the backward pass.
//
// The gradient arena is cut into buckets of about `bucket_elements`, from its
// end to its start: the order in which the backward finishes gradients
// (Model::set_grads_final_hook: lm_head, final norm, layers L-1 .. 0, the
// embedding). A bucket is launched as soon as every element of it is final,
// and buckets are launched strictly in that fixed order, so every rank issues
// the same collectives in the same order. With overlap off the same buckets
// are launched after the backward: the calls, and so the results, are the
// same bits either way (the MPI transport sums each element over ranks in rank
// order whatever the buckets; NCCL is handed identical calls).
//
// Each bucket's collective is a reduce-scatter under the ZeRO-1 ownership:
// after finish(), element i of a launched bucket holds the sum over ranks on
// the rank that owns i (shard_range(n, r, W)); the rest is unspecified.
//
//   GradReducer reducer(comm, grads, n, options, backend.native_stream());
//   reducer.begin_step();                                   // before the last micro-batch's backward
//   model.set_grads_final_hook([&](int64_t b, int64_t e) { reducer.mark_final(b, e); });
//   ... loss, backward ...
//   reducer.finish();                                       // launches the rest, waits for all
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace kdtrain::dist {

// Buckets over [0, n): contiguous, in launch order (from the end of the arena
// to its start), each of at most `bucket_elements` (at least 64) elements,
// with every boundary a multiple of 64 elements. A fixed function of its inputs.
std::vector<Range> plan_buckets(int64_t n, int64_t bucket_elements);

// Bytes of fp32 gradients per bucket (dist.bucket_mb MiB) -> elements.
int64_t bucket_elements_for_mib(double mib);

// The transport of one communicator: launches a bucket's reduce-scatter
// without waiting for it. Made by Communicator::make_bucket_transport.
class BucketTransport {
 public:
  virtual ~BucketTransport() = default;
  // Starts the reduce-scatter of data[bucket] (every rank, same buckets, same
  // order). On CUDA it is ordered after the work queued so far on the compute
  // stream given at creation.
  virtual void start(const Range& bucket) = 0;
  // Advances started buckets without blocking (MPI's non-blocking collectives
  // progress only inside MPI calls).
  virtual void poll() = 0;
  // Blocks, under the collective watchdog, until every started bucket is
  // complete; then data[bucket ∩ own shard] holds the sums. The next start()
  // may reuse the buffers.
  virtual void wait_all() = 0;
};

struct GradReduceOptions {
  int64_t bucket_elements = int64_t{100} << 18;  // 100 MiB of fp32 (dist.bucket_mb)
  bool overlap = true;    // launch buckets during the backward (false: after it)
  bool bf16 = false;      // send bf16, accumulate in fp32 (dist.reduce_dtype)
};

class GradReducer {
 public:
  GradReducer(Communicator& comm, float* grads, int64_t n, const GradReduceOptions& options,
              void* compute_stream);

  const std::vector<Range>& buckets() const { return buckets_; }
  bool overlap() const { return options_.overlap; }

  // Called with each bucket, in launch order, just before it is launched
  // (tests inject faults and NaNs there: train/observer.h).
  void set_before_launch(std::function<void(const Range&)> hook) { before_launch_ = std::move(hook); }

  // Starts a step: no bucket launched, no element final.
  void begin_step();
  // Elements [begin, end) are final for this step. With overlap, launches
  // every bucket that became complete, in order, and polls the ones in flight.
  void mark_final(int64_t begin, int64_t end);
  // Launches the buckets not yet launched, in order, and waits for all.
  void finish();

 private:
  void launch_ready();
  void launch(size_t index);

  Communicator& comm_;
  int64_t n_;
  GradReduceOptions options_;
  std::vector<Range> buckets_;
  std::vector<int64_t> final_count_;  // per bucket: elements marked final this step
  size_t next_ = 0;                   // first bucket not yet launched
  std::unique_ptr<BucketTransport> transport_;
  std::function<void(const Range&)> before_launch_;
};

}  // namespace kdtrain::dist
