#include "dist/grad_reducer.h"

#include <algorithm>

#include "core/error.h"

namespace kdtrain::dist {

namespace {
constexpr int64_t kAlign = 64;  // as shard_range: 256 bytes of fp32
}

std::vector<Range> plan_buckets(int64_t n, int64_t bucket_elements) {
  KD_CHECK(n >= 0, "plan_buckets: negative arena size ", n);
  const int64_t size = std::max<int64_t>(kAlign, bucket_elements / kAlign * kAlign);
  std::vector<Range> buckets;
  // The first bucket takes the ragged end so every other boundary is a multiple of `size`.
  int64_t end = n;
  while (end > 0) {
    const int64_t begin = end % size == 0 ? end - size : end / size * size;
    buckets.push_back({begin, end});
    end = begin;
  }
  return buckets;
}

int64_t bucket_elements_for_mib(double mib) {
  KD_CHECK(mib > 0, "dist.bucket_mb must be > 0, got ", mib);
  return std::max<int64_t>(kAlign, static_cast<int64_t>(mib * 1024.0 * 1024.0 / sizeof(float)));
}

GradReducer::GradReducer(Communicator& comm, float* grads, int64_t n,
                         const GradReduceOptions& options, void* compute_stream)
    : comm_(comm), n_(n), options_(options), buckets_(plan_buckets(n, options.bucket_elements)),
      final_count_(buckets_.size(), 0),
      transport_(comm.make_bucket_transport(grads, n, options.bf16, compute_stream)) {
  // MPI and NCCL take element counts as int.
  KD_CHECK(options.bucket_elements < (int64_t{1} << 30), "dist.bucket_mb: buckets of ",
           options.bucket_elements, " elements are too large (at most 2^30 elements, 4 GiB)");
  next_ = buckets_.size();  // nothing to launch before begin_step()
}

void GradReducer::begin_step() {
  KD_CHECK(next_ == buckets_.size(), "GradReducer: begin_step() before the last step's finish()");
  std::fill(final_count_.begin(), final_count_.end(), 0);
  next_ = 0;
}

void GradReducer::mark_final(int64_t begin, int64_t end) {
  KD_CHECK(0 <= begin && begin <= end && end <= n_, "GradReducer: range [", begin, ", ", end,
           ") outside the arena of ", n_);
  for (size_t i = next_; i < buckets_.size(); ++i) {
    const int64_t lo = std::max(begin, buckets_[i].begin), hi = std::min(end, buckets_[i].end);
    if (lo < hi) final_count_[i] += hi - lo;
  }
  if (!options_.overlap) return;
  launch_ready();
  transport_->poll();
}

void GradReducer::finish() {
  while (next_ < buckets_.size()) launch(next_++);
  transport_->wait_all();
}

void GradReducer::launch_ready() {
  while (next_ < buckets_.size() && final_count_[next_] >= buckets_[next_].size()) launch(next_++);
}

void GradReducer::launch(size_t index) {
  if (before_launch_) before_launch_(buckets_[index]);
  transport_->start(buckets_[index]);
}

}  // namespace kdtrain::dist
