#include "backend/backend.h"
#include "core/error.h"

#ifdef KDTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_probe.h"
#endif

namespace kdtrain {

std::unique_ptr<Backend> make_cpu_backend(int64_t threads);  // backend/cpu/cpu_backend.cpp
#ifdef KDTRAIN_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(AttentionForward attention_forward,
                                           AttentionBackward attention_backward);  // src/backend/cuda/cuda_backend.cu
#endif

bool cuda_available() {
#ifdef KDTRAIN_HAVE_CUDA
  return cuda::device_present();
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(Device device, int64_t threads, AttentionForward attention_forward,
                                      AttentionBackward attention_backward) {
  if (device == Device::cpu) return make_cpu_backend(threads);  // one attention implementation
  (void)attention_forward;  // read by the CUDA backend only
  (void)attention_backward;
#ifdef KDTRAIN_HAVE_CUDA
  KD_CHECK(cuda::device_present(), "train.device=cuda: no CUDA device is visible");
  return make_cuda_backend(attention_forward, attention_backward);
#else
  fail("train.device=cuda: this kdtrain was built without CUDA (configure with -DKDTRAIN_CUDA=ON)");
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device, int64_t threads) {
  return make_backend(parse_choice<Device>(device), threads);
}

}  // namespace kdtrain
