// Host-to-device copies on a queue of their own, so that a reader thread moves
// the next micro-batch's inputs to the device while the compute queue runs the
// current one, and the compute queue waits for them on the device, never the
// host (docs/distillation.md, "Reading during training"). Two slots, each a
// pinned host buffer and a device buffer of slot_bytes(): the one the step
// reads and the one being filled.
//
// A slot passes between the two threads in this order, again and again:
//   reader: begin_fill(s)  the host waits until s's last upload has read its
//                          host memory; s's next upload will wait (on the
//                          device) for the compute work released with s
//           writes host(s), then upload(s, bytes)
//   step:   acquire(s)     the compute queue waits for that upload
//           queues the work that reads device(s), then release(s)
// The caller orders the threads (data/teacher_cache_prefetch.h does, under its
// mutex): a slot is never filled between its acquire and its release.
#pragma once
#include <cstddef>
#include <memory>

namespace kdtrain {

class Backend;

class UploadLane {
 public:
  static constexpr int kSlots = 2;
  virtual ~UploadLane() = default;
  virtual size_t slot_bytes() const = 0;
  virtual void* host(int slot) const = 0;    // pinned host memory, slot_bytes()
  virtual void* device(int slot) const = 0;  // backend memory, slot_bytes()

  // Reader thread.
  virtual void begin_fill(int slot) = 0;
  virtual void upload(int slot, size_t bytes) = 0;  // host(slot) -> device(slot), asynchronous
  // Step thread.
  virtual void acquire(int slot) = 0;
  virtual void release(int slot) = 0;
};

// A lane on `backend`'s device (CUDA: src/backend/cuda/cuda_upload_lane.cu), or
// null where the backend's memory is host memory: the CPU reads host rows in
// place, there is no copy to overlap. Made and destroyed on the thread that
// drives the backend, before the backend is destroyed.
std::unique_ptr<UploadLane> make_upload_lane(Backend& backend, size_t slot_bytes);

}  // namespace kdtrain
