// CPU mirror of the fused attention backward (kernels/flash_attention_bwd.cu). Algorithm
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


// Everything the backward passes share, computed once per call.
template <typename T>
struct BackwardState {
  std::vector<T> prefix;  // (B, T, Hkv, D) S_i = sum_{j<=i} v_j          [affine]
  std::vector<T> drow;    // (B, H, T) D_i = dO'_i . (PV)_i
  std::vector<T> sigma;   // (B, H, T) dO_i . S_i                         [affine]
};

// P_ij recomputed from the saved statistics; dPraw_ij = dO_i . v_j (not alpha-scaled).
template <typename T>
struct Recompute {
  T p, dpraw;
};

template <typename T, typename Flags>
void backward_impl(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv, const T* out,
                   const T* lse, const T* sinks, const T* alpha, const T* alpha_ma,
                   const FlashParams& p, T scale, flash::FlashTiles tq, flash::FlashTiles tkv) {
  constexpr bool kSink = Flags::kSink, kAffine = Flags::kAffine;
  const Views<T> ix{p};
  const int64_t B = p.B, Tn = p.T, H = p.H, Hkv = p.Hkv, D = p.D;
  BackwardState<T> st;
  st.drow.resize(static_cast<size_t>(B * H * Tn));
  auto alpha_of = [&](int64_t b, int64_t i, int64_t h) {
    if constexpr (kAffine) return alpha[ix.a(b, i, h)];
    return T(1);
  };
  auto beta_of = [&](int64_t b, int64_t i, int64_t h) {
    return (alpha_ma[h] - alpha[ix.a(b, i, h)]) / static_cast<T>(i + 1);
  };
  auto prefix_of = [&](int64_t b, int64_t i, int64_t g) {
    return st.prefix.data() + ((b * Tn + i) * Hkv + g) * D;
  };

  // 1. prefix sums of v, one (b, kv head) per item, rows in order.
  if constexpr (kAffine) {
    st.prefix.resize(static_cast<size_t>(B * Tn * Hkv * D));
    st.sigma.resize(static_cast<size_t>(B * H * Tn));
#pragma omp parallel for schedule(static)
    for (int64_t item = 0; item < B * Hkv; ++item) {
      const int64_t b = item / Hkv, g = item % Hkv;
      for (int64_t i = 0; i < Tn; ++i) {
        const T* vi = ix.v(qkv, b, i, g);
        T* si = prefix_of(b, i, g);
        const T* prev = i > 0 ? prefix_of(b, i - 1, g) : nullptr;
        for (int64_t d = 0; d < D; ++d) si[d] = (prev ? prev[d] : T(0)) + vi[d];
      }
    }
  }

  // 2. D_i = dO'_i.(PV)_i = dO_i . (alpha_i (PV)_i) = dO_i . (out_i - beta_i S_i): no
  //    division by alpha (which linear_clip can make exactly 0).
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < B * H * Tn; ++item) {
    const int64_t b = item / (H * Tn), h = (item / Tn) % H, i = item % Tn;
    const T* dO = dout + ix.o(b, i, h);
    const T* o = out + ix.o(b, i, h);
    if constexpr (kAffine) {
      const T* si = prefix_of(b, i, h / p.group);
      const T beta = beta_of(b, i, h);
      T dsum = 0, ssum = 0;
      for (int64_t d = 0; d < D; ++d) {
        dsum += dO[d] * (o[d] - beta * si[d]);
        ssum += dO[d] * si[d];
      }
      st.drow[item] = dsum;
      st.sigma[item] = ssum;
    } else {
      st.drow[item] = dot(dO, o, D);
    }
  }

  // 3. dsinks_h -= sum_{b,i} p_sink,i D_i, serial in (b, i) order.
  if constexpr (kSink) {
    if (dsinks != nullptr) {
      for (int64_t h = 0; h < H; ++h) {
        T acc = 0;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < Tn; ++i) {
            const int64_t r = ix.row(b, h, i);
            acc += std::exp(sinks[h] - lse[r]) * st.drow[r];
          }
        dsinks[h] -= acc;
      }
    }
  }

  auto recompute = [&](int64_t b, int64_t h, int64_t g, int64_t i, int64_t j) {
    const T x = scale * dot(ix.q(qkv, b, i, h), ix.k(qkv, b, j, g), D);
    return Recompute<T>{std::exp(x - lse[ix.row(b, h, i)]), dot(dout + ix.o(b, i, h), ix.v(qkv, b, j, g), D)};
  };

  // 4. dq (and dalpha) per (b, h, query tile), key tiles in order.
  {
    const int64_t Br = tq.Br, Bc = tq.Bc, n_qt = ceil_div(Tn, Br);
#pragma omp parallel
    {
      std::vector<T> dq(static_cast<size_t>(Br * D)), rsum(static_cast<size_t>(Br));
#pragma omp for schedule(dynamic)
      for (int64_t item = 0; item < B * H * n_qt; ++item) {
        const int64_t b = item / (H * n_qt), h = (item / n_qt) % H, qt = item % n_qt;
        const int64_t g = h / p.group, i0 = qt * Br, rows = std::min(Br, Tn - i0);
        std::fill(dq.begin(), dq.end(), T(0));
        std::fill(rsum.begin(), rsum.end(), T(0));
        for (int64_t j0 = 0; j0 < i0 + rows; j0 += Bc) {
          const int64_t cols = std::min(Bc, Tn - j0);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            const T a = alpha_of(b, i, h), Di = st.drow[ix.row(b, h, i)];
            T* dqr = dq.data() + r * D;
            for (int64_t c = 0; c < cols && j0 + c <= i; ++c) {
              const Recompute<T> rc = recompute(b, h, g, i, j0 + c);
              const T ds = rc.p * (a * rc.dpraw - Di);
              if constexpr (kAffine) rsum[r] += rc.p * rc.dpraw;
              const T* kj = ix.k(qkv, b, j0 + c, g);
              for (int64_t d = 0; d < D; ++d) dqr[d] += ds * kj[d];
            }
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          T* dqi = dqkv + (ix.q(qkv, b, i, h) - qkv);
          for (int64_t d = 0; d < D; ++d) dqi[d] = scale * dq[r * D + d];
          // dalpha_i = dO_i . ((PV)_i - S_i / N_i), (PV)_i . dO_i = sum_j P_ij dPraw_ij.
          if constexpr (kAffine)
            dalpha[ix.a(b, i, h)] = rsum[r] - st.sigma[ix.row(b, h, i)] / static_cast<T>(i + 1);
        }
      }
    }
  }

  // 5. dk, dv per (b, kv head, key tile): group heads in order, query tiles in order
  //    from the first one reaching the key tile.
  {
    const int64_t Br = tkv.Br, Bc = tkv.Bc, n_kt = ceil_div(Tn, Bc);
#pragma omp parallel
    {
      std::vector<T> dk(static_cast<size_t>(Bc * D)), dv(static_cast<size_t>(Bc * D));
      std::vector<T> rfull(kAffine ? static_cast<size_t>(D) : 0);
      std::vector<T> rpart(kAffine ? static_cast<size_t>(Bc * D) : 0);
#pragma omp for schedule(dynamic)
      for (int64_t item = 0; item < B * Hkv * n_kt; ++item) {
        const int64_t b = item / (Hkv * n_kt), g = (item / n_kt) % Hkv, kt = item % n_kt;
        const int64_t j0 = kt * Bc, cols = std::min(Bc, Tn - j0);
        std::fill(dk.begin(), dk.end(), T(0));
        std::fill(dv.begin(), dv.end(), T(0));
        if constexpr (kAffine) {
          std::fill(rfull.begin(), rfull.end(), T(0));
          std::fill(rpart.begin(), rpart.end(), T(0));
        }
        for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
          for (int64_t i0 = (j0 / Br) * Br; i0 < Tn; i0 += Br) {
            const int64_t rows = std::min(Br, Tn - i0);
            const bool full = i0 >= j0 + cols - 1;  // every query sees every key of the tile
            for (int64_t c = 0; c < cols; ++c) {
              const int64_t j = j0 + c;
              T* dkc = dk.data() + c * D;
              T* dvc = dv.data() + c * D;
              for (int64_t r = std::max<int64_t>(0, j - i0); r < rows; ++r) {
                const int64_t i = i0 + r;
                const Recompute<T> rc = recompute(b, h, g, i, j);
                const T a = alpha_of(b, i, h);
                const T ds = rc.p * (a * rc.dpraw - st.drow[ix.row(b, h, i)]);
                const T pa = rc.p * a;
                const T* dO = dout + ix.o(b, i, h);
                const T* qi = ix.q(qkv, b, i, h);
                for (int64_t d = 0; d < D; ++d) {
                  dvc[d] += pa * dO[d];
                  dkc[d] += ds * qi[d];
                }
              }
            }
            if constexpr (kAffine) {
              // dv_j += sum_{i >= j} beta_i dO_i: whole tiles into rfull, the
              // diagonal tile(s) per key row.
              if (full) {
                for (int64_t r = 0; r < rows; ++r) {
                  const T beta = beta_of(b, i0 + r, h);
                  const T* dO = dout + ix.o(b, i0 + r, h);
                  for (int64_t d = 0; d < D; ++d) rfull[d] += beta * dO[d];
                }
              } else {
                for (int64_t c = 0; c < cols; ++c) {
                  T* rp = rpart.data() + c * D;
                  for (int64_t r = std::max<int64_t>(0, j0 + c - i0); r < rows; ++r) {
                    const T beta = beta_of(b, i0 + r, h);
                    const T* dO = dout + ix.o(b, i0 + r, h);
                    for (int64_t d = 0; d < D; ++d) rp[d] += beta * dO[d];
                  }
                }
              }
            }
          }
        }
        for (int64_t c = 0; c < cols; ++c) {
          T* dkj = dqkv + (ix.k(qkv, b, j0 + c, g) - qkv);
          T* dvj = dqkv + (ix.v(qkv, b, j0 + c, g) - qkv);
          for (int64_t d = 0; d < D; ++d) {
            dkj[d] = scale * dk[c * D + d];
            if constexpr (kAffine)
              dvj[d] = dv[c * D + d] + (rfull[d] + rpart[c * D + d]);
            else
              dvj[d] = dv[c * D + d];
          }
        }
      }
    }
  }
}
}  // namespace

template <typename T>
void flash_attention_backward(T* dqkv, T* dsinks, T* dalpha, const T* dout, const T* qkv,
                              const T* out, const T* lse, const T* sinks, const T* alpha,
                              const T* alpha_ma, AttnDims dims, T scale, AttentionVariant variant,
                              FlashTileOverride tiles) {
  check_args(dims, variant, tiles);
  if (dims.B * dims.T * dims.H == 0) return;
  const FlashParams p = flash::make_flash_params(dims.B, dims.T, dims.H, dims.Hkv, dims.D,
                                                 static_cast<float>(scale));
  const bool sink = has_sink(variant), affine = has_affine(variant);
  const flash::FlashTiles tq = pick_tiles(dims.D, sink, affine, FlashPass::backward_dq, tiles);
  const flash::FlashTiles tkv = pick_tiles(dims.D, sink, affine, FlashPass::backward_dkdv, tiles);
  flash::flash_dispatch(sink, affine, [&](auto flags) {
    backward_impl<T, decltype(flags)>(dqkv, dsinks, dalpha, dout, qkv, out, lse, sinks, alpha,
                                      alpha_ma, p, scale, tq, tkv);
  });
}

template void flash_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                              const float*, const float*, const float*,
                                              const float*, const float*, AttnDims, float,
                                              AttentionVariant, FlashTileOverride);
template void flash_attention_backward<double>(double*, double*, double*, const double*,
                                               const double*, const double*, const double*,
                                               const double*, const double*, const double*,
                                               AttnDims, double, AttentionVariant,
                                               FlashTileOverride);


}  // namespace kdtrain::cpu
