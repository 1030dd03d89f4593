// The kernel timer's CUDA side (core/kernel_timer.h): marks are CUDA events recorded on
// the launch's stream. A launch site wraps its launch in timed_launch(); while timing is
// off that is one branch, and no event is created or recorded.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "core/kernel_timer.h"

namespace kdtrain::cuda {

// The process's event marks, created on first use (kernel_timer.cu).
KernelMarks& cuda_event_marks();

// Runs `launch` (launches on `stream`), timed under `name` while kernel timing is on.
template <typename Launch>
void timed_launch(const char* name, cudaStream_t stream, Launch&& launch) {
  timed(name, static_cast<void*>(stream), cuda_event_marks, std::forward<Launch>(launch));
}

}  // namespace kdtrain::cuda
