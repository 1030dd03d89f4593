#include "backend/host_dtype.h"

namespace kdtrain {

void round_to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i]);
}

}  // namespace kdtrain
