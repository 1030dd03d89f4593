// training_path_refusal (backend.h): the CPU trains any shape; CUDA trains what the fused
// attention kernels take, a rule whose one home is backend/cuda/attention_path.h (plain
// C++, so this file builds without CUDA too).
#include "backend/backend.h"
#include "backend/cuda/attention_path.h"

namespace kdtrain {

std::string training_path_refusal(Device device, const AttentionShape& shape) {
  if (device != Device::cuda) return "";
  const char* why = cuda::training_path_refusal(shape);
  return why != nullptr ? why : "";
}

}  // namespace kdtrain
