// The steps both fused forwards share (mma.sync: flash_forward_kernel.cuh; wgmma:
// flash_forward_sm90a_kernel.cuh): which block is which tile, the order of its Q and K/V
// copies (through the kernel's own tile loader), the online softmax of one row on its
// score fragment, the epilogue of one row (normalise, affine term, bf16 staging, lse) and
// the coalesced store of a warp's 16 staged rows. The kernels differ in how S and O are
// produced and in their shared-memory layout, not in these.
//
// Fragments: a thread holds rows qrow and qrow + 8 (hh = 0, 1) of a 16-row tile, columns
// 8n + 2*qcol and + 1 of n-block n, as registers 2hh and 2hh + 1 of that n-block's four.
// mma.sync keeps one float[4] per n-block, wgmma one flat array in the same order; frag()
// reads either.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention/params.h"
#include "kernels/tc/primitives.cuh"

namespace kdtrain::flash {

constexpr float kFwdLog2e = 1.4426950408889634f, kFwdLn2 = 0.6931471805599453f;

// Register k of n-block n of a C (or accumulator) fragment.
template <int N>
TC_DEVICE float& frag(float (&f)[N][4], int n, int k) {
  return f[n][k];
}
template <int N>
TC_DEVICE float& frag(float (&f)[N], int n, int k) {
  return f[4 * n + k];
}

// Grid of one call: one block per (b, h, query tile).
constexpr int64_t forward_query_tiles(int64_t T, int Br) { return (T + Br - 1) / Br; }
constexpr int64_t forward_blocks(const FlashParams& p, int Br) {
  return forward_query_tiles(p.T, Br) * p.B * p.H;
}

// This block's (b, h, kv head g, first query row i0): blockIdx.x enumerates the heaviest
// tiles (most keys) first, all (b, h) of a tile rank together.
struct ForwardBlock {
  int64_t b, h, g;
  int i0;
};
TC_DEVICE ForwardBlock forward_block(const FlashParams& p, int Br) {
  const int64_t heads = p.B * p.H, linear = tc::block_idx().x;
  const int qt = static_cast<int>(forward_query_tiles(p.T, Br) - 1 - linear / heads);
  const int64_t b = (linear % heads) / p.H, h = linear % p.H, g = h / p.group;
  return ForwardBlock{b, h, g, qt * Br};
}

// The block's global rows in qkv (q of head h, k and v of kv head g, each from token 0;
// rows p.qkv_token elements apart, `ld` for the loaders) and the key tiles that reach
// its last query row. ld is computed once here: read again inside the key loop, ptxas
// spends 7 more registers on the mma.sync D 128 affine forward.
struct ForwardRows {
  const uint16_t *q, *k, *v;
  int n_kt, ld;
};
template <int D, int Br, int Bc>
TC_DEVICE ForwardRows forward_rows(const AttentionParams& p, const ForwardBlock& blk) {
  const uint16_t* q = p.qkv + blk.b * p.qkv_batch + blk.h * D;
  const uint16_t* k = p.qkv + blk.b * p.qkv_batch + p.k_offset + blk.g * D;
  const uint16_t* v = p.qkv + blk.b * p.qkv_batch + p.v_offset + blk.g * D;
  const int T = static_cast<int>(p.T), i0 = blk.i0;
  const int kend = T < i0 + Br ? T : i0 + Br;  // keys past the last row are never visible
  return ForwardRows{q, k, v, (kend + Bc - 1) / Bc, static_cast<int>(p.qkv_token)};
}

// The cp.async order both forwards share, through the kernel's tile loader
// Load::tile<D, kRows, kThreads>(dst, src, row_stride, valid_rows, tid) (its shared-memory
// layout is the kernel's). First group: the block's Br query rows and key tile 0.
template <typename Load, int D, int Br, int Bc, int kThreads>
TC_DEVICE void load_first_tiles(const AttentionParams& p, const ForwardRows& r, int T, int i0, uint16_t* sQ, uint16_t* sK,
                                uint16_t* sV, int tid) {
  const int ld = r.ld;
  Load::template tile<D, Br, kThreads>(sQ, r.q + static_cast<int64_t>(i0) * p.qkv_token, ld, T - i0, tid);
  Load::template tile<D, Bc, kThreads>(sK, r.k, ld, T, tid);
  Load::template tile<D, Bc, kThreads>(sV, r.v, ld, T, tid);
  tc::cp_async_commit();
}

// Then, per key tile kt: tile kt + 1, if any, into stage (kt + 1) & 1 (sK(s), sV(s): the
// kernel's stage addresses) as one group (empty past the last tile, so the count stays
// right). The caller waits for this thread's copies of tile kt (before or after this
// issue) and its block barrier makes them everyone's.
template <typename Load, int D, int Bc, int kThreads, typename StageK, typename StageV>
TC_DEVICE void issue_next_kv(const AttentionParams& p, const ForwardRows& r, int T, int kt, const StageK& sK,
                             const StageV& sV, int tid) {
  const int j0 = kt * Bc, ld = r.ld;
  if (kt + 1 < r.n_kt) {
    const int64_t next = static_cast<int64_t>(j0 + Bc) * p.qkv_token;
    Load::template tile<D, Bc, kThreads>(sK((kt + 1) & 1), r.k + next, ld, T - j0 - Bc, tid);
    Load::template tile<D, Bc, kThreads>(sV((kt + 1) & 1), r.v + next, ld, T - j0 - Bc, tid);
  }
  tc::cp_async_commit();
}

// Online softmax of row `row` (half hh of the fragment) over key tile j0 of kNT n-blocks,
// in the exp2 domain: masks keys after the row (kMask: the tile crosses the diagonal; an
// instantiation of its own, so tiles below the diagonal run no mask instructions), turns
// s into P (unnormalised, relative to the new max) and updates m and l. Returns the
// factor the row's output accumulator must be multiplied by before this tile's P V is
// added (online_softmax_row applies it at once; the pipelined wgmma forward once the
// previous tile's P V has retired).
template <bool kMask, int kNT, typename S>
TC_DEVICE float softmax_row_scores(S& s, int hh, int j0, int row, int qcol, float scale_log2, float& m, float& l) {
  float mx = -INFINITY;
  TC_UNROLL
  for (int n = 0; n < kNT; ++n) {
    TC_UNROLL
    for (int e = 0; e < 2; ++e) {
      float& x = frag(s, n, 2 * hh + e);
      if (kMask && j0 + n * 8 + 2 * qcol + e > row) x = -INFINITY;
      mx = fmaxf(mx, x);
    }
  }
  // max commutes with the positive scale, so this is the max of the scaled logits.
  const float m_new = fmaxf(m, tc::quad_max(mx) * scale_log2);
  const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no NaN from -inf - -inf
  const float corr = tc::exp2_approx(m - m_use);
  m = m_new;
  float sum = 0.f;
  TC_UNROLL
  for (int n = 0; n < kNT; ++n) {
    TC_UNROLL
    for (int e = 0; e < 2; ++e) {
      float& x = frag(s, n, 2 * hh + e);
      x = tc::exp2_approx(fmaf(x, scale_log2, -m_use));
      sum += x;
    }
  }
  l = l * corr + sum;
  return corr;
}

// Row hh's output accumulator (kDT n-blocks) times the factor softmax_row_scores returned.
template <int kDT, typename O>
TC_DEVICE void rescale_output_row(O& o, int hh, float corr) {
  TC_UNROLL
  for (int d = 0; d < kDT; ++d) {
    frag(o, d, 2 * hh) *= corr;
    frag(o, d, 2 * hh + 1) *= corr;
  }
}

// softmax_row_scores of both rows of a warp's 16-row fragment (rows row_top + qrow and
// + 8): the masked instantiation only where the tile crosses the diagonal of those rows
// (`diag`, warp-uniform), the unmasked one on every tile below it. corr: each row's factor.
template <int kNT, typename S>
TC_DEVICE void softmax_rows_scores(S& s, bool diag, int j0, int row_top, int qrow, int qcol, float scale_log2,
                                   float (&m)[2], float (&l)[2], float (&corr)[2]) {
  if (diag) {
    TC_UNROLL
    for (int hh = 0; hh < 2; ++hh)
      corr[hh] = softmax_row_scores<true, kNT>(s, hh, j0, row_top + qrow + 8 * hh, qcol, scale_log2, m[hh], l[hh]);
  } else {
    TC_UNROLL
    for (int hh = 0; hh < 2; ++hh)
      corr[hh] = softmax_row_scores<false, kNT>(s, hh, j0, row_top + qrow + 8 * hh, qcol, scale_log2, m[hh], l[hh]);
  }
}

// The same, with the output accumulator (kDT n-blocks) rescaled at once.
template <int kNT, int kDT, typename S, typename O>
TC_DEVICE void online_softmax_rows(S& s, O& o, bool diag, int j0, int row_top, int qrow, int qcol, float scale_log2,
                                   float (&m)[2], float (&l)[2]) {
  float corr[2];
  softmax_rows_scores<kNT>(s, diag, j0, row_top, qrow, qcol, scale_log2, m, l, corr);
  TC_UNROLL
  for (int hh = 0; hh < 2; ++hh) rescale_output_row<kDT>(o, hh, corr[hh]);
}

// Affine term of one epilogue row: alpha_i, beta_i and the prefix-sum pairs this lane
// adds. The caller loads every row's before it stages any: a store between two rows'
// loads would order the second row's loads after it, one memory round trip per row.
template <int D, bool kAffine>
struct AffineRow {
  float alpha = 1.f, beta = 0.f;
  float pre[kAffine ? D / 8 : 1][2];  // rows past T: not loaded, never read
};

template <int D, bool kAffine>
TC_DEVICE AffineRow<D, kAffine> load_affine_row(const AttentionParams& p, const float* prefix,
                                                const ForwardBlock& blk, int local, int qcol) {
  AffineRow<D, kAffine> t;
  if constexpr (kAffine) {
    const int row = blk.i0 + local;
    if (row < static_cast<int>(p.T)) {
      const float* pre = prefix + (blk.b * p.T + row) * (p.Hkv * D) + blk.g * D;
      const int64_t at = blk.b * p.alpha_batch + static_cast<int64_t>(row) * p.alpha_token + blk.h;
      const float alpha = tc::bf16_to_float(p.alpha[at]);
      TC_UNROLL
      for (int d = 0; d < D / 8; ++d) {
        t.pre[d][0] = pre[d * 8 + 2 * qcol];
        t.pre[d][1] = pre[d * 8 + 2 * qcol + 1];
      }
      t.alpha = alpha;
      t.beta = (p.alpha_ma[blk.h] - alpha) / affine_bias_count(p, row);
    }
  }
  return t;
}

// Epilogue of row i0 + local (half hh of the fragment): out = o / l, affine
// alpha_i (o / l) + beta_i prefix_i (`aff`, from load_affine_row), staged as bf16 pairs at
// Tile::offset(local, col) of sQ; lse = ln2 (m + log2 l) written by the quad's first lane.
// Rows past T stage whatever they hold and are never stored.
template <int D, bool kAffine, typename Tile, typename O>
TC_DEVICE void forward_epilogue_row(const AttentionParams& p, const AffineRow<D, kAffine>& aff, O& o, int hh,
                                    const ForwardBlock& blk, int local, int qcol, float m, float l,
                                    uint16_t* sQ) {
  constexpr int kDT = D / 8;
  const int T = static_cast<int>(p.T), row = blk.i0 + local;
  const float l_row = tc::quad_sum(l);
  const float inv = 1.f / l_row;
  TC_UNROLL
  for (int d = 0; d < kDT; ++d) {
    const int col = d * 8 + 2 * qcol;
    float o0 = frag(o, d, 2 * hh) * inv, o1 = frag(o, d, 2 * hh + 1) * inv;
    if constexpr (kAffine) {
      if (row < T) {
        o0 = aff.alpha * o0 + aff.beta * aff.pre[d][0];
        o1 = aff.alpha * o1 + aff.beta * aff.pre[d][1];
      }
    }
    *reinterpret_cast<uint32_t*>(sQ + Tile::offset(local, col)) = tc::pack_bf16x2(o0, o1);
  }
  if (qcol == 0 && row < T)
    p.lse[blk.b * p.lse_batch + blk.h * p.lse_head + row] = kFwdLn2 * (m + tc::log2_approx(l_row));
}

// The warp's 16 staged rows [local0, local0 + 16) to out, 16-byte coalesced stores
// (the caller syncs the warp after staging).
template <int D, typename Tile>
TC_DEVICE void store_warp_rows(const AttentionParams& p, const ForwardBlock& blk, int local0, int lane,
                               const uint16_t* sQ) {
  constexpr int kChunks = D / 8;
  const int T = static_cast<int>(p.T);
  TC_UNROLL
  for (int it = 0; it < 16 * kChunks / 32; ++it) {
    const int c = lane + 32 * it, local = local0 + c / kChunks, col = (c % kChunks) * 8;
    const int row = blk.i0 + local;
    if (row < T)
      tc::copy16(p.out + blk.b * p.o_batch + static_cast<int64_t>(row) * p.o_token + blk.h * D + col,
                 sQ + Tile::offset(local, col));
  }
}

}  // namespace kdtrain::flash
