// Fused (flash) causal attention on the CUDA backend: launchers only (kernels in
// flash_forward.cu / flash_backward.cu, their bodies in
// flash_forward_kernel.cuh / flash_backward_{prep,kernel}.cuh). Plain C++ can
// include this header.
//
// Contract: params.h (the one struct of a call, for both CUDA attention paths) with
// bf16 qkv/out/dout/dqkv/alpha/dalpha (raw words) and fp32 sinks/alpha_ma/lse/dsinks.
// CudaBackend reaches these launchers only through backend/cuda/attention_entry.cu, when
// choose_attention_path (backend/cuda/attention_path.h) picks the fused path.
// Numerics (docs/flash_attention.md; the CPU mirror flash_mirror_{forward,backward}.cpp runs
// the same blocked algorithm in float/double):
// - fp32 accumulation and softmax statistics; bf16 tensor-core tile products; P and dS
//   are rounded to bf16 before their products, as in FlashAttention-2. The T x T
//   scores are never materialised.
// - forward (flash_forward_kernel.cuh): mma.sync m16n8k16 with S and P in registers,
//   K/V by cp.async into a 2-stage swizzled ring, online softmax in the exp2 domain
//   with the sink folded into the running max/sum (lse includes the sink); affine adds
//   beta_i * sum_{j<=i} v_j from a parallel chunked scan (prefix_scan_kernel.cuh) kept
//   in the forward workspace.
// - backward: one pass over (b, kv head, key tile) items computing QK^T once per tile
//   pair, dk/dv in registers, dq through an fp32 accumulator updated in key-tile order
//   under integer semaphores (flash_backward_schedule.h): no float atomics anywhere, so the
//   bits depend only on the inputs. Before it, a preprocessing kernel forms the per-row
//   D_i (and sigma_i, u_i [affine]) and dsinks (fixed tree) [sink]; affine's prefix sums
//   of v and reverse sums of u are parallel chunked scans.
// - head dims 64 and 128; any T >= 1, any H multiple of Hkv. Buffers must not alias;
//   qkv/out/dout/dqkv must be 16-byte aligned.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/attention/flash_forward_kernels.h"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/params.h"
#include "core/error.h"

namespace kdtrain::cuda {

// Device workspace each pass needs for this call (its contents are clobbered).
size_t flash_attention_forward_workspace_bytes(const flash::AttentionParams& p);
size_t flash_attention_backward_workspace_bytes(const flash::AttentionParams& p);

// out (B,T,H,D) bf16 and lse (B,H,T) fp32 written. `workspace` holds at least
// flash_attention_forward_workspace_bytes(p) bytes (the fp32 prefix sums of v and
// their scan's chunk totals for affine; may be null when that is 0). `kernel`: which
// kernel runs it (flash_forward_kernels.h; the wgmma ones need head dim 64 or 128, a device
// of compute capability 9.0 and a build with KDTRAIN_CUDA_SM90A);
// backend/cuda/attention_path.h's choose_flash_forward_kernel decides.
void flash_attention_forward(const flash::AttentionParams& p, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream, FlashForwardKernel kernel = FlashForwardKernel::mma_sync);

// dqkv and dalpha written, dsinks accumulated. `workspace` holds at least
// flash_attention_backward_workspace_bytes(p) bytes (flash_backward_workspace.h: the fp32 dq
// accumulator, B*H*T*D*4 bytes with T rounded up to 64, per-row statistics, semaphores,
// and the scans' buffers for affine), 16-byte aligned, any contents. `wgmma_sm90a`: run
// the main kernel's Hopper build (S^T, dP^T, dV, dK on wgmma; flash_backward_wgmma.cuh; a
// device of compute capability 9.0, a build with KDTRAIN_CUDA_SM90A) instead of the
// mma.sync one; backend/cuda/attention_path.h's choose_flash_backward_kernel decides.
void flash_attention_backward(const flash::AttentionParams& p, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream, bool wgmma_sm90a = false);

// The launchers' preconditions: the shape limits of flash_shape.h, no variant
// with both a sink and affine scaling, 16-byte aligned bf16 tensors.
inline void check_flash_params(const flash::AttentionParams& p, const char* op) {
  KD_CHECK(p.Hkv > 0 && p.H % p.Hkv == 0 && p.B >= 0 && p.T >= 0, op, ": bad shape B=", p.B,
           " T=", p.T, " H=", p.H, " Hkv=", p.Hkv);
  KD_CHECK(flash::flash_supports_head_dim(p.D), op, ": head dim ", p.D,
           " unsupported (the fused kernels take 64 and 128)");
  KD_CHECK(p.B <= flash::kFlashMaxGridDim && p.H <= flash::kFlashMaxGridDim, op,
           ": B and H must be at most 65535, got B=", p.B, " H=", p.H);
  KD_CHECK(!(p.sink && p.affine), op, ": sink and affine cannot be combined");
  KD_CHECK(flash::aligned_16(p.qkv) && flash::aligned_16(p.out) && flash::aligned_16(p.dout) && flash::aligned_16(p.dqkv), op,
           ": qkv, out, dout and dqkv must be 16-byte aligned");
}

}  // namespace kdtrain::cuda
