// The Hopper (sm_90a, wgmma) build of the attention backward's main kernel, for
// flash_backward.cu's launch sequence, which runs every other kernel of the backward
// (preprocessing, scans, bwd_finalize) as for the mma.sync build. Defined in
// flash_backward_sm90a.cu, compiled only when the build has the sm_90a target (CMake
// KDTRAIN_CUDA_SM90A, which defines KDTRAIN_HAVE_SM90A).
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/flash_backward_args.h"

namespace kdtrain::cuda {

// Launches bwd_main with kWgmma on `blocks` work items (head dims 64 and 128, affine or
// not); `atomic` must be the build's flash::kBwdAtomicDq (both files see the same option).
void launch_flash_backward_main_sm90a(const flash::BwdArgs& a, int64_t blocks, bool atomic, cudaStream_t stream);

}  // namespace kdtrain::cuda
