// The Hopper (sm_90a, wgmma) attention forward's launch, for flash_forward.cu, which
// hands it the same arguments as the mma.sync forward (flash.cuh's contract).
// Defined in flash_forward_sm90a.cu, compiled only when the build has the sm_90a target
// (CMake KDTRAIN_CUDA_SM90A, which defines KDTRAIN_HAVE_SM90A).
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/params.h"

namespace kdtrain::cuda {

// Launches a wgmma forward (head dims 64 and 128) on the call's params and, for affine,
// the prefix sums of v (flash_forward.cu's workspace): the warp-specialised kernel, or
// with `lockstep` the first one (flash_forward_kernels.h).
void launch_flash_forward_sm90a(const flash::AttentionParams& p, const float* prefix, cudaStream_t stream,
                                bool lockstep);

}  // namespace kdtrain::cuda
