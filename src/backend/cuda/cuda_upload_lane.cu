// The upload lane on a CUDA device (backend/upload_lane.h): a stream of its own
// for the copies, pinned host slots, device slots from the backend, and per slot
// two events: `uploaded` (the lane's copy of the slot, which the compute stream
// waits on) and `released` (the compute work that last read the slot, which the
// lane's next copy into it waits on). No call here blocks the compute stream's
// host thread; begin_fill blocks the reader thread only while the slot's last
// copy is still reading its host memory.
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/upload_lane.h"
#include "kernels/cuda_check.cuh"

namespace kdtrain {

namespace {

class CudaUploadLane final : public UploadLane {
 public:
  CudaUploadLane(Backend& backend, size_t bytes)
      : backend_(backend), bytes_(bytes), compute_(static_cast<cudaStream_t>(backend.native_stream())) {
    // The reader thread's CUDA calls go to this thread's device (a rank's GPU).
    CUDA_CHECK(cudaGetDevice(&device_id_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (int s = 0; s < kSlots; ++s) {
      CUDA_CHECK(cudaHostAlloc(&host_[s], bytes_, cudaHostAllocDefault));
      device_[s] = backend_.alloc(bytes_);
      CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_[s], cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&released_[s], cudaEventDisableTiming));
      // alloc zeroes the slot on the compute stream: the first copy into it waits for that.
      release(s);
    }
  }

  ~CudaUploadLane() override {
    // Destructors must not throw: errors here are ignored.
    cudaStreamSynchronize(stream_);
    for (int s = 0; s < kSlots; ++s) {
      if (device_[s]) backend_.release(device_[s]);  // waits for the compute stream
      if (host_[s]) cudaFreeHost(host_[s]);
      if (uploaded_[s]) cudaEventDestroy(uploaded_[s]);
      if (released_[s]) cudaEventDestroy(released_[s]);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  size_t slot_bytes() const override { return bytes_; }
  void* host(int slot) const override { return host_[slot]; }
  void* device(int slot) const override { return device_[slot]; }

  void begin_fill(int slot) override {
    CUDA_CHECK(cudaSetDevice(device_id_));
    CUDA_CHECK(cudaEventSynchronize(uploaded_[slot]));  // the last copy has read host(slot)
    CUDA_CHECK(cudaStreamWaitEvent(stream_, released_[slot], 0));
  }
  void upload(int slot, size_t bytes) override {
    KD_CHECK(bytes <= bytes_, "upload lane: ", bytes, " bytes for a slot of ", bytes_);
    CUDA_CHECK(cudaMemcpyAsync(device_[slot], host_[slot], bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(uploaded_[slot], stream_));
  }
  void acquire(int slot) override { CUDA_CHECK(cudaStreamWaitEvent(compute_, uploaded_[slot], 0)); }
  void release(int slot) override { CUDA_CHECK(cudaEventRecord(released_[slot], compute_)); }

 private:
  Backend& backend_;
  size_t bytes_;
  cudaStream_t compute_;
  int device_id_ = 0;
  cudaStream_t stream_ = nullptr;
  void* host_[kSlots] = {nullptr, nullptr};
  void* device_[kSlots] = {nullptr, nullptr};
  cudaEvent_t uploaded_[kSlots] = {nullptr, nullptr};
  cudaEvent_t released_[kSlots] = {nullptr, nullptr};
};

}  // namespace

std::unique_ptr<UploadLane> make_cuda_upload_lane(Backend& backend, size_t slot_bytes) {
  return std::make_unique<CudaUploadLane>(backend, slot_bytes);
}

}  // namespace kdtrain
