// CPU mirror of the fused attention backward (kernels/attention/flash_backward.cu). Algorithm
// and numerics: flash_mirror.h and docs/flash_attention.md. The loops are written
// the way the CUDA kernel walks the tiles (work item = one CUDA block), with scalar inner
// products in place of the tensor-core tile products.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "oracles/flash_mirror.h"
#include "oracles/flash_mirror_common.h"
#include "oracles/flash_mirror_prefix_scan.h"
#include "kernels/attention/flash_backward_schedule.h"

namespace kdtrain::cpu {

namespace {

using namespace flash_mirror;

// Buffers the preprocessing produces for the main pass (the CUDA workspace, in T).
template <typename T>
struct Workspace {
  std::vector<T> drow;    // (B, H, T) D_i = dO'_i . (PV)_i
  std::vector<T> sigma;   // (B, H, T) dO_i . S_i                              [affine]
  std::vector<T> vsum;    // (B, T, Hkv, D) S_i, then R_j                      [affine]
  std::vector<T> u;       // (B, T, Hkv, D) u_i = sum_h beta_ih dO_ih           [affine]
  std::vector<T> dq_acc;  // (B, H, T, D) dq accumulated over key tiles
  std::vector<T> rs_acc;  // (B, H, T) sum_j P_ij dPraw_ij accumulated          [affine]
};

// Preprocessing, as the CUDA preprocessing kernels do it:
//  - affine: S_i = sum_{j<=i} v_j per (b, kv head) (the forward chunked scan);
//  - per (b, kv head, chunk of kRowChunk rows), every head h of the group:
//      D_ih = dO_ih . (out_ih - beta_ih S_i)   [= dO'.(PV), no division by alpha]
//      sigma_ih = dO_ih . S_i, and u_i = sum_h beta_ih dO_ih               [affine]
//      sink partial(h, b, chunk) = sum_i e^{s_h - lse_ih} D_ih             [sink]
//  - sink: dsinks_h -= sum over (b, chunk) of the partials, in that fixed order;
//  - affine: R_j = sum_{i>=j} u_i (the reverse chunked scan).
template <typename T, typename Flags>
void preprocess(Workspace<T>& ws, T* dsinks, const T* dout, const T* qkv, const T* out,
                const T* lse, const T* sinks, const T* alpha, const T* alpha_ma, const FlashParams& p) {
  constexpr bool kSink = Flags::kSink, kAffine = Flags::kAffine;
  const Views<T> ix{p};
  const int64_t B = p.B, Tn = p.T, H = p.H, Hkv = p.Hkv, D = p.D;
  const int64_t n_chunks = ceil_div(Tn, flash::kRowChunk);
  auto vsum = [&](int64_t b, int64_t i, int64_t g) { return ws.vsum.data() + ((b * Tn + i) * Hkv + g) * D; };
  // The v rows of a token are the Hkv * D contiguous values at v_offset.
  if constexpr (kAffine)
    chunked_prefix_scan<T>(ws.vsum.data(), qkv + p.v_offset, B, Tn, Hkv * D, p.qkv_token, p.qkv_batch, false);
  std::vector<T> partial(kSink ? static_cast<size_t>(H * B * n_chunks) : 0);
#pragma omp parallel
  {
    std::vector<T> u(kAffine ? static_cast<size_t>(flash::kRowChunk * D) : 0);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < B * Hkv * n_chunks; ++item) {
      const int64_t b = item / (Hkv * n_chunks), g = (item / n_chunks) % Hkv, c = item % n_chunks;
      const int64_t i0 = c * flash::kRowChunk, i_end = std::min<int64_t>(Tn, i0 + flash::kRowChunk);
      std::fill(u.begin(), u.end(), T(0));
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
        T sink_acc = 0;
        for (int64_t i = i0; i < i_end; ++i) {
          const int64_t r = ix.row(b, h, i);
          const T* dO = dout + ix.o(b, i, h);
          const T* o = out + ix.o(b, i, h);
          if constexpr (kAffine) {
            const T* si = vsum(b, i, g);
            const T beta = (alpha_ma[h] - alpha[ix.a(b, i, h)]) / flash::affine_bias_count<T>(p, i);
            T dsum = 0, ssum = 0;
            for (int64_t d = 0; d < D; ++d) {
              dsum += dO[d] * (o[d] - beta * si[d]);
              ssum += dO[d] * si[d];
              u[(i - i0) * D + d] += beta * dO[d];
            }
            ws.drow[r] = dsum;
            ws.sigma[r] = ssum;
          } else {
            ws.drow[r] = dot(dO, o, D);
          }
          if constexpr (kSink) sink_acc += std::exp(sinks[h] - lse[r]) * ws.drow[r];
        }
        if constexpr (kSink) partial[(h * B + b) * n_chunks + c] = sink_acc;
      }
      if constexpr (kAffine)
        for (int64_t i = i0; i < i_end; ++i)
          std::copy_n(u.data() + (i - i0) * D, D, ws.u.data() + ((b * Tn + i) * Hkv + g) * D);
    }
  }
  if constexpr (kSink) {
    if (dsinks != nullptr) {
      for (int64_t h = 0; h < H; ++h) {
        T acc = 0;
        for (int64_t k = 0; k < B * n_chunks; ++k) acc += partial[h * B * n_chunks + k];
        dsinks[h] -= acc;
      }
    }
  }
  if constexpr (kAffine)
    chunked_prefix_scan<T>(ws.vsum.data(), ws.u.data(), B, Tn, Hkv * D, Hkv * D, Tn * Hkv * D, true);
}

// The main pass: one work item per (b, kv head, key tile), walked as flash_backward_schedule.h
// says. Items of one (b, kv head) run in key-tile order on one thread, which is the
// order the CUDA semaphores enforce on the dq accumulator.
template <typename T, typename Flags>
void main_pass(Workspace<T>& ws, T* dqkv, T* dalpha, const T* dout, const T* qkv, const T* lse,
               const T* alpha, const FlashParams& p, T scale, flash::FlashTiles tiles) {
  constexpr bool kAffine = Flags::kAffine;
  const Views<T> ix{p};
  const int64_t Tn = p.T, Hkv = p.Hkv, D = p.D;
  const flash::BwdSchedule sc = flash::make_bwd_schedule(p, tiles, 1);
  const int64_t Br = sc.Br, Bc = sc.Bc;
#pragma omp parallel
  {
    std::vector<T> dk(static_cast<size_t>(Bc * D)), dv(static_cast<size_t>(Bc * D));
    std::vector<T> dq(static_cast<size_t>(Br * D)), rs(static_cast<size_t>(Br));
#pragma omp for schedule(dynamic)
    for (int64_t grp = 0; grp < sc.groups; ++grp) {
      const int64_t b = grp / Hkv, g = grp % Hkv;
      for (int kt = 0; kt < sc.n_kt; ++kt) {
        const int64_t j0 = kt * Bc, cols = std::min(Bc, Tn - j0);
        std::fill(dk.begin(), dk.end(), T(0));
        std::fill(dv.begin(), dv.end(), T(0));
        for (int64_t s = 0; s < sc.steps(kt); ++s) {
          const flash::BwdStep st = sc.step(static_cast<int>(s));
          const int64_t h = g * p.group + st.head_in_group;
          const int64_t i0 = st.qt * Br, rows = std::min(Br, Tn - i0);
          const bool masked = sc.masked(st.qt, kt);
          std::fill(dq.begin(), dq.end(), T(0));
          std::fill(rs.begin(), rs.end(), T(0));
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t j = j0 + c;
            const T* kj = ix.k(qkv, b, j, g);
            const T* vj = ix.v(qkv, b, j, g);
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t i = i0 + r;
              if (masked && j > i) continue;
              const T* qi = ix.q(qkv, b, i, h);
              const T* dO = dout + ix.o(b, i, h);
              const T a = kAffine ? alpha[ix.a(b, i, h)] : T(1);
              const T pij = std::exp(scale * dot(qi, kj, D) - lse[ix.row(b, h, i)]);
              const T dpraw = dot(dO, vj, D);
              const T ds = pij * (a * dpraw - ws.drow[ix.row(b, h, i)]);
              if constexpr (kAffine) rs[r] += pij * dpraw;
              for (int64_t d = 0; d < D; ++d) {
                dv[c * D + d] += (a * pij) * dO[d];
                dk[c * D + d] += ds * qi[d];
                dq[r * D + d] += ds * kj[d];
              }
            }
          }
          // The contribution of key tile kt to dq of (b, h, qt): stored by the first
          // contributor, added by the next ones, finished by the last.
          const bool first = kt == 0, last = kt == sc.last_kt(st.qt);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            T* acc = ws.dq_acc.data() + ix.row(b, h, i) * D;
            for (int64_t d = 0; d < D; ++d) acc[d] = first ? dq[r * D + d] : acc[d] + dq[r * D + d];
            if constexpr (kAffine) {
              T& racc = ws.rs_acc[ix.row(b, h, i)];
              racc = first ? rs[r] : racc + rs[r];
            }
            if (!last) continue;
            T* dqi = dqkv + (ix.q(qkv, b, i, h) - qkv);
            for (int64_t d = 0; d < D; ++d) dqi[d] = scale * acc[d];
            // dalpha_i = dO_i . ((PV)_i - S_i / N_i), (PV)_i . dO_i = sum_j P_ij dPraw_ij.
            if constexpr (kAffine)
              dalpha[ix.a(b, i, h)] = ws.rs_acc[ix.row(b, h, i)] - ws.sigma[ix.row(b, h, i)] / flash::affine_bias_count<T>(p, i);
          }
        }
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = j0 + c;
          T* dkj = dqkv + (ix.k(qkv, b, j, g) - qkv);
          T* dvj = dqkv + (ix.v(qkv, b, j, g) - qkv);
          const T* rj = kAffine ? ws.vsum.data() + ((b * Tn + j) * Hkv + g) * D : nullptr;
          for (int64_t d = 0; d < D; ++d) {
            dkj[d] = scale * dk[c * D + d];
            dvj[d] = kAffine ? dv[c * D + d] + rj[d] : dv[c * D + d];
          }
        }
      }
    }
  }
}

template <typename T, typename Flags>
void backward_impl(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv, const T* out,
                   const T* lse, const T* sinks, const T* alpha, const T* alpha_ma,
                   const FlashParams& p, T scale, flash::FlashTiles tiles) {
  constexpr bool kAffine = Flags::kAffine;
  const size_t rows = static_cast<size_t>(p.B * p.H * p.T);
  Workspace<T> ws;
  ws.drow.resize(rows);
  ws.dq_acc.resize(rows * static_cast<size_t>(p.D));
  if constexpr (kAffine) {
    ws.sigma.resize(rows);
    ws.vsum.resize(static_cast<size_t>(p.B * p.T * p.Hkv * p.D));
    ws.u.resize(ws.vsum.size());
    ws.rs_acc.resize(rows);
  }
  preprocess<T, Flags>(ws, dsinks, dout, qkv, out, lse, sinks, alpha, alpha_ma, p);
  main_pass<T, Flags>(ws, dqkv, dalpha, dout, qkv, lse, alpha, p, scale, tiles);
}

}  // namespace

template <typename T>
void flash_attention_backward(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv,
                              const T* out, const T* lse, const T* sinks, const T* alpha,
                              const T* alpha_ma, AttentionShape dims, T scale, AttentionFeatures features,
                              FlashTileOverride tiles) {
  run_pass(FlashPass::backward, dims, scale, features, tiles, [&](auto flags, const FlashParams& p, auto t) {
    backward_impl<T, decltype(flags)>(dqkv, dsinks, dalpha, dout, qkv, out, lse, sinks, alpha, alpha_ma, p,
                                      scale, t);
  });
}

template void flash_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                              const float*, const float*, const float*,
                                              const float*, const float*, AttentionShape, float,
                                              AttentionFeatures, FlashTileOverride);
template void flash_attention_backward<double>(double*, double*, double*, const double*,
                                               const double*, const double*, const double*,
                                               const double*, const double*, const double*,
                                               AttentionShape, double, AttentionFeatures,
                                               FlashTileOverride);

}  // namespace kdtrain::cpu
