// CPU mirror of the fused attention forward (kernels/flash_attention_fwd.cu). Algorithm
// and numerics: cpu_flash_attention.h and docs/flash_attention.md. The loops are written
// the way the CUDA kernel walks the tiles (work item = one CUDA block), with scalar inner
// products in place of the tensor-core tile products.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_flash_attention.h"
#include "backend/cpu/cpu_flash_attention_common.h"

namespace kdtrain::cpu {

namespace {

using namespace flash_mirror;

template <typename T, typename Flags>
void forward_impl(T* out, T* lse, const T* qkv, const T* sinks, const T* alpha, const T* alpha_ma,
                  const FlashParams& p, T scale, flash::FlashTiles tiles) {
  constexpr bool kSink = Flags::kSink, kAffine = Flags::kAffine;
  const Views<T> ix{p};
  const int64_t Tn = p.T, D = p.D, Br = tiles.Br, Bc = tiles.Bc;
  const int64_t n_qt = ceil_div(Tn, Br);
  const T neg_inf = -std::numeric_limits<T>::infinity();

#pragma omp parallel
  {
    std::vector<T> s(static_cast<size_t>(Br * Bc)), acc(static_cast<size_t>(Br * D));
    std::vector<T> m(static_cast<size_t>(Br)), l(static_cast<size_t>(Br));
    std::vector<T> vfull(kAffine ? static_cast<size_t>(D) : 0);
    std::vector<T> vpart(kAffine ? static_cast<size_t>(Br * D) : 0);
    // Work items are independent, so the schedule cannot change any result.
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < p.B * p.H * n_qt; ++item) {
      const int64_t b = item / (p.H * n_qt), h = (item / n_qt) % p.H, qt = item % n_qt;
      const int64_t g = h / p.group, i0 = qt * Br, rows = std::min(Br, Tn - i0);
      for (int64_t r = 0; r < rows; ++r) {
        // The sink is a key with logit s_h and value 0: it starts the running max and sum.
        m[r] = kSink ? sinks[h] : neg_inf;
        l[r] = kSink ? T(1) : T(0);
      }
      std::fill(acc.begin(), acc.end(), T(0));
      if constexpr (kAffine) {
        std::fill(vfull.begin(), vfull.end(), T(0));
        std::fill(vpart.begin(), vpart.end(), T(0));
      }
      // Key tiles [j0, j0 + Bc) with j0 <= last row of the tile; later ones are fully masked.
      for (int64_t j0 = 0; j0 < i0 + rows; j0 += Bc) {
        const int64_t cols = std::min(Bc, Tn - j0);
        const bool full = j0 + cols - 1 <= i0;  // every key visible to every row
        for (int64_t r = 0; r < rows; ++r) {
          const T* qi = ix.q(qkv, b, i0 + r, h);
          for (int64_t c = 0; c < cols; ++c) {
            const bool visible = full || j0 + c <= i0 + r;
            s[r * Bc + c] = visible ? scale * dot(qi, ix.k(qkv, b, j0 + c, g), D) : neg_inf;
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          T* sr = s.data() + r * Bc;
          T mx = m[r];
          for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, sr[c]);
          // m[r] = -inf only before the first tile without a sink; key 0 is always
          // visible, so mx is finite from the first tile on.
          const T corr = m[r] == neg_inf ? T(0) : std::exp(m[r] - mx);
          T rowsum = 0;
          for (int64_t c = 0; c < cols; ++c) {
            sr[c] = sr[c] == neg_inf ? T(0) : std::exp(sr[c] - mx);
            rowsum += sr[c];
          }
          l[r] = l[r] * corr + rowsum;
          m[r] = mx;
          T* ar = acc.data() + r * D;
          for (int64_t d = 0; d < D; ++d) ar[d] *= corr;
          for (int64_t c = 0; c < cols; ++c) {
            if (sr[c] == T(0)) continue;
            const T* vj = ix.v(qkv, b, j0 + c, g);
            for (int64_t d = 0; d < D; ++d) ar[d] += sr[c] * vj[d];
          }
        }
        if constexpr (kAffine) {
          if (full) {
            for (int64_t c = 0; c < cols; ++c) {
              const T* vj = ix.v(qkv, b, j0 + c, g);
              for (int64_t d = 0; d < D; ++d) vfull[d] += vj[d];
            }
          } else {
            for (int64_t r = 0; r < rows; ++r) {
              T* pr = vpart.data() + r * D;
              for (int64_t c = 0; c < cols && j0 + c <= i0 + r; ++c) {
                const T* vj = ix.v(qkv, b, j0 + c, g);
                for (int64_t d = 0; d < D; ++d) pr[d] += vj[d];
              }
            }
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const T inv = T(1) / l[r];
        T* o = out + ix.o(b, i, h);
        const T* ar = acc.data() + r * D;
        if constexpr (kAffine) {
          const T a = alpha[ix.a(b, i, h)];
          const T beta = (alpha_ma[h] - a) / static_cast<T>(i + 1);
          const T* pr = vpart.data() + r * D;
          for (int64_t d = 0; d < D; ++d) o[d] = a * (ar[d] * inv) + beta * (vfull[d] + pr[d]);
        } else {
          for (int64_t d = 0; d < D; ++d) o[d] = ar[d] * inv;
        }
        lse[ix.row(b, h, i)] = m[r] + std::log(l[r]);
      }
    }
  }
}
}  // namespace

template <typename T>
void flash_attention_forward(T* out, T* lse, const T* qkv, const T* sinks, const T* alpha,
                             const T* alpha_ma, AttnDims dims, T scale, AttentionVariant variant,
                             FlashTileOverride tiles) {
  check_args(dims, variant, tiles);
  if (dims.B * dims.T * dims.H == 0) return;
  const FlashParams p = flash::make_flash_params(dims.B, dims.T, dims.H, dims.Hkv, dims.D,
                                                 static_cast<float>(scale));
  const bool sink = has_sink(variant), affine = has_affine(variant);
  const flash::FlashTiles t = pick_tiles(dims.D, sink, affine, FlashPass::forward, tiles);
  flash::flash_dispatch(sink, affine, [&](auto flags) {
    forward_impl<T, decltype(flags)>(out, lse, qkv, sinks, alpha, alpha_ma, p, scale, t);
  });
}

template void flash_attention_forward<float>(float*, float*, const float*, const float*,
                                             const float*, const float*, AttnDims, float,
                                             AttentionVariant, FlashTileOverride);
template void flash_attention_forward<double>(double*, double*, const double*, const double*,
                                              const double*, const double*, AttnDims, double,
                                              AttentionVariant, FlashTileOverride);

}  // namespace kdtrain::cpu
