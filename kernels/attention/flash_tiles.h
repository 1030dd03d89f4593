// Tile sizes, variant flags, the one variant dispatch and the shape limits of the fused
// (flash) attention family, shared by the CUDA kernels and the CPU mirror of the fused
// kernels in the tests, so both run the same blocking. Parameters: params.h.
//
// Plain C++17, no CUDA types.
//
// The features become compile-time flags in exactly one place per backend, through
// flash_dispatch() below: `sink` -> kSink, `affine` -> kAffine (the gate is a separate
// op). FlashFlags static_asserts the one illegal combination (no variant has both).
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

// The fused kernels' shape limits. Their launchers refuse anything else; the CUDA
// backend routes every other call to the row kernels (docs/flash_attention.md).
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
// flags of (sink, affine). Callers take the two bools from the call's features, never
// both true; callers reject sink && affine before dispatching (FlashFlags could not
// instantiate it).
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
