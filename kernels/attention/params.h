// The one parameter struct of the CUDA attention core. Both implementations (the
// fused kernels, flash.cuh, and the row kernels, row.cuh) take it.
//
// It is flash::FlashParams (sizes and element strides, shared with the CPU mirror
// of the fused kernels) plus the variant's features and the typed device
// pointers. backend/cuda/attention_entry.cu builds it from backend.h's AttentionForwardArgs /
// AttentionBackwardArgs once per call: that is the only translation, and the only
// place the variant is resolved into features on the CUDA side.
//
// Plain C++ (cuda_bf16.h compiles on the host), so tests can include it.
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/flash_shape.h"

namespace kdtrain::cuda {

using bf16 = __nv_bfloat16;  // as cuda_common.cuh, whose device helpers this header must not pull in

struct AttentionParams : flash::FlashParams {
  bool sink = false;    // the sink logit joins the softmax denominator
  bool affine = false;  // out = alpha * PV + beta * prefix(V)
  const bf16* qkv = nullptr;        // (B, T, H + 2*Hkv, D): q heads, k heads, v heads
  const float* sinks = nullptr;     // (H)                       [sink]
  const bf16* alpha = nullptr;      // (B, T, H)                 [affine]
  const float* alpha_ma = nullptr;  // (H)                       [affine]
  bf16* out = nullptr;              // (B, T, H, D): written by the forward, read by the backward
  float* lse = nullptr;             // (B, H, T): written by the forward, read by the backward
  const bf16* dout = nullptr;       // (B, T, H, D)              [backward]
  bf16* dqkv = nullptr;             // (B, T, H + 2*Hkv, D), written   [backward]
  float* dsinks = nullptr;          // (H), accumulated; may be null   [backward, sink]
  bf16* dalpha = nullptr;           // (B, T, H), written              [backward, affine]
};

}  // namespace kdtrain::cuda
