// The CUDA attention entry (backend/cuda/attention_entry.cuh).
#include "kernels/attention/row.cuh"
#include "backend/cuda/attention_entry.cuh"
#include "kernels/attention/flash.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/kernel_timer.cuh"

#include <cstdlib>

namespace kdtrain::cuda {
namespace {

template <typename Args>
flash::AttentionParams common_params(const Args& a) {
  const AttentionShape& s = a.shape;
  KD_CHECK(s.Hkv > 0 && s.H > 0 && s.H % s.Hkv == 0, "attention: n_kv_heads (", s.Hkv,
           ") must divide n_heads (", s.H, ")");
  KD_CHECK(s.B >= 0 && s.T >= 0 && s.D > 0, "attention: bad shape B=", s.B, " T=", s.T,
           " D=", s.D);
  flash::AttentionParams p;
  static_cast<flash::FlashParams&>(p) = flash::make_flash_params(s.B, s.T, s.H, s.Hkv, s.D, a.scale);
  p.sink = a.features.sink;
  p.affine = a.features.affine;
  p.bias_visible = a.features.bias_divisor == AffineBiasDivisor::visible;
  p.bias_keys = a.features.bias_keys;
  KD_CHECK(!p.sink || a.sinks != nullptr, "attention (sink): sinks must be given");
  KD_CHECK(!p.affine || (a.alpha != nullptr && a.alpha_ma != nullptr),
           "attention (affine variants): alpha and alpha_ma must be given");
  p.qkv = static_cast<const uint16_t*>(a.qkv);
  p.sinks = p.sink ? a.sinks : nullptr;
  p.alpha = p.affine ? static_cast<const uint16_t*>(a.alpha) : nullptr;
  p.alpha_ma = p.affine ? a.alpha_ma : nullptr;
  return p;
}

}  // namespace

flash::AttentionParams attention_params(const AttentionForwardArgs& a) {
  flash::AttentionParams p = common_params(a);
  p.out = static_cast<uint16_t*>(a.out);
  p.lse = a.lse;
  return p;
}

flash::AttentionParams attention_params(const AttentionBackwardArgs& a) {
  flash::AttentionParams p = common_params(a);
  KD_CHECK(!p.affine || a.dalpha != nullptr, "attention backward (affine): dalpha must be given");
  // The backward only reads out and lse; the struct is shared with the forward.
  p.out = const_cast<uint16_t*>(static_cast<const uint16_t*>(a.out));
  p.lse = const_cast<float*>(a.lse);
  p.dout = static_cast<const uint16_t*>(a.dout);
  p.dqkv = static_cast<uint16_t*>(a.dqkv);
  p.dsinks = p.sink ? a.dsinks : nullptr;
  p.dalpha = p.affine ? static_cast<uint16_t*>(a.dalpha) : nullptr;
  return p;
}

AttentionPathChoice attention_path(const flash::AttentionParams& p) {
  const bool aligned = flash::aligned_16(p.qkv) && flash::aligned_16(p.out) && flash::aligned_16(p.dout) &&
                       flash::aligned_16(p.dqkv);
  return choose_attention_path(AttentionShape{p.B, p.T, p.H, p.Hkv, p.D}, aligned);
}

size_t attention_workspace_bytes(const flash::AttentionParams& p, AttentionPass pass, AttentionPath path) {
  if (path == AttentionPath::flash)
    return pass == AttentionPass::forward ? flash_attention_forward_workspace_bytes(p)
                                          : flash_attention_backward_workspace_bytes(p);
  return pass == AttentionPass::forward ? 0 : row_attention_backward_workspace_bytes(p);
}

#if defined(KDTRAIN_HAVE_SM90A)
constexpr bool kSm90aBuilt = true;  // CMake KDTRAIN_CUDA_SM90A: the wgmma forward and backward
#else
constexpr bool kSm90aBuilt = false;
#endif

namespace {
struct ComputeCapability {
  int major = 0, minor = 0;
};
ComputeCapability current_compute_capability() {
  int device = 0;
  ComputeCapability cc;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc.major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc.minor, cudaDevAttrComputeCapabilityMinor, device));
  return cc;
}
}  // namespace

FlashForwardKernel flash_forward_kernel_here(AttentionForward request) {
  // The variable that chose the kernel per call before train.attention_forward: a script
  // still setting it would time a kernel it did not ask for.
  KD_CHECK(std::getenv("KDTRAIN_FLASH_FORWARD") == nullptr,
           "KDTRAIN_FLASH_FORWARD is no longer read: set train.attention_forward (--set "
           "train.attention_forward=mma_sync|wgmma|auto, or kdtrain bench --attention-forward) and unset it");
  const ComputeCapability cc = current_compute_capability();
  return choose_flash_forward_kernel(request, cc.major, cc.minor, kSm90aBuilt);
}

FlashBackwardKernel flash_backward_kernel_here(AttentionBackward request) {
  const ComputeCapability cc = current_compute_capability();
  return choose_flash_backward_kernel(request, cc.major, cc.minor, kSm90aBuilt);
}

void attention_run(const flash::AttentionParams& p, AttentionPass pass, AttentionPath path, FlashKernels kernels,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (path == AttentionPath::flash) {
    if (pass == AttentionPass::forward)
      flash_attention_forward(p, workspace, workspace_bytes, stream, kernels.forward);
    else
      flash_attention_backward(p, workspace, workspace_bytes, stream,
                               kernels.backward == FlashBackwardKernel::wgmma_sm90a);
  } else {
    if (pass == AttentionPass::forward)
      timed_launch("fwd row", stream, [&] { row_attention_forward(p, stream); });
    else
      timed_launch("bwd row", stream, [&] { row_attention_backward(p, workspace, workspace_bytes, stream); });
  }
}

}  // namespace kdtrain::cuda
