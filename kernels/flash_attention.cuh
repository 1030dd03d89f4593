// Fused (flash) causal attention on the CUDA backend: launchers only (kernels in
// flash_attention_fwd.cu / flash_attention_bwd.cu, shared device code in
// flash_attention_tile.cuh). Plain C++ can include this header.
//
// Contract: backend.h's AttentionForwardArgs / AttentionBackwardArgs with
// bf16 qkv/out/dout/dqkv/alpha/dalpha and fp32 sinks/alpha_ma/lse/dsinks.
// Numerics (docs/flash_attention.md; the CPU mirror cpu_flash_attention_{fwd,bwd}.cpp runs
// the same blocked algorithm in float/double):
// - fp32 accumulation and softmax statistics; bf16 tensor-core tile products; P and dS
//   are rounded to bf16 before their products, as in FlashAttention-2. The T x T
//   scores are never materialised.
// - forward (flash_forward_kernel.cuh): mma.sync m16n8k16 with S and P in registers,
//   K/V by cp.async into a 2-stage swizzled ring, online softmax in the exp2 domain
//   with the sink folded into the running max/sum (lse includes the sink); affine adds
//   beta_i * sum_{j<=i} v_j from a parallel chunked scan (prefix_scan_kernel.cuh) kept
//   in the forward workspace.
// - backward: no float atomics anywhere, so the bits depend only on the inputs:
//   prefix sums of v [affine] -> per-row D_i (and dO.S [affine]) -> dsinks (one
//   block per head, fixed tree) [sink] -> dq (+ dalpha) per (b, h, query tile) ->
//   dk, dv per (b, kv head, key tile) looping the group's heads and query tiles.
// - head dims 64 and 128; any T >= 1, any H multiple of Hkv. Buffers must not alias;
//   qkv/out/dout/dqkv must be 16-byte aligned.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/backend.h"

namespace kdtrain::cuda {

// True when the fused kernels handle this shape (head dim 64 or 128).
bool flash_attention_supported(const AttentionShape& shape);

// Device scratch the forward needs for this shape and variant: the fp32 prefix sums of
// v and their scan's chunk totals for affine, 0 otherwise.
size_t flash_attention_forward_workspace_bytes(const AttentionShape& shape, AttentionVariant variant);

// out (B,T,H,D) bf16 and lse (B,H,T) fp32 written. `workspace` holds at least
// flash_attention_forward_workspace_bytes() bytes (may be null when that is 0); its
// contents are clobbered.
void flash_attention_forward(const AttentionForwardArgs& args, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream);

// Device scratch the backward needs for this shape and variant (fp32 per-row
// statistics, and the prefix sums of v for affine).
size_t flash_attention_backward_workspace_bytes(const AttentionShape& shape,
                                                AttentionVariant variant);

// dqkv and dalpha written, dsinks accumulated. `workspace` holds at least
// flash_attention_backward_workspace_bytes() bytes; its contents are clobbered.
void flash_attention_backward(const AttentionBackwardArgs& args, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

}  // namespace kdtrain::cuda
