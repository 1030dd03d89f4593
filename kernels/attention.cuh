// Causal attention core for every variant (SPEC §2), a first implementation:
// one thread block per query row (forward, backward pass 1) or key row (backward
// pass 2). Scores of one row live in shared memory in fp32; the T x T matrix is
// never stored. The fused flash-style kernels of issue 5 replace this.
//
// Numerics: bf16 q/k/v/out/dout/alpha, every dot product, softmax statistic and
// accumulator in fp32, lse (B,H,T) and sinks fp32. Per variant:
//   sink:   the sink logit joins the max and the denominator (lse includes it);
//           dsinks(H) += -sum_{b,i} exp(s_h - lse_i) D_i   (D_i = dO'_i . (PV)_i)
//   affine: out_i = alpha_i (PV)_i + beta_i sum_{j<=i} V_j, beta_i = (alpha_ma - alpha_i)/(i+1);
//           dV_j gets the reverse prefix sum of beta_i dO_i over i >= j.
//   gated / affine-gated: same core as baseline / affine (the gate is its own op).
// Determinism: no atomics. Pass 1 owns dq_i, D_i and dalpha_i of its row; pass 2
// owns dk_j, dv_j and sums over the group's query heads and i >= j in a fixed
// order; dsinks is one block per head with a fixed reduction tree.
// The variant is a runtime flag (uniform branches, a single instantiation).
// Limits: T up to about 18000 (the row buffers must fit in shared memory).
#pragma once
#include "cuda_common.cuh"

namespace kdtrain::cuda {

struct AttentionParams {
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0;  // Hkv divides H
  float scale = 0.f;                            // 1/sqrt(D)
  bool sink = false;                            // sink logit per head
  bool affine = false;                          // alpha/beta affine combination
  const bf16* qkv = nullptr;       // (B, T, H + 2*Hkv, D): q heads, k heads, v heads
  const float* sinks = nullptr;    // (H)          [sink]
  const bf16* alpha = nullptr;     // (B, T, H)    [affine]
  const float* alpha_ma = nullptr; // (H)          [affine]
  // forward outputs
  bf16* out = nullptr;             // (B, T, H, D), written
  float* lse = nullptr;            // (B, H, T), written (forward) / read (backward)
  // backward
  const bf16* dout = nullptr;      // (B, T, H, D)
  bf16* dqkv = nullptr;            // (B, T, H + 2*Hkv, D), written
  float* dsinks = nullptr;         // (H), accumulated; may be null   [sink]
  bf16* dalpha = nullptr;          // (B, T, H), written              [affine]
};

void attention_forward(const AttentionParams& p, cudaStream_t stream);

// fp32 scratch for the per-row D_i = dO'_i . (PV)_i shared by the passes.
size_t attention_backward_scratch_bytes(int64_t B, int64_t H, int64_t T);
void attention_backward(const AttentionParams& p, void* scratch, cudaStream_t stream);

}  // namespace kdtrain::cuda
