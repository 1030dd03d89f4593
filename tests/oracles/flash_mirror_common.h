// Shared by the two halves of the CPU flash-attention mirror (flash_mirror_forward.cpp,
// flash_mirror_backward.cpp): typed views of the packed buffers through the FlashParams
// strides, tile choice and argument checks. Internal to src/backend/cpu.
#pragma once
#include <cstdint>
#include <stdexcept>

#include "oracles/flash_mirror.h"
#include "kernels/attention/params.h"
#include "kernels/attention/flash_tiles.h"

namespace kdtrain::cpu::flash_mirror {

using flash::FlashParams;
using flash::FlashPass;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Typed views of the packed buffers, addressed through the shared FlashParams strides.
template <typename T>
struct Views {
  const FlashParams& p;
  const T* q(const T* qkv, int64_t b, int64_t t, int64_t h) const {
    return qkv + b * p.qkv_batch + t * p.qkv_token + h * p.D;
  }
  const T* k(const T* qkv, int64_t b, int64_t t, int64_t g) const {
    return qkv + b * p.qkv_batch + t * p.qkv_token + p.k_offset + g * p.D;
  }
  const T* v(const T* qkv, int64_t b, int64_t t, int64_t g) const {
    return qkv + b * p.qkv_batch + t * p.qkv_token + p.v_offset + g * p.D;
  }
  int64_t o(int64_t b, int64_t t, int64_t h) const { return b * p.o_batch + t * p.o_token + h * p.D; }
  int64_t row(int64_t b, int64_t h, int64_t t) const { return b * p.lse_batch + h * p.lse_head + t; }
  int64_t a(int64_t b, int64_t t, int64_t h) const { return b * p.alpha_batch + t * p.alpha_token + h; }
};

template <typename T>
T dot(const T* x, const T* y, int64_t n) {
  T s = 0;
  for (int64_t d = 0; d < n; ++d) s += x[d] * y[d];
  return s;
}

// The entry of either pass: checks the arguments and, unless there is no row,
// calls body(flags, p, tiles) with the variant's compile-time flags
// (flash_dispatch), the FlashParams of the shape and divisor and the pass's tiles.
template <typename T, typename Body>
void run_pass(FlashPass pass, AttentionShape dims, T scale, AttentionFeatures f, FlashTileOverride over,
              const Body& body) {
  if (dims.Hkv <= 0 || dims.H % dims.Hkv != 0)
    throw std::invalid_argument("flash attention: H must be a positive multiple of Hkv");
  if (f.sink && f.affine) throw std::invalid_argument("flash attention: sink and affine cannot be combined");
  if (over.Br < 0 || over.Bc < 0) throw std::invalid_argument("flash attention: negative tile size");
  if (dims.B * dims.T * dims.H == 0) return;
  FlashParams p = flash::make_flash_params(dims.B, dims.T, dims.H, dims.Hkv, dims.D, static_cast<float>(scale));
  p.bias_visible = f.bias_divisor == AffineBiasDivisor::visible;
  flash::FlashTiles t = flash::flash_tiles(static_cast<int>(dims.D), pass);
  if (over.Br > 0) t.Br = over.Br;
  if (over.Bc > 0) t.Bc = over.Bc;
  flash::flash_dispatch(f.sink, f.affine, [&](auto flags) { body(flags, p, t); });
}

}  // namespace kdtrain::cpu::flash_mirror
