// The wgmma probe's __global__ wrapper and launch (wgmma_probe.h). Test-only: linked
// into kdtrain_tests when the build has the sm_90a target (CMake KDTRAIN_CUDA_SM90A).
#include <vector>

#include "kernels/cuda_check.cuh"
#include "tc/sm90a/wgmma_probe.h"

namespace kdtrain::wgmmatest {
namespace {

template <int N, bool kRegs, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(128) wgmma_probe_kernel(const __grid_constant__ WgmmaProbeArgs p) {
  extern __shared__ __align__(1024) unsigned char smem[];
  wgmma_probe_body<N, kRegs, kTransA, kTransB>(p, smem);
}

template <typename T>
T* to_device(const T* host, size_t n) {
  T* dev = nullptr;
  CUDA_CHECK(cudaMalloc(&dev, sizeof(T) * (n > 0 ? n : 1)));
  if (n > 0) CUDA_CHECK(cudaMemcpy(dev, host, sizeof(T) * n, cudaMemcpyHostToDevice));
  return dev;
}

}  // namespace

void run_wgmma_probe_on_device(const WgmmaProbeArgs& host) {
  const size_t acc = 128 * static_cast<size_t>(host.n / 2);
  WgmmaProbeArgs p = host;
  p.image = to_device(host.image, static_cast<size_t>(host.image_bytes));
  p.a = to_device(host.a, host.a_regs ? 128 * 4 : 0);
  p.c = to_device(host.c, acc);
  p.d = to_device(host.d, acc);
  wgmma_probe_dispatch(p, [&](auto n, auto regs, auto ta, auto tb) {
    auto kernel = wgmma_probe_kernel<decltype(n)::value, decltype(regs)::value, decltype(ta)::value, decltype(tb)::value>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.image_bytes));
    kernel<<<1, 128, p.image_bytes>>>(p);
    CUDA_CHECK_LAUNCH();
  });
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.d, p.d, sizeof(float) * acc, cudaMemcpyDeviceToHost));
  for (const void* ptr : {static_cast<const void*>(p.image), static_cast<const void*>(p.a), static_cast<const void*>(p.c),
                          static_cast<const void*>(p.d)})
    CUDA_CHECK(cudaFree(const_cast<void*>(ptr)));
}

}  // namespace kdtrain::wgmmatest
