// The fused attention forward's kernels on CUDA, named once for the launcher
// (flash_forward.cu), the choice (src/backend/cuda/attention_path.h) and the logs.
// Plain C++: no CUDA header needed.
#pragma once

namespace kdtrain::cuda {

// mma_sync: sm_80 instructions, any GPU (flash_forward_kernel.cuh). wgmma_sm90a: Hopper's
// warp-specialised, pipelined kernel (flash_forward_sm90a_ws_kernel.cuh).
// wgmma_sm90a_lockstep: Hopper's first wgmma kernel, whose two warpgroups meet at block
// barriers twice per key tile (flash_forward_sm90a_kernel.cuh), kept to time against it.
enum class FlashForwardKernel { mma_sync, wgmma_sm90a, wgmma_sm90a_lockstep };

inline const char* to_string(FlashForwardKernel k) {
  switch (k) {
    case FlashForwardKernel::wgmma_sm90a: return "wgmma_sm90a";
    case FlashForwardKernel::wgmma_sm90a_lockstep: return "wgmma_sm90a_lockstep";
    case FlashForwardKernel::mma_sync: break;
  }
  return "mma_sync";
}

}  // namespace kdtrain::cuda
