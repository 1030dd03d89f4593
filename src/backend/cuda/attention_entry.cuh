// The one attention entry of the CUDA side. CudaBackend hands it backend.h's
// arguments; it translates them once into flash::AttentionParams (params.h),
// resolving the variant into its features, asks choose_attention_path
// (backend/cuda/attention_path.h) which implementation runs, and launches it with the
// workspace the backend provides.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/attention/params.h"
#include "backend/cuda/attention_path.h"
#include "backend/backend.h"

namespace kdtrain::cuda {

enum class AttentionPass { forward, backward };

// The translation (and the checks of the variant's inputs), once per call.
flash::AttentionParams attention_params(const AttentionForwardArgs& args);
flash::AttentionParams attention_params(const AttentionBackwardArgs& args);

// The path this call takes: the shape rule plus the alignment of its buffers.
AttentionPathChoice attention_path(const flash::AttentionParams& p);

// Device workspace the chosen implementation needs for this pass (may be 0).
size_t attention_workspace_bytes(const flash::AttentionParams& p, AttentionPass pass, AttentionPath path);

// The fused forward's kernel on the current device (choose_flash_forward_kernel with
// its compute capability and this build), asked once when the backend is built.
FlashForwardKernel flash_forward_kernel_here(AttentionForward request);
// The fused backward's main kernel, likewise (choose_flash_backward_kernel).
FlashBackwardKernel flash_backward_kernel_here(AttentionBackward request);

// The fused path's kernels of one backend.
struct FlashKernels {
  FlashForwardKernel forward = FlashForwardKernel::mma_sync;
  FlashBackwardKernel backward = FlashBackwardKernel::mma_sync;
};

// Launches `pass` on `path` (the fused path on `kernels`); `workspace` holds
// attention_workspace_bytes() bytes.
void attention_run(const flash::AttentionParams& p, AttentionPass pass, AttentionPath path, FlashKernels kernels,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace kdtrain::cuda
