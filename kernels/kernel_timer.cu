// CUDA events as the kernel timer's marks (kernels/kernel_timer.cuh).
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/kernel_timer.cuh"

namespace kdtrain::cuda {
namespace {

// A pool of events reused after each collect(): a timed run creates as many as one
// collect() interval brackets, once.
class CudaEventMarks final : public KernelMarks {
 public:
  int record(void* stream) override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], static_cast<cudaStream_t>(stream)));
    return static_cast<int>(used_++);
  }
  double elapsed_ms(int from, int to) override {
    CUDA_CHECK(cudaEventSynchronize(events_.at(static_cast<size_t>(to))));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(static_cast<size_t>(from)), events_.at(static_cast<size_t>(to))));
    return ms;
  }
  void release_all() override { used_ = 0; }

 private:
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

KernelMarks& cuda_event_marks() {
  // Never destroyed: the CUDA context may be gone before static destructors run.
  static CudaEventMarks* marks = new CudaEventMarks;
  return *marks;
}

}  // namespace kdtrain::cuda
