// The Hopper (sm_90a, wgmma) attention forward's launch, for flash_forward.cu, which
// prepares its arguments exactly as for the mma.sync forward (flash.cuh's contract).
// Defined in flash_forward_sm90a.cu, compiled only when the build has the sm_90a target
// (CMake KDTRAIN_CUDA_SM90A, which defines KDTRAIN_HAVE_SM90A).
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/flash_forward_kernel.cuh"

namespace kdtrain::cuda {

// Launches the wgmma forward (head dims 64 and 128) on prepared arguments.
void launch_flash_forward_sm90a(const flash::ForwardArgs& args, bool sink, bool affine, cudaStream_t stream);

}  // namespace kdtrain::cuda
