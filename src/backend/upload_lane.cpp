#include "backend/upload_lane.h"

#include "backend/backend.h"

namespace kdtrain {

#ifdef KDTRAIN_HAVE_CUDA
std::unique_ptr<UploadLane> make_cuda_upload_lane(Backend& backend, size_t slot_bytes);  // cuda/cuda_upload_lane.cu
#endif

std::unique_ptr<UploadLane> make_upload_lane(Backend& backend, size_t slot_bytes) {
#ifdef KDTRAIN_HAVE_CUDA
  // A backend with a queue of its own is the CUDA one (backend.h: native_stream).
  if (backend.native_stream() != nullptr) return make_cuda_upload_lane(backend, slot_bytes);
#endif
  (void)backend;
  (void)slot_bytes;
  return nullptr;
}

}  // namespace kdtrain
