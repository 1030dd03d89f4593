// One attention case on a backend (CUDA, or the CPU backend in the self-check)
// against the CPU reference ops, shared by tests/attention/test_cuda_attention.cpp (small and
// odd shapes) and tests/attention/test_cuda_attention_shapes.cpp (the models' real shapes).
//
// Inputs are bf16-exact, so the reference (cpu::attention_*, fp32) and the device
// see the same values; every difference is the device's arithmetic. With u = 2^-8,
// bf16's unit roundoff (rounding to nearest moves x by at most u|x|), the bounds:
//   out      elementwise: |err_i| <= 1.05 (u |alpha_i| (P|V|)_i + 2u |out_i|) + 1e-6 scale,
//            where (P|V|)_i = sum_j P_ij |v_j| (the reference run on |v|): the fused
//            kernels round P to bf16 before P V (error <= u sum_j P_ij |v_j|), the
//            denominator and the output once each; fp32 round-off is the 5%.
//   lse      fp32 statistic over at most T terms: NMSE < 1e-11, max |err| <= 1e-5 max(|ref|, 1).
//   dqkv     three bf16 roundings on the way (P or dS before their products, D_i from
//            the bf16 out, the output): NMSE < 3u^2 (1.1x), max |err| <= 3.15u max |ref|;
//            for dq and dk plus a floor per element (check_close_floored), for the error
//            of D_i, which is not relative to them: dS_ij = P_ij (alpha_i dP_ij - D_i)
//            cancels (exactly at T = 1: one key, P = 1, dq = dk = 0), and the device
//            takes D_i = dO_i.(out_i - beta_i S_i) from its stored bf16 out, so its D_i is
//            off by delta_i = dO_i.(outdev_i - out_i) (the reference's: sum_j P_ij dP_ij),
//            exactly known from the downloaded out (which the out check bounds), plus fp32
//            round-off in the dot products dP_ij = dO_i.v_j and D_i (and out - beta S):
//            at most gamma = (D + 1) 2^-24 of their absolute terms, |dO_i| |alpha_i|
//            max_j |v_j| and |dO_i| (|out_i| + |beta_i S_i|) <= |dO_i| (2 |out_i| +
//            |alpha_i| max_j |v_j|) (2-norms, Cauchy-Schwarz, beta S = out - alpha PV), so
//            gamma |dO_i| 2 (|alpha_i| max_j |v_j| + |out_i|) in all. With w_i = 1.05
//            (|delta_i| + that), the 5% for dS's and dq's bf16 rounding of an error this size,
//              dq floor_id = scale w_i (P|K|)_id,   dk floor_jd = scale sum_{h,i} P_ij w_i |q_id|
//            (dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_{h,i} dS_ij q_i). Failed without
//            it on the H200 (2026-11-28): at T = 1 dq, dk were 3e-7 (fp32) and, affine,
//            2e-3..7.5e-3 (out = (alpha + beta) v stored in bf16) against an exact 0.
//   dalpha   as dqkv, but its two terms (sum_j P_ij dO_i.v_j and dO_i.S_i / N_i)
//            cancel exactly at row 0, so the max bound scales with those terms.
//   dsinks   fp32, +=: |err_h| <= 2.1u sum_{b,i} e^{s_h - lse_i} sum_d |dO_id out_id|
//            (D_i = dO_i.out_i comes from the bf16 out and each P is rounded once).
// The earlier bounds (NMSE < 5e-4, max <= 2e-2 max|ref|) allowed ~150x one rounding.
// Also: guards before and after every buffer, outputs NaN until written (checked
// element by element, so an unwritten element fails), and a bit-identical backward
// rerun.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "oracles/attention_terms.h"
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

namespace kdtrain::cudatest {

// Every element within its own bound.
inline void check_elementwise(const std::string& what, const std::vector<float>& got,
                              const std::vector<float>& ref, const std::vector<double>& bound) {
  REQUIRE(got.size() == ref.size());
  size_t worst = 0, bad = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double ratio = std::isfinite(got[i]) ? err / bound[i] : INFINITY;
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  INFO(what << ": " << bad << " of " << ref.size() << " elements outside their bound; worst #"
            << worst << " got " << (ref.empty() ? 0.f : got[worst]) << " ref "
            << (ref.empty() ? 0.f : ref[worst]) << " (" << worst_ratio << " x its bound)");
  CHECK(bad == 0);
}

struct AttentionCase {
  int64_t B = 1, T = 1, H = 1, Hkv = 1, D = 64;
  AttentionVariant variant = AttentionVariant::baseline;
  AffineBiasDivisor divisor = AffineBiasDivisor::sequence;
  bool rerun_backward = true;  // the determinism check (a second backward)
};

// Host inputs of one case, bf16-exact.
struct AttentionInputs {
  std::vector<float> qkv, dout, sinks, alpha, alpha_ma, dsinks0;
};

inline AttentionInputs attention_inputs(const AttentionCase& c, uint32_t seed) {
  AttentionInputs in;
  const int64_t W = (c.H + 2 * c.Hkv) * c.D;
  in.qkv = random_values(c.B * c.T * W, seed, 0.f, 1.f);
  in.dout = random_values(c.B * c.T * c.H * c.D, seed + 1, 0.f, 1.f);
  in.sinks = random_values(c.H, seed + 2, 0.f, 1.f, false);
  in.alpha = random_values(c.B * c.T * c.H, seed + 3, 0.f, 3.f);
  for (auto& a : in.alpha) a = round_bf16(1.f / (1.f + std::exp(-a)));
  for (size_t k = 0; k < in.alpha.size(); k += 7) in.alpha[k] = 0.f;  // linear_clip's exact 0
  in.alpha_ma.resize(c.H);
  for (int64_t h = 0; h < c.H; ++h) in.alpha_ma[h] = 0.3f + 0.4f * static_cast<float>(h) / c.H;
  in.dsinks0 = random_values(c.H, seed + 4, 0.f, 0.1f, false);
  return in;
}

// The reference outputs of the heads of kv groups `groups`, computed
// on the sub-problem of those heads alone (attention never mixes kv groups), and the
// quantities the bounds need.
struct AttentionReference {
  std::vector<int64_t> groups;
  std::vector<float> out, lse, dq, dk, dv, dsinks, dalpha;  // per group, concatenated
  std::vector<float> p_abs_v;  // (P |V|) per out element
  std::vector<double> dq_floor, dk_floor;  // D_i's error carried into dq and dk, per element
  std::vector<double> dsinks_bound;
  double dalpha_terms = 0;  // attention_terms.h: the size of dalpha's cancelling terms
};

// Gathers head-indexed rows: dst[(b, t, k)] = src[(b, t, first + k)], `width` elements per head.
inline void gather_heads(std::vector<float>& dst, const std::vector<float>& src, int64_t BT,
                         int64_t heads_total, int64_t first, int64_t count, int64_t width) {
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t k = 0; k < count; ++k)
      for (int64_t d = 0; d < width; ++d)
        dst.push_back(src[(r * heads_total + first + k) * width + d]);
}

// Appends the dq and dk floors (the header's) of one kv group's sub-problem: qkv
// (BT, grp + 2, D); dout, out and the device's out_dev (BT, grp, D); alpha (BT, grp) or
// empty; lse (B, grp, T). (P|K|) is a forward with |k| for v; sum_{h,i} P_ij w_i |q_i| is
// the dv of a backward with dO_i = w_i |q_i|; both without the affine term (not in P).
inline void append_d_floors(AttentionReference& r, const AttentionShape& dims, float scale, AttentionVariant plain,
                            const std::vector<float>& qkv, const std::vector<float>& dout,
                            const std::vector<float>& out, const float* out_dev, const std::vector<float>& alpha,
                            const std::vector<float>& lse, const std::vector<float>& sinks) {
  const int64_t grp = dims.H, D = dims.D, BT = dims.B * dims.T, Ws = (grp + 2) * D;
  const double gamma = (D + 1) * std::ldexp(1.0, -24);
  double v_norm = 0;  // max_j |v_j|
  for (int64_t t = 0; t < BT; ++t) {
    const float* v = qkv.data() + t * Ws + (grp + 1) * D;
    double n2 = 0;
    for (int64_t d = 0; d < D; ++d) n2 += static_cast<double>(v[d]) * v[d];
    v_norm = std::max(v_norm, std::sqrt(n2));
  }
  std::vector<float> qkv_k(qkv), w_q(BT * grp * D), pk(BT * grp * D), lse_k(lse.size()), dqkv(qkv.size());
  std::vector<double> w(BT * grp);
  for (int64_t t = 0; t < BT; ++t) {
    for (int64_t d = 0; d < D; ++d) qkv_k[t * Ws + (grp + 1) * D + d] = std::fabs(qkv[t * Ws + grp * D + d]);
    for (int64_t k = 0; k < grp; ++k) {
      const int64_t row = (t * grp + k) * D;
      double delta = 0, do2 = 0, out2 = 0;
      for (int64_t d = 0; d < D; ++d) {
        delta += static_cast<double>(dout[row + d]) * (static_cast<double>(out_dev[row + d]) - out[row + d]);
        do2 += static_cast<double>(dout[row + d]) * dout[row + d];
        out2 += static_cast<double>(out[row + d]) * out[row + d];
      }
      const double a = alpha.empty() ? 1.0 : std::fabs(alpha[t * grp + k]);
      w[t * grp + k] = 1.05 * (std::fabs(delta) + gamma * std::sqrt(do2) * 2 * (a * v_norm + std::sqrt(out2)));
      for (int64_t d = 0; d < D; ++d)
        w_q[row + d] = static_cast<float>(w[t * grp + k]) * std::fabs(qkv[t * Ws + k * D + d]);
    }
  }
  cpu::attention_forward<float>(pk.data(), lse_k.data(), qkv_k.data(), sinks.data(), nullptr, nullptr, dims, scale,
                                features_of(plain));
  cpu::attention_backward<float>(dqkv.data(), nullptr, nullptr, w_q.data(), qkv.data(), lse.data(), sinks.data(),
                                 nullptr, nullptr, dims, scale, features_of(plain));
  for (int64_t t = 0; t < BT; ++t) {
    for (int64_t k = 0; k < grp; ++k)
      for (int64_t d = 0; d < D; ++d) r.dq_floor.push_back(scale * w[t * grp + k] * pk[(t * grp + k) * D + d]);
    for (int64_t d = 0; d < D; ++d) r.dk_floor.push_back(scale * static_cast<double>(dqkv[t * Ws + (grp + 1) * D + d]));
  }
}

// `out_dev`: the device's out of those heads, in the reference's order (attention_slices).
inline AttentionReference attention_reference(const AttentionCase& c, const AttentionInputs& in,
                                              const std::vector<int64_t>& groups, const std::vector<float>& out_dev) {
  AttentionReference r;
  r.groups = groups;
  const int64_t grp = c.H / c.Hkv, BT = c.B * c.T, W = (c.H + 2 * c.Hkv) * c.D, Ws = (grp + 2) * c.D;
  const float scale = 1.f / std::sqrt(static_cast<float>(c.D));
  const AttentionVariant plain = features_of(c.variant).sink ? AttentionVariant::sink : AttentionVariant::baseline;
  for (int64_t g : groups) {
    const int64_t h0 = g * grp;
    // Sub-problem: grp query heads, one kv head.
    std::vector<float> qkv(BT * Ws), qkv_abs(BT * Ws), dout, alpha, sinks(grp), ma(grp), ds(grp);
    for (int64_t t = 0; t < BT; ++t)
      for (int64_t d = 0; d < Ws; ++d) {
        const int64_t head = d / c.D, col = d % c.D;
        const int64_t src_head = head < grp ? h0 + head : (head == grp ? c.H + g : c.H + c.Hkv + g);
        qkv[t * Ws + d] = in.qkv[t * W + src_head * c.D + col];
        qkv_abs[t * Ws + d] = head == grp + 1 ? std::fabs(qkv[t * Ws + d]) : qkv[t * Ws + d];
      }
    gather_heads(dout, in.dout, BT, c.H, h0, grp, c.D);
    gather_heads(alpha, in.alpha, BT, c.H, h0, grp, 1);
    for (int64_t k = 0; k < grp; ++k) {
      sinks[k] = in.sinks[h0 + k];
      ma[k] = in.alpha_ma[h0 + k];
      ds[k] = in.dsinks0[h0 + k];
    }
    const AttentionShape dims{c.B, c.T, grp, 1, c.D};
    std::vector<float> out(BT * grp * c.D), lse(c.B * grp * c.T), dqkv(BT * Ws), dalpha(BT * grp),
        pv(BT * grp * c.D), lse2(c.B * grp * c.T);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), sinks.data(), alpha.data(), ma.data(),
                           dims, scale, features_of(c.variant, c.divisor));
    cpu::attention_backward(dqkv.data(), ds.data(), dalpha.data(), dout.data(), qkv.data(), lse.data(),
                            sinks.data(), alpha.data(), ma.data(), dims, scale, features_of(c.variant, c.divisor));
    cpu::attention_forward(pv.data(), lse2.data(), qkv_abs.data(), sinks.data(), alpha.data(), ma.data(),
                           dims, scale, features_of(plain));
    for (int64_t t = 0; t < BT; ++t) {
      for (int64_t d = 0; d < grp * c.D; ++d) r.dq.push_back(dqkv[t * Ws + d]);
      for (int64_t d = 0; d < c.D; ++d) r.dk.push_back(dqkv[t * Ws + grp * c.D + d]);
      for (int64_t d = 0; d < c.D; ++d) r.dv.push_back(dqkv[t * Ws + (grp + 1) * c.D + d]);
    }
    r.out.insert(r.out.end(), out.begin(), out.end());
    for (int64_t b = 0; b < c.B; ++b)  // lse (B, H, T): the group's heads are contiguous per batch
      r.lse.insert(r.lse.end(), lse.begin() + b * grp * c.T, lse.begin() + (b + 1) * grp * c.T);
    r.dsinks.insert(r.dsinks.end(), ds.begin(), ds.end());
    r.dalpha.insert(r.dalpha.end(), dalpha.begin(), dalpha.end());
    for (int64_t t = 0; t < BT; ++t)
      for (int64_t k = 0; k < grp; ++k) {
        const float a = features_of(c.variant).affine ? std::fabs(alpha[t * grp + k]) : 1.f;
        for (int64_t d = 0; d < c.D; ++d) r.p_abs_v.push_back(a * pv[(t * grp + k) * c.D + d]);
      }
    append_d_floors(r, dims, scale, plain, qkv, dout, out, out_dev.data() + r.out.size() - out.size(),
                    features_of(c.variant).affine ? alpha : std::vector<float>{}, lse, sinks);
    // dsinks bound and dalpha's cancelling terms.
    for (int64_t k = 0; k < grp; ++k) {
      double sum = 0;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.T; ++i) {
          double dot_abs = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot_abs += std::fabs(dout[((b * c.T + i) * grp + k) * c.D + d] * out[((b * c.T + i) * grp + k) * c.D + d]);
          sum += std::exp(static_cast<double>(sinks[k]) - lse[(b * grp + k) * c.T + i]) * dot_abs;
        }
      r.dsinks_bound.push_back(2.1 * kBf16U * sum + 1e-6 * std::fabs(ds[k]));
    }
    if (features_of(c.variant).affine)
      r.dalpha_terms = std::max(r.dalpha_terms, testing::dalpha_cancelling_terms(qkv.data(), dout.data(), dims, c.divisor));
  }
  return r;
}

// The device outputs of the same heads, in the reference's order.
struct AttentionSlices {
  std::vector<float> out, lse, dq, dk, dv, dsinks, dalpha;
};

inline AttentionSlices attention_slices(const AttentionCase& c, const std::vector<int64_t>& groups,
                                        const std::vector<float>& out, const std::vector<float>& lse,
                                        const std::vector<float>& dqkv, const std::vector<float>& dsinks,
                                        const std::vector<float>& dalpha) {
  AttentionSlices s;
  const int64_t grp = c.H / c.Hkv, BT = c.B * c.T, W = (c.H + 2 * c.Hkv) * c.D;
  for (int64_t g : groups) {
    const int64_t h0 = g * grp;
    gather_heads(s.out, out, BT, c.H, h0, grp, c.D);
    for (int64_t b = 0; b < c.B; ++b)
      s.lse.insert(s.lse.end(), lse.begin() + (b * c.H + h0) * c.T, lse.begin() + (b * c.H + h0 + grp) * c.T);
    for (int64_t t = 0; t < BT; ++t) {
      for (int64_t d = 0; d < grp * c.D; ++d) s.dq.push_back(dqkv[t * W + h0 * c.D + d]);
      for (int64_t d = 0; d < c.D; ++d) s.dk.push_back(dqkv[t * W + (c.H + g) * c.D + d]);
      for (int64_t d = 0; d < c.D; ++d) s.dv.push_back(dqkv[t * W + (c.H + c.Hkv + g) * c.D + d]);
    }
    s.dsinks.insert(s.dsinks.end(), dsinks.begin() + h0, dsinks.begin() + h0 + grp);
    if (!dalpha.empty()) gather_heads(s.dalpha, dalpha, BT, c.H, h0, grp, 1);
  }
  return s;
}

inline bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Runs the case on `be`, compares the heads of `groups` (all when empty) with the
// reference, and returns the attention path the backend reports for it.
inline std::string run_attention_case(Backend& be, const AttentionCase& c, uint32_t seed,
                                      const std::vector<int64_t>& groups = {}) {
  const bool sink = features_of(c.variant).sink, affine = features_of(c.variant).affine;
  const int64_t B = c.B, T = c.T, H = c.H, Hkv = c.Hkv, D = c.D, W = (H + 2 * Hkv) * D;
  const AttentionInputs in = attention_inputs(c, seed);
  DevBuf d_qkv(be, B * T * W, DType::bf16), d_sinks(be, H, DType::f32), d_alpha(be, B * T * H, DType::bf16),
      d_ma(be, H, DType::f32), d_out(be, B * T * H * D, DType::bf16), d_lse(be, B * H * T, DType::f32),
      d_dout(be, B * T * H * D, DType::bf16), d_dqkv(be, B * T * W, DType::bf16),
      d_dsinks(be, H, DType::f32), d_dalpha(be, B * T * H, DType::bf16);
  d_qkv.upload(in.qkv);
  d_sinks.upload(in.sinks);
  d_alpha.upload(in.alpha);
  d_ma.upload(in.alpha_ma);
  d_dout.upload(in.dout);

  AttentionForwardArgs f;
  f.shape = AttentionShape{B, T, H, Hkv, D};
  f.features = features_of(c.variant, c.divisor);
  f.scale = 1.f / std::sqrt(static_cast<float>(D));
  f.qkv = d_qkv.get();
  f.sinks = sink ? d_sinks.f32() : nullptr;
  f.alpha = affine ? d_alpha.get() : nullptr;
  f.alpha_ma = affine ? d_ma.f32() : nullptr;
  f.out = d_out.get();
  f.lse = d_lse.f32();
  be.attention_forward(f);
  AttentionBackwardArgs bw = attention_backward_args(f);
  bw.dout = d_dout.get();
  bw.dqkv = d_dqkv.get();
  bw.dsinks = sink ? d_dsinks.f32() : nullptr;
  bw.dalpha = affine ? d_dalpha.get() : nullptr;
  std::vector<unsigned char> first_dqkv, first_dsinks, first_dalpha;
  for (int run = 0; run < (c.rerun_backward ? 2 : 1); ++run) {
    d_dsinks.upload(in.dsinks0);
    d_dqkv.poison();
    d_dalpha.poison();
    be.attention_backward(bw);
    if (run == 0) {
      first_dqkv = d_dqkv.bytes();
      first_dsinks = d_dsinks.bytes();
      first_dalpha = d_dalpha.bytes();
    } else {
      CHECK(d_dqkv.bytes() == first_dqkv);
      CHECK(d_dsinks.bytes() == first_dsinks);
      if (affine) CHECK(d_dalpha.bytes() == first_dalpha);
    }
  }
  for (const DevBuf* b : {&d_qkv, &d_sinks, &d_alpha, &d_ma, &d_out, &d_lse, &d_dout, &d_dqkv, &d_dsinks, &d_dalpha})
    CHECK(b->guard_intact());

  const std::vector<float> out = d_out.download(), lse = d_lse.download(), dqkv = d_dqkv.download(),
                           dsinks = d_dsinks.download(),
                           dalpha = affine ? d_dalpha.download() : std::vector<float>{};
  // Every element written (the buffers started as NaN), not only the compared heads.
  CHECK(all_finite(out));
  CHECK(all_finite(lse));
  CHECK(all_finite(dqkv));
  CHECK(all_finite(dsinks));
  CHECK(all_finite(dalpha));

  std::vector<int64_t> compared = groups;
  if (compared.empty())
    for (int64_t g = 0; g < Hkv; ++g) compared.push_back(g);
  const AttentionSlices got = attention_slices(c, compared, out, lse, dqkv, dsinks, dalpha);
  const AttentionReference ref = attention_reference(c, in, compared, got.out);
  const double u = kBf16U;
  double out_scale = 0;
  for (float x : ref.out) out_scale = std::max(out_scale, static_cast<double>(std::fabs(x)));
  std::vector<double> out_bound(ref.out.size());
  for (size_t k = 0; k < ref.out.size(); ++k)
    out_bound[k] = 1.05 * (u * ref.p_abs_v[k] + 2 * u * std::fabs(ref.out[k])) + 1e-6 * out_scale;
  check_elementwise("out", got.out, ref.out, out_bound);
  check_close("lse", got.lse, ref.lse, 1e-11, 1e-5, 1.0);
  check_close_floored("dq", got.dq, ref.dq, 1.1 * 3 * u * u, 3.15 * u, ref.dq_floor);
  check_close_floored("dk", got.dk, ref.dk, 1.1 * 3 * u * u, 3.15 * u, ref.dk_floor);
  check_close("dv", got.dv, ref.dv, 1.1 * 3 * u * u, 3.15 * u);
  if (sink) {
    std::vector<double> bound = ref.dsinks_bound;
    check_elementwise("dsinks", got.dsinks, ref.dsinks, bound);
  } else {
    CHECK(dsinks == in.dsinks0);  // not the variant's: untouched
  }
  if (affine) {
    double scale = ref.dalpha_terms;
    for (float x : ref.dalpha) scale = std::max(scale, static_cast<double>(std::fabs(x)));
    std::vector<double> bound(ref.dalpha.size(), 3.15 * u * scale);
    check_elementwise("dalpha", got.dalpha, ref.dalpha, bound);
    check_close("dalpha (nmse)", got.dalpha, ref.dalpha, 1.1 * 3 * u * u, 1.0, scale);
  }
  for (const AttentionPathUse& use : be.attention_paths())
    if (use.shape.B == B && use.shape.T == T && use.shape.H == H && use.shape.Hkv == Hkv &&
        use.shape.D == D && use.features == features_of(c.variant, c.divisor))
      return use.forward + "/" + use.backward;
  return "not recorded";
}

}  // namespace kdtrain::cudatest
