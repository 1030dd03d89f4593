// Error checking for CUDA runtime calls and kernel launches. A failure becomes a
// kdtrain::Error naming the call, the CUDA error and the source location, so the
// CLI reports it like any other bad input instead of crashing later on a
// poisoned context.
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

// Wraps a cudaError_t-returning expression.
#define CUDA_CHECK(expr)                                                                 \
  do {                                                                                   \
    const cudaError_t kd_cuda_status_ = (expr);                                          \
    if (kd_cuda_status_ != cudaSuccess)                                                  \
      ::kdtrain::fail("CUDA error ", cudaGetErrorName(kd_cuda_status_), " (",            \
                      cudaGetErrorString(kd_cuda_status_), ") in ", #expr, " at ",       \
                      __FILE__, ":", __LINE__);                                          \
  } while (0)

// After a <<<...>>> launch: catches bad launch configurations right away.
// Asynchronous faults inside the kernel surface at the next synchronising call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
