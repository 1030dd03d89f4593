// CPU mirror of the fused attention forward (kernels/attention/flash_forward_kernel.cuh). Algorithm
// and numerics: flash_mirror.h and docs/flash_attention.md. The loops walk the
// tiles as the CUDA kernel does (work item = one CUDA block, the same flash_tiles(),
// key tiles past the last row skipped, masks only on tiles crossing the diagonal), with
// the same exp2-domain statistics and the same chunked prefix scan for affine; scalar
// inner products stand in for the tensor-core tile products.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "oracles/flash_mirror.h"
#include "oracles/flash_mirror_common.h"
#include "oracles/flash_mirror_prefix_scan.h"

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
  const T log2e = T(1.4426950408889634), ln2 = T(0.6931471805599453);
  const T scale_log2 = scale * log2e;

  // affine: prefix[b][i][g*D + d] = sum_{j<=i} v_j, the kernel's chunked scan over the
  // Hkv*D contiguous v columns of each token row.
  std::vector<T> prefix;
  if constexpr (kAffine) {
    prefix.resize(static_cast<size_t>(p.B * Tn * p.Hkv * D));
    chunked_prefix_scan(prefix.data(), qkv + p.v_offset, p.B, Tn, p.Hkv * D, p.qkv_token, p.qkv_batch,
                        /*reverse=*/false);
  }

#pragma omp parallel
  {
    std::vector<T> s(static_cast<size_t>(Br * Bc)), acc(static_cast<size_t>(Br * D));
    std::vector<T> m(static_cast<size_t>(Br)), l(static_cast<size_t>(Br));
    // Work items are independent, so the schedule cannot change any result.
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < p.B * p.H * n_qt; ++item) {
      const int64_t b = item / (p.H * n_qt), h = (item / n_qt) % p.H, qt = item % n_qt;
      const int64_t g = h / p.group, i0 = qt * Br, rows = std::min(Br, Tn - i0);
      for (int64_t r = 0; r < rows; ++r) {
        // Statistics in the exp2 domain: m is the running max of scale*log2(e)*x. The
        // sink is a key of logit s_h and value 0: it starts the running max and sum.
        m[r] = kSink ? sinks[h] * log2e : neg_inf;
        l[r] = kSink ? T(1) : T(0);
      }
      std::fill(acc.begin(), acc.end(), T(0));
      // Key tiles [j0, j0 + Bc) with j0 <= last row of the tile; later ones are fully masked.
      for (int64_t j0 = 0; j0 < i0 + rows; j0 += Bc) {
        const int64_t cols = std::min(Bc, Tn - j0);
        const bool diag = j0 + Bc - 1 > i0;  // a key of the tile may follow a row: mask
        for (int64_t r = 0; r < rows; ++r) {
          const T* qi = ix.q(qkv, b, i0 + r, h);
          for (int64_t c = 0; c < cols; ++c) {
            const bool visible = !diag || j0 + c <= i0 + r;
            s[r * Bc + c] = visible ? dot(qi, ix.k(qkv, b, j0 + c, g), D) : neg_inf;  // unscaled
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          T* sr = s.data() + r * Bc;
          T mx = neg_inf;
          for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, sr[c]);
          // max commutes with the positive scale; a fully masked row keeps its max.
          const T m_new = std::max(m[r], mx * scale_log2);
          const T m_use = m_new == neg_inf ? T(0) : m_new;
          const T corr = std::exp2(m[r] - m_use);  // 0 while m = -inf
          T rowsum = 0;
          for (int64_t c = 0; c < cols; ++c) {
            sr[c] = std::exp2(sr[c] * scale_log2 - m_use);  // masked: exp2(-inf) = 0
            rowsum += sr[c];
          }
          l[r] = l[r] * corr + rowsum;
          m[r] = m_new;
          T* ar = acc.data() + r * D;
          for (int64_t d = 0; d < D; ++d) ar[d] *= corr;
          for (int64_t c = 0; c < cols; ++c) {
            if (sr[c] == T(0)) continue;
            const T* vj = ix.v(qkv, b, j0 + c, g);
            for (int64_t d = 0; d < D; ++d) ar[d] += sr[c] * vj[d];
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
          const T beta = (alpha_ma[h] - a) / flash::affine_bias_count<T>(p, i);
          const T* pre = prefix.data() + ((b * Tn + i) * p.Hkv + g) * D;
          for (int64_t d = 0; d < D; ++d) o[d] = a * (ar[d] * inv) + beta * pre[d];
        } else {
          for (int64_t d = 0; d < D; ++d) o[d] = ar[d] * inv;
        }
        lse[ix.row(b, h, i)] = ln2 * (m[r] + std::log2(l[r]));
      }
    }
  }
}
}  // namespace

template <typename T>
void flash_attention_forward(T* out, T* lse, const T* qkv, const T* sinks, const T* alpha,
                             const T* alpha_ma, AttentionShape dims, T scale, AttentionFeatures features,
                             FlashTileOverride tiles) {
  run_pass(FlashPass::forward, dims, scale, features, tiles, [&](auto flags, const FlashParams& p, auto t) {
    forward_impl<T, decltype(flags)>(out, lse, qkv, sinks, alpha, alpha_ma, p, scale, t);
  });
}

template void flash_attention_forward<float>(float*, float*, const float*, const float*,
                                             const float*, const float*, AttentionShape, float,
                                             AttentionFeatures, FlashTileOverride);
template void flash_attention_forward<double>(double*, double*, const double*, const double*,
                                              const double*, const double*, AttentionShape, double,
                                              AttentionFeatures, FlashTileOverride);

}  // namespace kdtrain::cpu
