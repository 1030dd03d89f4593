// CPU mirror of the fused (flash) attention kernels in kernels/attention/flash_*.cu, a test
// oracle kept out of the library (flash_mirror_forward.cpp, flash_mirror_backward.cpp):
// the same blocked algorithm, the same passes and tile loops, in T = float or double,
// so the algorithm is verified against the unfused reference (cpu_attention.cpp)
// without a GPU. docs/flash_attention.md describes the algorithm per variant.
//
// Numerics:
// - forward, per (b, h, query tile of Br rows): online softmax over key tiles of Bc
//   rows in the exp2 domain (running max m of scale*log2(e)*x and sum l per row,
//   accumulator rescaled by 2^{m_old - m_new}); the sink logit initialises
//   m = s_h log2(e), l = 1, so it joins the denominator without a key; key tiles
//   entirely above the diagonal are skipped, tiles crossing it masked j <= i.
//   affine: S_i = sum_{j<=i} v_j from the chunked prefix scan (flash_mirror_prefix_scan.h, the
//   kernel's order). out_i = alpha_i acc_i / l_i + beta_i S_i, lse_i = ln2 (m_i + log2 l_i).
// - backward (P recomputed from lse; the forward stores only out and lse), the
//   passes of the CUDA kernels (docs/flash_attention.md):
//     1. preprocessing, per (b, kv head, chunk of kRowChunk rows), every head of the
//        group: D_i = dO_i . (out_i - beta_i S_i) [= dO'_i . (PV)_i, no division by
//        alpha]; affine: S = prefix sums of v (forward scan) first, sigma_i = dO_i . S_i,
//        and u_i = sum_h beta_ih dO_ih, reverse-scanned into R_j = sum_{i>=j} u_i;
//        sink: partial sums per (h, b, chunk), then dsinks_h -= their sum in a fixed order;
//     2. one item per (b, kv head, key tile of Bc rows), walked as flash_backward_schedule.h
//        says (query tiles downwards, the group's heads inner): dS = P (alpha dPraw - D),
//        dv += (alpha P)^T dO, dk += dS^T Q; dq of (b, h, query tile) gets dS K from
//        every key tile in key-tile order (stored by the first, added by the next,
//        written as scale * sum by the last); affine: sum_j P dPraw rides along dq and
//        dalpha_i = that - sigma_i / N_i (N_i = T or i + 1, flash::affine_bias_count); finally dk *= scale, dv += R (affine).
// - deterministic and independent of the OpenMP thread count: each work item owns
//   its outputs and reduces in a fixed order; the dq contributions of one (b, kv head)
//   run on one thread in key-tile order, the order the CUDA semaphores enforce.
#pragma once
#include <cstdint>

#include "backend/cpu/cpu_ops.h"
#include "config/config.h"

namespace kdtrain::cpu {

// Tile sizes for tests; 0 = the default of kdtrain::flash::flash_tiles().
struct FlashTileOverride {
  int Br = 0;  // query rows per tile (forward and backward)
  int Bc = 0;  // key rows per tile
};

// The arguments and shapes of attention_forward (cpu_ops.h); `tiles` for tests.
template <typename T>
void flash_attention_forward(T* out, T* lse, const T* qkv, const T* sinks, const T* alpha, const T* alpha_ma,
                             AttentionShape dims, T scale, AttentionFeatures features, FlashTileOverride tiles = {});

// The arguments and shapes of attention_backward (cpu_ops.h), plus the forward
// output `out` (B, T, H, D), from which D_i is formed.
template <typename T>
void flash_attention_backward(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv, const T* out,
                              const T* lse, const T* sinks, const T* alpha, const T* alpha_ma, AttentionShape dims,
                              T scale, AttentionFeatures features, FlashTileOverride tiles = {});

}  // namespace kdtrain::cpu
