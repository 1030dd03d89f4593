// The parameters of the fused (flash) attention family, in one header (as
// FlashAttention's flash.h). Tiles, variant flags, dispatch and shape limits: flash_tiles.h.
//
// FlashParams: sizes, element strides and the affine bias divisor of one call, shared by
// the CUDA kernels and the CPU mirror of the fused kernels in the tests, so both run the
// same blocking; make_flash_params derives the strides from the sizes.
//
// AttentionParams: the one parameter struct of a CUDA attention call. Every
// implementation takes it unchanged: the fused forward (mma.sync and sm_90a wgmma), the
// fused backward and the row kernels (flash.cuh, row.cuh). A pass that needs more (the
// forward's affine prefix sums, the backward's schedule and workspace carve-up) takes it
// beside this struct or wraps it whole (flash_backward_args.h); no pointer is copied from
// one struct to another. It is FlashParams plus the variant's features as flags and every
// tensor of the call, forward and backward. The CUDA backend builds it once per call from
// its arguments; the features were resolved from the variant before that.
//
// Plain C++17, no CUDA header: bf16 tensors are raw 16-bit words, so host code and the
// SIMT emulator tests build it as the backend does.
#pragma once
#include <cstdint>

namespace kdtrain::flash {

// Shapes and strides of one call, in elements. Layouts (backend.h):
// qkv/dqkv (B, T, H + 2*Hkv, D), out/dout (B, T, H, D), lse (B, H, T), alpha/dalpha (B, T, H).
struct FlashParams {
  int64_t B = 0;          // batch
  int64_t T = 0;          // sequence length
  int64_t H = 0;          // query heads
  int64_t Hkv = 0;        // key/value heads; query head h reads kv head h / group
  int64_t group = 0;      // H / Hkv
  int64_t D = 0;          // head dim
  int64_t qkv_token = 0;  // stride between tokens of qkv/dqkv: (H + 2*Hkv) * D
  int64_t qkv_batch = 0;  // stride between batches of qkv/dqkv: T * qkv_token
  int64_t k_offset = 0;   // offset of k head 0 inside a qkv token row: H * D
  int64_t v_offset = 0;   // offset of v head 0 inside a qkv token row: (H + Hkv) * D
  int64_t o_token = 0;    // stride between tokens of out/dout: H * D
  int64_t o_batch = 0;    // stride between batches of out/dout: T * H * D
  int64_t lse_head = 0;   // stride between heads of lse (and the (B,H,T) workspaces): T
  int64_t lse_batch = 0;  // stride between batches of lse: H * T
  int64_t alpha_token = 0;  // stride between tokens of alpha/dalpha: H
  int64_t alpha_batch = 0;  // stride between batches of alpha/dalpha: T * H
  float scale = 0.f;        // softmax scale, 1/sqrt(D)
  // N of the affine bias beta_i = (alpha_ma - alpha_i) / N (docs/model.md): T, the keys of
  // the call (`sequence`), bias_keys when set (N fixed at the training length), or the
  // visible keys i + 1 of query row i when bias_visible.
  bool bias_visible = false;
  int64_t bias_keys = 0;
};

// The affine bias divisor of query row i: every fused pass and the CPU mirror read it here.
template <typename T = float>
constexpr T affine_bias_count(const FlashParams& p, int64_t i) {
  return p.bias_visible ? static_cast<T>(i + 1) : static_cast<T>(p.bias_keys > 0 ? p.bias_keys : p.T);
}

constexpr FlashParams make_flash_params(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                                        float scale) {
  FlashParams p;
  p.B = B;
  p.T = T;
  p.H = H;
  p.Hkv = Hkv;
  p.group = Hkv > 0 ? H / Hkv : 0;
  p.D = D;
  p.qkv_token = (H + 2 * Hkv) * D;
  p.qkv_batch = T * p.qkv_token;
  p.k_offset = H * D;
  p.v_offset = (H + Hkv) * D;
  p.o_token = H * D;
  p.o_batch = T * H * D;
  p.lse_head = T;
  p.lse_batch = H * T;
  p.alpha_token = H;
  p.alpha_batch = T * H;
  p.scale = scale;
  return p;
}

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
