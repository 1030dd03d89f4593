// Fused causal attention forward on Hopper (sm_90a, wgmma): the __global__ wrappers around
// the warp-specialised kernel (flash_forward_sm90a_ws_kernel.cuh) and the lockstep one
// (flash_forward_sm90a_kernel.cuh), both also run by the host emulator in tests, and their
// launch. Built only for sm_90a (CMake option KDTRAIN_CUDA_SM90A: its own target,
// -gencode arch=compute_90a,code=sm_90a); flash_forward.cu prepares the arguments and
// calls it when backend/cuda/attention_path.h's choose_flash_forward_kernel says so.
#include "kernels/attention/flash_forward_sm90a.h"
#include "kernels/attention/flash_forward_sm90a_kernel.cuh"
#include "kernels/attention/flash_forward_sm90a_ws_kernel.cuh"
#include "kernels/attention/flash_tiles.h"
#include "kernels/cuda_check.cuh"

namespace kdtrain::cuda {
namespace {

// One block per SM at most (160 KB of shared memory at D 128; the registers at D 64), so
// the register cap of 255 per thread is the compiler's to use.
template <int D, bool kSink, bool kAffine>
__global__ void __launch_bounds__(flash::ForwardSm90a<D>::kThreads, 1)
    flash_forward_sm90a_kernel(const __grid_constant__ flash::AttentionParams p, const float* prefix) {
  using L = flash::ForwardSm90a<D>;
  extern __shared__ __align__(1024) unsigned char smem[];
  flash::flash_forward_sm90a_block<D, L::Bc, L::kWarpgroups, kSink, kAffine>(p, prefix, smem);
}

// Three warpgroups, one block per SM: ptxas starts every thread at 65,536 / 384 = 168
// registers, and setmaxnreg moves them from the producer to the consumers.
template <int D, bool kSink, bool kAffine>
__global__ void __launch_bounds__(flash::ForwardSm90aWs<D>::kThreads, 1)
    flash_forward_sm90a_ws_kernel(const __grid_constant__ flash::AttentionParams p, const float* prefix) {
  extern __shared__ __align__(1024) unsigned char smem[];
  flash::flash_forward_sm90a_ws_block<D, kSink, kAffine>(p, prefix, smem);
}

template <typename L, typename Kernel>
void launch_kernel(Kernel kernel, const flash::AttentionParams& p, const float* prefix, cudaStream_t stream) {
  static const bool attribute_set = [&] {  // once per instantiation, not per launch
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
    return true;
  }();
  (void)attribute_set;
  const int64_t blocks = flash::forward_blocks(p, L::kBr);
  if (blocks > 0x7fffffff) fail("flash attention (sm_90a): ", blocks, " blocks exceed the grid limit");
  kernel<<<static_cast<unsigned>(blocks), L::kThreads, L::kSmemBytes, stream>>>(p, prefix);
  CUDA_CHECK_LAUNCH();
}

template <int D, bool kSink, bool kAffine>
void launch(const flash::AttentionParams& p, const float* prefix, cudaStream_t stream, bool lockstep) {
  if (lockstep)
    launch_kernel<flash::ForwardSm90a<D>>(flash_forward_sm90a_kernel<D, kSink, kAffine>, p, prefix, stream);
  else
    launch_kernel<flash::ForwardSm90aWs<D>>(flash_forward_sm90a_ws_kernel<D, kSink, kAffine>, p, prefix, stream);
}

}  // namespace

void launch_flash_forward_sm90a(const flash::AttentionParams& p, const float* prefix, cudaStream_t stream,
                                bool lockstep) {
  KD_CHECK(p.D == 64 || p.D == 128, "flash attention (sm_90a): head dim ", p.D,
           " (the wgmma forward takes 64 and 128)");
  flash::flash_dispatch(p.sink, p.affine, [&](auto flags) {
    using F = decltype(flags);
    if (p.D == 64)
      launch<64, F::kSink, F::kAffine>(p, prefix, stream, lockstep);
    else
      launch<128, F::kSink, F::kAffine>(p, prefix, stream, lockstep);
  });
}

}  // namespace kdtrain::cuda
