// Preprocessing of the fused attention backward: one block per (row chunk of kRowChunk
// rows, kv head g, batch b), 8 warps, every query head of the group. Same two targets as
// flash_backward_kernel.cuh. Per row i and head h (warp per row, lanes over D):
//   D_i = dO_i . (out_i - beta_i S_i)   (= dO'_i.(PV)_i, no division by alpha)
//   lse2_i = lse_i log2(e), alpha_i in fp32; padded rows (T <= i < T_pad): lse2 = +inf,
//   D = alpha = 0, so the main kernel reads whole tiles with no bounds checks
//   affine: sigma_i = dO_i . S_i, and u_i = sum_h beta_ih dO_ih (for the reverse scan)
//   sink: partial(h, b, chunk) = sum_i e^{s_h - lse_i} D_i (warp rows in order, then
//   the warps in order); the last block to finish (an integer counter) adds, per head,
//   the partials over (b, chunk) with a fixed lane stride and butterfly, and subtracts
//   the total from dsinks. The bits never depend on which block finishes last.
#pragma once
#include <cstdint>

#include "kernels/attention/flash_backward_args.h"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"

namespace kdtrain::flash_bwd {

constexpr int kPrepWarps = 8;
constexpr int kPrepThreads = 32 * kPrepWarps;
constexpr int kPrepRowsPerWarp = flash::kRowChunk / kPrepWarps;
static_assert(flash::kRowChunk % kPrepWarps == 0, "rows of a chunk split evenly over the warps");

struct PrepLayout {
  static constexpr size_t kPart = 0;                                // kPrepWarps floats
  static constexpr size_t kLast = kPart + sizeof(float) * kPrepWarps;  // one int
  static constexpr size_t kBytes = kLast + 16;
};

// What one head's pass over a warp's rows reads (lane: kPer columns of each), loaded for
// every row before any of them is reduced and stored: a store between two rows' loads
// would order the second row's loads after it, one memory round trip per row.
template <int D, bool kSink, bool kAffine>
struct PrepRows {
  static constexpr int kPer = D / 32;
  float dout[kPrepRowsPerWarp][kPer], out[kPrepRowsPerWarp][kPer];
  float lse[kPrepRowsPerWarp], alpha[kPrepRowsPerWarp];
  float alpha_ma = 0.f, sink = 0.f;  // the head's (affine, sink)
};

// Affine: the prefix sums of v (vsum) of the warp's rows, the kv head's, so loaded once for
// all the group's query heads (per head they were half of affine's prep traffic: fp32
// against dO's and out's bf16; on the H200, 2026-11-28, the affine prep took 0.205 ms
// against the baseline's 0.068 at D 64).
template <int D, bool kAffine>
struct PrepVsum {
  static constexpr int kS = kAffine ? D / 32 : 1;
  alignas(4 * kS) float s[kPrepRowsPerWarp][kS];  // each row one vector copy
};

template <int D, bool kAffine>
TC_DEVICE PrepVsum<D, kAffine> load_prep_vsum(const flash::BwdArgs& a, int64_t b, int64_t g, int64_t i_first) {
  PrepVsum<D, kAffine> v{};
  if constexpr (kAffine) {
    constexpr int kPer = D / 32;
    TC_UNROLL
    for (int r = 0; r < kPrepRowsPerWarp; ++r) {
      const int64_t i = i_first + r;
      if (i >= a.p.T) continue;  // padding: never read
      tc::copy_vec<kPer>(v.s[r], a.vsum + ((b * a.p.T + i) * a.p.Hkv + g) * D + tc::lane_id() * kPer);
    }
  }
  return v;
}

template <int D, bool kSink, bool kAffine>
TC_DEVICE PrepRows<D, kSink, kAffine> load_prep_rows(const flash::BwdArgs& a, int64_t b, int64_t h,
                                                     int64_t i_first) {
  constexpr int kPer = PrepRows<D, kSink, kAffine>::kPer;
  const flash::AttentionParams& p = a.p;
  const int lane = tc::lane_id();
  PrepRows<D, kSink, kAffine> in;
  if constexpr (kAffine) in.alpha_ma = p.alpha_ma[h];
  if constexpr (kSink) in.sink = p.sinks[h];
  TC_UNROLL
  for (int r = 0; r < kPrepRowsPerWarp; ++r) {
    const int64_t i = i_first + r;
    if (i >= p.T) continue;  // padding: never read
    const int64_t o = b * p.o_batch + i * p.o_token + h * D + lane * kPer;
    // One vector copy each (4 or 8 bytes; rows are 16-byte aligned).
    alignas(2 * kPer) uint16_t dout[kPer], out[kPer];
    tc::copy_vec<kPer>(dout, p.dout + o);
    tc::copy_vec<kPer>(out, p.out + o);
    TC_UNROLL
    for (int k = 0; k < kPer; ++k) {
      in.dout[r][k] = tc::bf16_to_float(dout[k]);
      in.out[r][k] = tc::bf16_to_float(out[k]);
    }
    in.lse[r] = p.lse[b * p.lse_batch + h * p.lse_head + i];
    if constexpr (kAffine) in.alpha[r] = tc::bf16_to_float(p.alpha[b * p.alpha_batch + i * p.alpha_token + h]);
  }
  return in;
}

template <int D, bool kSink, bool kAffine>
TC_DEVICE void bwd_prep(const flash::BwdArgs& a, unsigned char* smem) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int kPer = D / 32;  // columns per lane, contiguous
  static_assert(D % 32 == 0, "lanes split the head dim evenly");
  const flash::AttentionParams& p = a.p;
  const int warp = tc::warp_id(), lane = tc::lane_id();
  const int64_t chunk = tc::block_idx().x, g = tc::block_idx().y, b = tc::block_idx().z;
  const int64_t i_first = chunk * flash::kRowChunk + warp * kPrepRowsPerWarp;
  auto* part = reinterpret_cast<float*>(smem + PrepLayout::kPart);

  alignas(4 * kPer) float u[kPrepRowsPerWarp][kPer];  // affine: sum over the group's heads of beta dO
  TC_UNROLL
  for (int r = 0; r < kPrepRowsPerWarp; ++r)
    TC_UNROLL
    for (int k = 0; k < kPer; ++k) u[r][k] = 0.f;

  const PrepVsum<D, kAffine> vsum = load_prep_vsum<D, kAffine>(a, b, g, i_first);
  for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
    const PrepRows<D, kSink, kAffine> in = load_prep_rows<D, kSink, kAffine>(a, b, h, i_first);
    float sink_acc = 0.f;  // lane 0: this warp's rows, in order
    TC_UNROLL
    for (int r = 0; r < kPrepRowsPerWarp; ++r) {
      const int64_t i = i_first + r;
      const int64_t row = (b * p.H + h) * a.T_pad + i;
      if (i >= p.T) {
        if (lane == 0) {
          a.lse2[row] = tc::bits_to_float(0x7f800000u);  // +inf
          a.drow[row] = 0.f;
          if constexpr (kAffine) {
            a.alpha_f[row] = 0.f;
            a.sigma[row] = 0.f;
          }
        }
        continue;
      }
      float beta = 0.f, alpha = 1.f;
      if constexpr (kAffine) {
        alpha = in.alpha[r];
        beta = (in.alpha_ma - alpha) / flash::affine_bias_count(p, i);
      }
      float dsum = 0.f, ssum = 0.f;
      TC_UNROLL
      for (int k = 0; k < kPer; ++k) {
        const float go = in.dout[r][k];
        float y = in.out[r][k];
        if constexpr (kAffine) {
          const float s = vsum.s[r][k];
          y -= beta * s;
          ssum += go * s;
          u[r][k] += beta * go;
        }
        dsum += go * y;
      }
      dsum = tc::warp_sum(dsum);
      if constexpr (kAffine) ssum = tc::warp_sum(ssum);
      const float lse = in.lse[r];
      if (lane == 0) {
        a.lse2[row] = lse * kLog2e;
        a.drow[row] = dsum;
        if constexpr (kAffine) {
          a.alpha_f[row] = alpha;
          a.sigma[row] = ssum;
        }
        if constexpr (kSink) sink_acc += tc::exp2_approx((in.sink - lse) * kLog2e) * dsum;
      }
    }
    if constexpr (kSink) {
      if (lane == 0) part[warp] = sink_acc;
      tc::sync_block();
      if (warp == 0 && lane == 0) {
        float total = 0.f;
        for (int w = 0; w < kPrepWarps; ++w) total += part[w];
        a.sink_part[(h * p.B + b) * a.n_chunks + chunk] = total;
      }
      tc::sync_block();  // part[] is reused by the next head
    }
  }

  // affine: u_i, summed over the group's heads.
  if constexpr (kAffine) {
    TC_UNROLL
    for (int r = 0; r < kPrepRowsPerWarp; ++r) {
      const int64_t i = i_first + r;
      if (i >= p.T) continue;
      tc::store_global_vec<kPer>(a.u + ((b * p.T + i) * p.Hkv + g) * D + lane * kPer, u[r]);
    }
  }

  if constexpr (kSink) {
    // The last block of the grid reduces the partials; the counter is integer.
    auto* is_last = reinterpret_cast<int*>(smem + PrepLayout::kLast);
    const int64_t blocks = static_cast<int64_t>(tc::grid_dim().x) * tc::grid_dim().y * tc::grid_dim().z;
    if (warp == 0 && lane == 0) {
      tc::fence_gpu();  // this block's partials before its count
      *is_last = tc::atomic_add(a.ints + flash::BwdWorkspace::kSinkDone, 1) == blocks - 1;
    }
    tc::sync_block();
    if (!*is_last || p.dsinks == nullptr) return;
    tc::fence_gpu();
    const int64_t n = p.B * a.n_chunks;
    for (int64_t h = warp; h < p.H; h += kPrepWarps) {
      float acc = 0.f;
      for (int64_t k = lane; k < n; k += 32) acc += tc::load_cg(a.sink_part + h * n + k);
      acc = tc::warp_sum(acc);
      if (lane == 0) p.dsinks[h] -= acc;
    }
  }
}

}  // namespace kdtrain::flash_bwd
