// The one parameter struct of a CUDA attention call. Every implementation takes it
// unchanged: the fused forward (mma.sync and sm_90a wgmma), the fused backward and the
// row kernels (flash.cuh, row.cuh). A pass that needs more (the forward's affine prefix
// sums, the backward's schedule and workspace carve-up) takes it beside this struct or
// wraps it whole (flash_backward_args.h); no pointer is copied from one struct to another.
//
// It is flash::FlashParams (sizes, element strides and the affine bias divisor, shared
// with the CPU mirror of the fused kernels) plus the variant's features and every tensor
// of the call, forward and backward. backend/cuda/attention_entry.cu builds it from
// backend.h's AttentionForwardArgs / AttentionBackwardArgs once per call: that is the
// only translation, and the only place the variant is resolved into features on the
// CUDA side.
//
// Plain C++17, no CUDA header: bf16 tensors are raw 16-bit words, so host code and the
// SIMT emulator tests build it as the backend does.
#pragma once
#include <cstdint>

#include "kernels/attention/flash_shape.h"

namespace kdtrain::flash {

struct AttentionParams : FlashParams {
  bool sink = false;    // the sink logit joins the softmax denominator
  bool affine = false;  // out = alpha * PV + beta * prefix(V)
  const uint16_t* qkv = nullptr;    // (B, T, H + 2*Hkv, D) bf16: q heads, k heads, v heads
  const float* sinks = nullptr;     // (H)                             [sink]
  const uint16_t* alpha = nullptr;  // (B, T, H) bf16                  [affine]
  const float* alpha_ma = nullptr;  // (H)                             [affine]
  uint16_t* out = nullptr;          // (B, T, H, D) bf16: written by the forward, read by the backward
  float* lse = nullptr;             // (B, H, T): written by the forward, read by the backward
  const uint16_t* dout = nullptr;   // (B, T, H, D) bf16               [backward]
  uint16_t* dqkv = nullptr;         // (B, T, H + 2*Hkv, D) bf16, written   [backward]
  float* dsinks = nullptr;          // (H), accumulated; may be null   [backward, sink]
  uint16_t* dalpha = nullptr;       // (B, T, H) bf16, written         [backward, affine]
};

}  // namespace kdtrain::flash

namespace kdtrain::cuda {
using flash::AttentionParams;  // the launchers' and the row kernels' argument
}  // namespace kdtrain::cuda
