// Causal attention core for every variant (docs/model.md), a first implementation:
// one thread block per query row (forward, backward pass 1) or key row (backward
// pass 2). Scores of one row live in shared memory in fp32; the T x T matrix is
// never stored. The fallback of the fused kernels (backend/cuda/attention_path.h decides).
//
// Numerics: bf16 q/k/v/out/dout/alpha, every dot product, softmax statistic and
// accumulator in fp32, lse (B,H,T) and sinks fp32. Per variant:
//   sink:   the sink logit joins the max and the denominator (lse includes it);
//           dsinks(H) += -sum_{b,i} exp(s_h - lse_i) D_i   (D_i = dO'_i . (PV)_i)
//   affine: out_i = alpha_i (PV)_i + beta_i sum_{j<=i} V_j, beta_i = (alpha_ma - alpha_i)/N_i,
//           N_i = T or i + 1 (flash::affine_bias_count);
//           dV_j gets the reverse prefix sum of beta_i dO_i over i >= j.
//   gated / affine-gated: same core as baseline / affine (the gate is its own op).
// Determinism: no atomics. Pass 1 owns dq_i, D_i and dalpha_i of its row; pass 2
// owns dk_j, dv_j and sums over the group's query heads and i >= j in a fixed
// order; dsinks is one block per head with a fixed reduction tree.
// The variant is a runtime flag (uniform branches, a single instantiation).
// Limits (row_limits.h): B*H <= 65535, and T up to about 29000 at D = 64 (the backward's
// two rows of scores must fit in 227 KB of shared memory).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/attention/params.h"
#include "kernels/attention/row_limits.h"

namespace kdtrain::cuda {

// p: params.h. The row path runs every head dim; the fused kernels
// (flash.cuh) replace it wherever they apply (backend/cuda/attention_path.h).
void row_attention_forward(const flash::AttentionParams& p, cudaStream_t stream);

// fp32 workspace for the per-row D_i = dO'_i . (PV)_i shared by the passes.
size_t row_attention_backward_workspace_bytes(const flash::AttentionParams& p);
void row_attention_backward(const flash::AttentionParams& p, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);

}  // namespace kdtrain::cuda
