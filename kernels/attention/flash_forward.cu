// Fused causal attention, forward: the __global__ wrapper around the kernel body
// (flash_forward_kernel.cuh, also run by the host emulator in tests) and the launcher.
// Contract and numerics: flash.cuh; algorithm: docs/flash_attention.md.
#include <algorithm>

#include "kernels/cuda_check.cuh"
#include "kernels/kernel_timer.cuh"
#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash_forward_kernel.cuh"
#if KDTRAIN_HAVE_SM90A
#include "kernels/attention/flash_forward_sm90a.h"
#endif
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/prefix_scan.cuh"

namespace kdtrain::cuda {
namespace {

template <int D, int Br, int Bc, int Warps, bool kSink, bool kAffine>
__global__ void __launch_bounds__(Warps * 32)
    flash_forward_kernel(const __grid_constant__ flash::AttentionParams p, const float* prefix) {
  extern __shared__ __align__(128) unsigned char smem[];
  flash::flash_forward_block<D, Br, Bc, Warps, kSink, kAffine>(p, prefix, smem);
}

// The forward tiles of head dim D, from the one table in flash_tiles.h.
template <int D>
constexpr flash::FlashTiles kForwardTiles = flash::flash_tiles(D, flash::FlashPass::forward);

// Workspace layout: [prefix sums of v (B, T, Hkv*D) fp32][scan chunk totals], affine only.
struct ForwardWorkspace {
  size_t prefix_bytes = 0, totals_bytes = 0;
  size_t total() const { return prefix_bytes + totals_bytes; }
};

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

ForwardWorkspace forward_workspace(const flash::AttentionParams& s) {
  ForwardWorkspace w;
  if (!s.affine) return w;
  w.prefix_bytes = round_up(sizeof(float) * static_cast<size_t>(s.B * s.T * s.Hkv * s.D), 256);
  w.totals_bytes = round_up(prefix_scan_workspace_bytes(s.B, s.T, s.Hkv * s.D), 256);
  return w;
}

template <int D, typename Flags>
void launch_forward(const flash::AttentionParams& p, const float* prefix, cudaStream_t stream) {
  constexpr auto tiles = kForwardTiles<D>;
  using L = flash::ForwardLayout<D, tiles.Br, tiles.Bc, tiles.warps>;
  auto kernel = flash_forward_kernel<D, tiles.Br, tiles.Bc, tiles.warps, Flags::kSink, Flags::kAffine>;
  // Once per instantiation and process (a process drives one device), not per launch.
  static const bool opted_in = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
    return true;
  }();
  (void)opted_in;
  const int64_t blocks = flash::forward_blocks(p, tiles.Br);
  if (blocks > 0x7fffffff) fail("flash attention: ", blocks, " blocks exceed the grid limit");
  kernel<<<static_cast<unsigned>(blocks), L::kThreads, L::kSmemBytes, stream>>>(p, prefix);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t flash_attention_forward_workspace_bytes(const flash::AttentionParams& p) {
  return forward_workspace(p).total();
}

void flash_attention_forward(const flash::AttentionParams& s, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream, FlashForwardKernel kernel) {
  check_flash_params(s, "flash attention forward");
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  const ForwardWorkspace ws = forward_workspace(s);
  if (workspace_bytes < ws.total() || (ws.total() > 0 && workspace == nullptr))
    fail("flash attention forward: workspace of ", workspace_bytes, " bytes, ", ws.total(), " needed");

  if (s.qkv_token * 128 > 0x7fffffff)  // tile offsets are 32-bit (flash_forward_kernel.cuh)
    fail("flash attention: qkv rows of ", s.qkv_token, " elements are too wide");
  const float* prefix = nullptr;
  if (s.affine) {
    auto* base = static_cast<unsigned char*>(workspace);
    const flash::ScanArgs<uint16_t> scan = flash::v_prefix_scan(
        s, reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + ws.prefix_bytes));
    timed_launch("fwd v_scan", stream, [&] { prefix_scan(scan, stream); });
    prefix = scan.out;
  }
  // The kernel timer's names: "fwd " and the kernel as scripts/gpu/attention_model.py labels it.
  if (kernel != FlashForwardKernel::mma_sync) {
#if KDTRAIN_HAVE_SM90A
    const bool lockstep = kernel == FlashForwardKernel::wgmma_sm90a_lockstep;
    timed_launch(lockstep ? "fwd wgmma" : "fwd wgmma ws", stream,
                 [&] { launch_flash_forward_sm90a(s, prefix, stream, lockstep); });
    return;
#else
    fail("flash attention forward: the sm_90a (wgmma) kernel is not in this build (CMake KDTRAIN_CUDA_SM90A=OFF)");
#endif
  }
  timed_launch("fwd mma_sync", stream, [&] {
    kdtrain::flash::flash_dispatch(s.sink, s.affine, [&](auto flags) {
      using Flags = decltype(flags);
      if (s.D == 64)
        launch_forward<64, Flags>(s, prefix, stream);
      else
        launch_forward<128, Flags>(s, prefix, stream);
    });
  });
}

}  // namespace kdtrain::cuda
