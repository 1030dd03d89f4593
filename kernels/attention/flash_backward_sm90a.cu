// The attention backward's main kernel on Hopper (sm_90a): bwd_main with kWgmma
// (flash_backward_kernel.cuh, steps in flash_backward_wgmma.cuh), its __global__ wrapper
// and launch. Built only for sm_90a (CMake KDTRAIN_CUDA_SM90A); flash_backward.cu calls it
// in its launch sequence when backend/cuda/attention_path.h's
// choose_flash_backward_kernel says so.
#include "kernels/attention/flash_backward_kernel.cuh"
#include "kernels/attention/flash_backward_sm90a.h"
#include "kernels/cuda_check.cuh"

namespace kdtrain::cuda {
namespace {

// One block per SM (registers and shared memory: docs/flash_attention_backward.md), hence the 1;
// the deterministic build's ninth warp writes dq (flash_backward_dq_warp.cuh).
constexpr int kThreads = flash::bwd_main_threads(true, flash::kBwdAtomicDq);

template <int D, bool kAffine>
__global__ void __launch_bounds__(kThreads, 1)
    bwd_main_sm90a_kernel(const __grid_constant__ flash::BwdArgs a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  flash_bwd::bwd_main<D, kAffine, flash::kBwdAtomicDq, true>(a, smem);
}

template <int D, bool kAffine>
void launch(const flash::BwdArgs& a, int64_t blocks, cudaStream_t stream) {
  using L = flash_bwd::MainLayout<D, kAffine>;
  constexpr size_t bytes = flash::kBwdAtomicDq ? L::kBytes : L::kBytesTwoDq;  // the writer warp's second buffer
  auto kernel = bwd_main_sm90a_kernel<D, kAffine>;
  static const bool opted_in = [&] {  // once per instantiation and process
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    return true;
  }();
  (void)opted_in;
  if (blocks > 0x7fffffff) fail("flash attention backward (sm_90a): ", blocks, " blocks exceed the grid limit");
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_flash_backward_main_sm90a(const flash::BwdArgs& a, int64_t blocks, bool atomic, cudaStream_t stream) {
  KD_CHECK(atomic == flash::kBwdAtomicDq, "flash attention backward (sm_90a): built with KDTRAIN_ATTN_ATOMIC_DQ ",
           flash::kBwdAtomicDq ? "on" : "off", ", asked for the other dq accumulation");
  KD_CHECK(a.p.D == 64 || a.p.D == 128, "flash attention backward (sm_90a): head dim ", a.p.D,
           " (the wgmma backward takes 64 and 128)");
  if (a.p.affine) {
    if (a.p.D == 64) launch<64, true>(a, blocks, stream);
    else launch<128, true>(a, blocks, stream);
  } else {
    if (a.p.D == 64) launch<64, false>(a, blocks, stream);
    else launch<128, false>(a, blocks, stream);
  }
}

}  // namespace kdtrain::cuda
