// Parameters and tile sizes of the fused (flash) attention family, shared by the
// CPU mirror (src/backend/cpu/flash_mirror_{forward,backward}.cpp) and the CUDA kernels
// (kernels/attention/flash_{forward,backward}.cu), so both run the same blocking.
//
// Plain C++17, no CUDA types: every field is a size, an int64 stride in elements,
// or a float. Pointers stay in the callers (typed T* in the CPU mirror; the CUDA side's
// AttentionParams, params.h, adds the call's tensors).
//
// Variants become compile-time flags in exactly one place per backend, through
// flash_dispatch() below: `sink` -> kSink, `affine`/`affine-gated` -> kAffine,
// `baseline`/`gated` -> neither (the gate is a separate op). FlashFlags
// static_asserts the one illegal combination (no variant has both).
#pragma once
#include <cstdint>
#include <type_traits>

namespace kdtrain::flash {

// Which kernel of the family a tile size is for.
enum class FlashPass {
  forward,   // one work item per (b, h, query tile), loops key tiles
  backward,  // one work item per (b, kv head, key tile), loops query tiles x group heads
             // (flash_backward_schedule.h); dk/dv in registers, dq through an ordered accumulator
};

// Tile shape of one pass. Br query rows x Bc key rows per step.
struct FlashTiles {
  int Br = 0;     // query rows per tile (per work item in forward)
  int Bc = 0;     // key rows per tile (per work item in backward)
  int warps = 0;  // CUDA warps per block; each warp owns 16 rows (query rows in forward, key
                  // rows in backward)
};

// The one place tile sizes come from. The CUDA kernels support head_dim 64 and 128;
// the CPU mirror accepts any head_dim and uses the row of the nearest supported one.
//  - forward (mma.sync kernel, flash_forward_kernel.cuh): Br = 128 query rows per block
//    and Bc = 64 keys per step at both head dims. D = 64: 4 warps, each owning two
//    16-row m-tiles, so every K/V fragment read from shared memory feeds two mma
//    (Q 32 + O 64 + S 64 fp32 registers per thread); D = 128: 8 warps of one m-tile
//    (Q 32 + O 64 + S 32), two m-tiles would need ~250 registers with Q resident.
//    docs/flash_attention.md has the arithmetic.
//  - backward: Bc = 128 key rows per block (8 warps x 16; dk and dv of a warp's 16 rows
//    stay in registers: 2 x 16 x D fp32), Br = 64 query rows per step, for both head
//    dims and every variant (docs/flash_attention.md has the register, shared-memory and
//    traffic arithmetic: the dq accumulator traffic per FLOP falls as 1/Bc).
// The variant does not change the tiles (one shape per head dim and pass keeps the
// instantiations few), so it is not an argument.
constexpr FlashTiles flash_tiles(int head_dim, FlashPass pass) {
  if (pass == FlashPass::forward) return FlashTiles{128, 64, head_dim > 64 ? 8 : 4};
  return FlashTiles{64, 128, 8};
}

// Rows per chunk of the deterministic prefix scan (prefix_scan_kernel.cuh; the CPU
// mirror sums in the same chunks): one chunk total per (batch, chunk, column), then
// every row = (chunk totals before it, in order) + the running sum inside its chunk.
constexpr int kScanChunkRows = 64;

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
  // N of the affine bias beta_i = (alpha_ma - alpha_i) / N (SPEC §2): T, the keys of the
  // call (`sequence`), or the visible keys i + 1 of query row i when bias_visible.
  bool bias_visible = false;
};

// The affine bias divisor of query row i: every pass of either backend reads it here.
template <typename T = float>
constexpr T affine_bias_count(const FlashParams& p, int64_t i) {
  return p.bias_visible ? static_cast<T>(i + 1) : static_cast<T>(p.T);
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

// The fused kernels' shape limits. Their launchers refuse anything
// else; backend/cuda/attention_path.h routes every other call to the row kernels.
inline bool flash_supports_head_dim(int64_t D) { return D == 64 || D == 128; }
constexpr int64_t kFlashMaxGridDim = 65535;  // B and H are grid dimensions

inline bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The compile-time variant flags. Kernels branch on them with `if constexpr`.
template <bool kSinkFlag, bool kAffineFlag>
struct FlashFlags {
  static_assert(!(kSinkFlag && kAffineFlag), "no attention variant has both a sink and affine scaling");
  static constexpr bool kSink = kSinkFlag;      // sink logit joins the softmax denominator
  static constexpr bool kAffine = kAffineFlag;  // out = alpha*PV + beta*prefix(V)
};

// The single runtime -> compile-time switch: calls f(FlashFlags<...>{}) for the
// flags of (sink, affine). Callers take the two bools from the variant's
// AttentionFeatures (config/attention_variant.h), never both true; callers
// reject sink && affine before dispatching (FlashFlags could not instantiate it).
template <typename F>
void flash_dispatch(bool sink, bool affine, F&& f) {
  if (sink)
    f(FlashFlags<true, false>{});
  else if (affine)
    f(FlashFlags<false, true>{});
  else
    f(FlashFlags<false, false>{});
}

}  // namespace kdtrain::flash
