// Fused causal attention forward, FlashAttention-2 class: the kernel body, written
// against primitives.cuh so the same source runs on the GPU (flash_forward.cu
// wraps it in a __global__) and in the host SIMT emulator (tests/attention/test_flash_forward_sim.cpp).
// Algorithm and tile arithmetic: docs/flash_attention.md.
//
// One block per (b, h, query tile of Br rows); blockIdx.x enumerates the heaviest
// tiles (most keys) first, all (b, h) of a tile rank together. Warp w owns m-tiles of
// 16 rows at tile rows mt*16*Warps + 16w. Per thread (lane = 4g + t):
//   Q fragments (A operand) in registers for the whole key loop;
//   per key tile of Bc rows: S = Q K^T into C fragments (K via ldmatrix from swizzled
//   shared memory), online softmax in the exp2 domain on those registers, P re-packed
//   as bf16 A fragments (C fragment of n-blocks 2k, 2k+1 == A fragment of k-block k),
//   O += P V (V via ldmatrix.trans). S and P never touch shared memory.
// K/V tiles arrive by cp.async into a 2-stage ring: tile kt+1 is in flight while tile kt
// computes. Key tiles past the block's last row are skipped, masks applied only where a
// tile crosses an m-tile's diagonal, m-tiles entirely above the diagonal skipped.
// Statistics: m (running max of scale*log2(e)*s, sink included) and l (this lane's part
// of the running sum; the quad's four parts are added in the epilogue), so
// lse = ln2 * (m + log2 l). affine: out = alpha (O / l) + beta prefix, the fp32 prefix
// sums of v coming from prefix_scan_kernel.cuh.
// Arguments: the call's AttentionParams (params.h) as the backend built it, and, for
// affine, `prefix` (B, T, Hkv*D) fp32 sum_{j<=i} v_j from the forward's workspace.
// The steps the sm_90a forward shares (block order, the order of the Q and K/V copies,
// online softmax of a row, epilogue, stores) are in flash_forward_steps.cuh.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention/flash_forward_steps.cuh"
#include "kernels/attention/params.h"
#include "kernels/tc/primitives.cuh"

namespace kdtrain::flash {

// Shared-memory layout and derived counts of one instantiation.
template <int D, int Br, int Bc, int Warps>
struct ForwardLayout {
  static constexpr int kThreads = Warps * tc::kWarpSize;
  static constexpr int kMTiles = Br / (16 * Warps);  // 16-row m-tiles per warp
  static constexpr int kStages = 2;                  // K/V ring depth
  static constexpr int kTileQBytes = Br * D * 2;
  static constexpr int kTileKVBytes = Bc * D * 2;
  static constexpr int kQOffset = 0;  // Q, then the output staging
  static constexpr int kKVOffset = kTileQBytes;  // stage s: K at +2s*KV, V at +(2s+1)*KV
  static constexpr int kSmemBytes = kTileQBytes + kStages * 2 * kTileKVBytes;
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static_assert(Br % (16 * Warps) == 0 && (kMTiles == 1 || kMTiles == 2),
                "each warp owns one or two 16-row m-tiles");
  static_assert(Bc % 16 == 0 && Bc >= 16, "key tiles are whole 16-key mma k-blocks");
  static_assert((Br * D / 8) % kThreads == 0 && (Bc * D / 8) % kThreads == 0,
                "tile loads give every thread the same number of 16-byte chunks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block (sm_90: 227 KB)");
};

namespace fwd_detail {

// rows x D bf16 tile, rows [valid, rows) zero-filled, into swizzled shared memory.
// Thread tid copies the 16-byte chunk tid % (D/8) of rows tid / (D/8) + k * kRowStep:
// consecutive lanes read consecutive chunks of a row (coalesced), and kRowStep is a
// multiple of 8, so every copy of a thread has the same swizzle and its addresses
// differ by constants (few registers). Offsets inside a tile fit in 32 bits (checked
// by the launcher).
struct SwizzledLoad {
  template <int D, int kRows, int kThreads>
  static TC_DEVICE void tile(uint16_t* dst, const uint16_t* src, int row_stride, int valid, int tid) {
    constexpr int kChunks = D / 8, kRowStep = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0, "tile load shape");
    const int r0 = tid / kChunks, col = (tid % kChunks) * 8;
    uint16_t* d = dst + tc::Swizzle<D>::offset(r0, col);
    const uint16_t* s = src + r0 * row_stride + col;
    TC_UNROLL
    for (int k = 0; k < kRows / kRowStep; ++k) {
      const bool ok = r0 + k * kRowStep < valid;
      tc::cp_async_16(d + k * kRowStep * D, ok ? s + k * kRowStep * row_stride : src, ok);
    }
  }
};

}  // namespace fwd_detail

template <int D, int Br, int Bc, int Warps, bool kSink, bool kAffine>
TC_DEVICE void flash_forward_block(const AttentionParams& p, const float* prefix, unsigned char* smem) {
  using L = ForwardLayout<D, Br, Bc, Warps>;
  using Swz = tc::Swizzle<D>;
  using Load = fwd_detail::SwizzledLoad;
  constexpr int kMT = L::kMTiles, kNT = Bc / 8, kDT = D / 8, kKQ = D / 16, kKP = Bc / 16;
  const int T = static_cast<int>(p.T);
  const ForwardBlock blk = forward_block(p, Br);
  const int i0 = blk.i0;
  const int tid = static_cast<int>(tc::thread_idx().x), warp = tid / 32, lane = tid % 32;
  const int qrow = lane / 4, qcol = lane % 4;  // the ISA's groupID, threadID_in_group

  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem + L::kQOffset);
  auto sK = [&](int s) { return reinterpret_cast<uint16_t*>(smem + L::kKVOffset + 2 * s * L::kTileKVBytes); };
  auto sV = [&](int s) { return reinterpret_cast<uint16_t*>(smem + L::kKVOffset + (2 * s + 1) * L::kTileKVBytes); };
  const ForwardRows rows = forward_rows<D, Br, Bc>(p, blk);
  load_first_tiles<Load, D, Br, Bc, L::kThreads>(p, rows, T, i0, sQ, sK(0), sV(0), tid);

  // First query row of each of this warp's m-tiles (block-relative).
  int mrow[kMT];
  TC_UNROLL
  for (int mt = 0; mt < kMT; ++mt) mrow[mt] = mt * 16 * Warps + warp * 16;

  uint32_t qf[kMT][kKQ][4];
  float acc[kMT][kDT][4];
  float m[kMT][2], l[kMT][2];
  // The sink is a key of logit s_h and value 0: it seeds the max and (once per quad) the sum.
  const float m_init = kSink ? p.sinks[blk.h] * kFwdLog2e : -INFINITY;
  TC_UNROLL
  for (int mt = 0; mt < kMT; ++mt) {
    TC_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      m[mt][hh] = m_init;
      l[mt][hh] = (kSink && qcol == 0) ? 1.f : 0.f;
    }
    TC_UNROLL
    for (int d = 0; d < kDT; ++d) acc[mt][d][0] = acc[mt][d][1] = acc[mt][d][2] = acc[mt][d][3] = 0.f;
  }
  const float scale_log2 = p.scale * kFwdLog2e;

  // Q (and tile 0) landed, Q fragments into registers for the whole key loop.
  tc::cp_async_wait<0>();
  tc::sync_block();
  TC_UNROLL
  for (int mt = 0; mt < kMT; ++mt) {
    TC_UNROLL
    for (int kb = 0; kb < kKQ; ++kb)
      tc::ldmatrix<4>(qf[mt][kb], sQ + Swz::offset(mrow[mt] + lane % 16, kb * 16 + (lane / 16) * 8));
  }

  for (int kt = 0; kt < rows.n_kt; ++kt) {
    const int j0 = kt * Bc;
    issue_next_kv<Load, D, Bc, L::kThreads>(p, rows, T, kt, sK, sV, tid);
    tc::cp_async_wait<1>();  // this thread's copies of tile kt (tile kt + 1 stays in flight)
    tc::sync_block();        // ... and everyone's
    const uint16_t* K = sK(kt & 1);
    const uint16_t* V = sV(kt & 1);
    bool active[kMT];  // m-tile has a visible key in this tile (warp-uniform)
    TC_UNROLL
    for (int mt = 0; mt < kMT; ++mt) active[mt] = j0 <= i0 + mrow[mt] + 15;

    // S = Q K^T: per 16 keys and 16 dims one ldmatrix.x4 feeds 2 mma per m-tile.
    float s[kMT][kNT][4];
    TC_UNROLL
    for (int mt = 0; mt < kMT; ++mt) {
      TC_UNROLL
      for (int n = 0; n < kNT; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
    }
    TC_UNROLL
    for (int n2 = 0; n2 < kNT / 2; ++n2) {
      TC_UNROLL
      for (int kb = 0; kb < kKQ; ++kb) {
        uint32_t r[4];
        tc::ldmatrix<4>(r, K + Swz::offset(n2 * 16 + (lane / 16) * 8 + lane % 8, kb * 16 + ((lane / 8) & 1) * 8));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        TC_UNROLL
        for (int mt = 0; mt < kMT; ++mt) {
          if (!active[mt]) continue;
          tc::mma_bf16_16816(s[mt][2 * n2], qf[mt][kb], b0);
          tc::mma_bf16_16816(s[mt][2 * n2 + 1], qf[mt][kb], b1);
        }
      }
    }

    // Online softmax on the C fragments (rows qrow and qrow + 8 of each m-tile).
    TC_UNROLL
    for (int mt = 0; mt < kMT; ++mt) {
      if (!active[mt]) continue;
      const int row_top = i0 + mrow[mt];
      const bool diag = j0 + Bc - 1 > row_top;  // some key of the tile is after some row
      online_softmax_rows<kNT, kDT>(s[mt], acc[mt], diag, j0, row_top, qrow, qcol, scale_log2, m[mt], l[mt]);
    }

    // O += P V: P's A fragment for keys [16k, 16k+16) is the C fragments of n-blocks 2k, 2k+1.
    TC_UNROLL
    for (int kb = 0; kb < kKP; ++kb) {
      uint32_t pf[kMT][4];
      TC_UNROLL
      for (int mt = 0; mt < kMT; ++mt) {
        pf[mt][0] = tc::pack_bf16x2(s[mt][2 * kb][0], s[mt][2 * kb][1]);
        pf[mt][1] = tc::pack_bf16x2(s[mt][2 * kb][2], s[mt][2 * kb][3]);
        pf[mt][2] = tc::pack_bf16x2(s[mt][2 * kb + 1][0], s[mt][2 * kb + 1][1]);
        pf[mt][3] = tc::pack_bf16x2(s[mt][2 * kb + 1][2], s[mt][2 * kb + 1][3]);
      }
      TC_UNROLL
      for (int d2 = 0; d2 < kDT / 2; ++d2) {
        uint32_t r[4];
        tc::ldmatrix<4, true>(r, V + Swz::offset(kb * 16 + ((lane / 8) & 1) * 8 + lane % 8, d2 * 16 + (lane / 16) * 8));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        TC_UNROLL
        for (int mt = 0; mt < kMT; ++mt) {
          if (!active[mt]) continue;
          tc::mma_bf16_16816(acc[mt][2 * d2], pf[mt], b0);
          tc::mma_bf16_16816(acc[mt][2 * d2 + 1], pf[mt], b1);
        }
      }
    }
    tc::sync_block();  // stage kt & 1 is refilled by the next iteration's loads
  }

  // Epilogue: normalise, affine term, stage the bf16 rows in this warp's rows of the Q
  // buffer (read only by this warp, at kt == 0), then 16-byte coalesced stores.
  AffineRow<D, kAffine> aff[kMT][2];
  TC_UNROLL
  for (int mt = 0; mt < kMT; ++mt)
    TC_UNROLL
    for (int hh = 0; hh < 2; ++hh)
      aff[mt][hh] = load_affine_row<D, kAffine>(p, prefix, blk, mrow[mt] + qrow + 8 * hh, qcol);
  TC_UNROLL
  for (int mt = 0; mt < kMT; ++mt) {
    TC_UNROLL
    for (int hh = 0; hh < 2; ++hh)
      forward_epilogue_row<D, kAffine, Swz>(p, aff[mt][hh], acc[mt], hh, blk, mrow[mt] + qrow + 8 * hh, qcol,
                                            m[mt][hh], l[mt][hh], sQ);
  }
  tc::sync_warp();
  TC_UNROLL
  for (int mt = 0; mt < kMT; ++mt) store_warp_rows<D, Swz>(p, blk, mrow[mt], lane, sQ);
}

}  // namespace kdtrain::flash
