// Fused causal attention forward on Hopper (sm_90a, wgmma): the __global__ wrapper
// around flash_forward_sm90a_kernel.cuh (also run by the host emulator in tests) and
// its launch. Built only for sm_90a (CMake option KDTRAIN_CUDA_SM90A: its own target,
// -gencode arch=compute_90a,code=sm_90a); flash_forward.cu prepares the arguments and
// calls it when backend/cuda/attention_path.h's choose_flash_forward_kernel says so.
#include "kernels/attention/flash_forward_sm90a.h"
#include "kernels/attention/flash_forward_sm90a_kernel.cuh"
#include "kernels/cuda_check.cuh"

namespace kdtrain::cuda {
namespace {

using L = flash::ForwardSm90a<kFlashForwardSm90aHeadDim>;

// One block of two warpgroups per SM at most (160 KB of shared memory), so the
// register cap of 255 per thread is the compiler's to use.
template <bool kSink, bool kAffine>
__global__ void __launch_bounds__(L::kThreads, 1) flash_forward_sm90a_kernel(const __grid_constant__ flash::ForwardArgs args) {
  extern __shared__ __align__(1024) unsigned char smem[];
  flash::flash_forward_sm90a_block<kFlashForwardSm90aHeadDim, L::Bc, L::kWarpgroups, kSink, kAffine>(args, smem);
}

template <bool kSink, bool kAffine>
void launch(const flash::ForwardArgs& args, cudaStream_t stream) {
  auto kernel = flash_forward_sm90a_kernel<kSink, kAffine>;
  static const bool attribute_set = [&] {  // once per instantiation, not per launch
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
    return true;
  }();
  (void)attribute_set;
  const int64_t blocks = flash::forward_blocks(args.p, L::kBr);
  if (blocks > 0x7fffffff) fail("flash attention (sm_90a): ", blocks, " blocks exceed the grid limit");
  kernel<<<static_cast<unsigned>(blocks), L::kThreads, L::kSmemBytes, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_flash_forward_sm90a(const flash::ForwardArgs& args, bool sink, bool affine, cudaStream_t stream) {
  KD_CHECK(args.p.D == kFlashForwardSm90aHeadDim, "flash attention (sm_90a): head dim ", args.p.D, " (the wgmma forward takes ",
           kFlashForwardSm90aHeadDim, ")");
  flash::flash_dispatch(sink, affine, [&](auto flags) {
    using F = decltype(flags);
    launch<F::kSink, F::kAffine>(args, stream);
  });
}

}  // namespace kdtrain::cuda
