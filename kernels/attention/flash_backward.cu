// Fused causal attention, backward: the __global__ wrappers and the launcher. The kernel
// bodies (flash_backward_prep.cuh, flash_backward_kernel.cuh) are shared with
// the SIMT emulator (steps: flash_backward_steps.cuh); the order of launches is flash_backward_sequence.h; the work
// order and its deadlock argument flash_backward_schedule.h; docs/flash_attention_backward.md
// has the rest, the CPU mirror that checks it included.
#include <cstdint>

#include "kernels/cuda_check.cuh"
#include "kernels/kernel_timer.cuh"
#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash_backward_kernel.cuh"
#include "kernels/attention/flash_backward_prep.cuh"
#include "kernels/attention/flash_backward_sequence.h"
#if KDTRAIN_HAVE_SM90A
#include "kernels/attention/flash_backward_sm90a.h"
#endif
#include "kernels/attention/prefix_scan.cuh"

namespace kdtrain::cuda {
namespace {

template <int D, bool kSink, bool kAffine>
__global__ void __launch_bounds__(flash_bwd::kPrepThreads)
    bwd_prep_kernel(const __grid_constant__ flash::BwdArgs a) {
  __shared__ __align__(16) unsigned char smem[flash_bwd::PrepLayout::kBytes];
  flash_bwd::bwd_prep<D, kSink, kAffine>(a, smem);
}

// One block per SM by design (registers: docs/flash_attention_backward.md), hence the 1.
template <int D, bool kAffine, bool kAtomic>
__global__ void __launch_bounds__(flash::kBwdThreads, 1) bwd_main_kernel(const __grid_constant__ flash::BwdArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  flash_bwd::bwd_main<D, kAffine, kAtomic>(a, smem);
}

// The fp32 dq accumulator to bf16 dq (and affine's dalpha), after the main kernel.
template <int D, bool kAffine>
__global__ void __launch_bounds__(flash::kBwdThreads) bwd_finalize_kernel(const __grid_constant__ flash::BwdArgs a) {
  flash_bwd::bwd_finalize<D, kAffine>(a);
}

dim3 grid_of(const flash::BwdGrid& g) {
  if (g.x > 0x7fffffff || g.y > 65535 || g.z > 65535)
    fail("flash attention backward: grid (", g.x, ", ", g.y, ", ", g.z, ") too large");
  return dim3(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y), static_cast<unsigned>(g.z));
}

// The main kernel's name in the kernel timer, as scripts/gpu/attention_model.py labels it.
template <bool kAtomic>
const char* main_kernel_name(bool wgmma_sm90a) {
  if (wgmma_sm90a) return kAtomic ? "bwd_main wgmma atomics" : "bwd_main wgmma";
  return kAtomic ? "bwd_main atomics" : "bwd_main";
}

// Each launch timed under its kernel's name while kernel timing is on (kernels/kernel_timer.cuh).
struct CudaLauncher {
  cudaStream_t stream;
  bool wgmma_sm90a = false;  // the main kernel's sm_90a build
  void zero(void* p, size_t bytes, const char* name) {
    timed_launch(name, stream, [&] { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream)); });
  }
  template <typename In>
  void scan(const flash::ScanArgs<In>& args) {  // the sequence's two scans: v forward, u reverse
    timed_launch(args.reverse ? "bwd u_scan" : "bwd v_scan", stream, [&] { prefix_scan(args, stream); });
  }
  template <int D, bool kSink, bool kAffine>
  void prep(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    timed_launch("bwd_prep", stream, [&] {
      bwd_prep_kernel<D, kSink, kAffine><<<grid_of(g), flash_bwd::kPrepThreads, 0, stream>>>(a);
      CUDA_CHECK_LAUNCH();
    });
  }
  template <int D, bool kAffine>
  void finalize(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    timed_launch("bwd_finalize", stream, [&] {
      bwd_finalize_kernel<D, kAffine><<<grid_of(g), flash::kBwdThreads, 0, stream>>>(a);
      CUDA_CHECK_LAUNCH();
    });
  }
  template <int D, bool kAffine, bool kAtomic>
  void main(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    timed_launch(main_kernel_name<kAtomic>(wgmma_sm90a), stream,
                 [&] { launch_main<D, kAffine, kAtomic>(g, a); });
  }
  template <int D, bool kAffine, bool kAtomic>
  void launch_main(const flash::BwdGrid& g, const flash::BwdArgs& a) {
    if (wgmma_sm90a) {
#if KDTRAIN_HAVE_SM90A
      launch_flash_backward_main_sm90a(a, g.x, kAtomic, stream);
      return;
#else
      fail("flash attention backward: the sm_90a (wgmma) kernel is not in this build (CMake KDTRAIN_CUDA_SM90A=OFF)");
#endif
    }
    constexpr size_t bytes = flash_bwd::MainLayout<D, kAffine>::kBytes;
    auto kernel = bwd_main_kernel<D, kAffine, kAtomic>;
    // Once per instantiation and process (a process drives one device), not per launch.
    static const bool opted_in = [&] {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      return true;
    }();
    (void)opted_in;
    kernel<<<grid_of(g), flash::kBwdThreads, bytes, stream>>>(a);
    CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

size_t flash_attention_backward_workspace_bytes(const flash::AttentionParams& p) {
  return flash::bwd_workspace(p.B, p.T, p.H, p.Hkv, p.D, p.sink, p.affine).bytes;
}

void flash_attention_backward(const flash::AttentionParams& p, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream, bool wgmma_sm90a) {
  check_flash_params(p, "flash attention backward");
  if (p.B == 0 || p.T == 0 || p.H == 0) return;
  if (p.T > (int64_t{1} << 30)) fail("flash attention backward: T = ", p.T, " is above 2^30");
  const size_t need = flash_attention_backward_workspace_bytes(p);
  if (workspace == nullptr || workspace_bytes < need)
    fail("flash attention backward: workspace of ", workspace_bytes, " bytes, ", need, " needed");
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    fail("flash attention backward: the workspace must be 16-byte aligned");
  const flash::BwdArgs a = flash::make_bwd_args(p, static_cast<unsigned char*>(workspace));
  CudaLauncher launch{stream, wgmma_sm90a};
  auto* ws = static_cast<unsigned char*>(workspace);
  flash::flash_dispatch(p.sink, p.affine, [&](auto flags) {
    using Flags = decltype(flags);
    if (p.D == 64)
      flash::run_bwd_sequence<64, Flags::kSink, Flags::kAffine>(launch, a, ws);
    else
      flash::run_bwd_sequence<128, Flags::kSink, Flags::kAffine>(launch, a, ws);
  });
}

}  // namespace kdtrain::cuda
