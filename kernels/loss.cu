// Kernel for loss.cuh: one block of kThreads per row, two passes over the row.
//
// Pass 1 reads the student (and teacher) logits once, with 16-byte loads when the
// row allows, and keeps per thread, for each distribution it needs (softmax(s),
// softmax(s/tau) when tau != 1, softmax(t/tau)), an online (max m, sum Z of
// exp(x - m)) and, for the KD value, A = sum exp(x - m) * d, d the term whose
// expectation the KD loss needs:
//   forward_kl = E_pT[t' - s'] - (lseT - lseS)      d = t' - s', weights of pT
//   soft_ce    = -E_pT[s'] + lseS                    d = s',      weights of pT
//   reverse_kl = E_pS[s' - t'] - (lseS - lseT)      d = s' - t', weights of pS
// with s' = s/tau, t' = t/tau, lse = m + log Z. The optional soft-CE output,
// -E_pT[s'] + lseS, comes from a second sum B = sum exp(t' - m) * s' in pT's state. A pack of VEC values is folded in
// with one rescale, so each distribution costs about one expf per element. The
// threads' states merge by fixed block trees (deterministic).
// Pass 2 reads the logits again and writes the gradient: expf(s - lse) (shared
// with softmax(s/tau) when tau = 1) and expf(t' - lseT) per element.
#include "kernels/cuda_check.cuh"
#include "kernels/loss.cuh"
#include "kernels/online_softmax.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 512;

template <int VEC>
__global__ void __launch_bounds__(kThreads) loss_kernel(LossParams p) {
  __shared__ float red[kWarpSize];
  const int64_t r = blockIdx.x;
  bf16* s = p.logits + r * p.V;
  const bool teacher = p.teacher_logits != nullptr;
  const bf16* t = teacher ? p.teacher_logits + r * p.V : nullptr;
  const float inv_tau = 1.f / p.temperature;
  const float tau = p.temperature;
  const bool scaled = p.temperature != 1.f;  // softmax(s/tau) differs from softmax(s)
  const bool reverse = p.kind == KdKind::reverse_kl;
  const int32_t target = p.targets[r];
  const bool has_ce = target >= 0 && target < p.V;

  // ---- pass 1 ----
  Online o1, oS, oT;  // softmax(s); softmax(s') if scaled; softmax(t')
  for (int64_t k = int64_t(threadIdx.x) * VEC; k < p.V; k += int64_t(kThreads) * VEC) {
    const int count = p.V - k < VEC ? static_cast<int>(p.V - k) : VEC;
    float x[VEC], tv[VEC], sp[VEC], tp[VEC], d[VEC];
    load_values<VEC>(x, s, k, count);
    if (!teacher) {
      o1.add<VEC>(x, x, x, count);  // A and B unused without a teacher
      continue;
    }
    load_values<VEC>(tv, t, k, count);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sp[j] = x[j] * inv_tau;
      tp[j] = tv[j] * inv_tau;
    }
    // d for the distribution that weights the KD expectation.
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      d[j] = p.kind == KdKind::forward_kl ? tp[j] - sp[j] : (reverse ? sp[j] - tp[j] : sp[j]);
    // pT's state also sums s' for the soft-CE output.
    if (reverse) {
      oS.add<VEC>(sp, d, sp, count);
      oT.add<VEC>(tp, tp, sp, count);
      if (scaled) o1.add<VEC>(x, x, x, count);
    } else {
      oT.add<VEC>(tp, d, sp, count);
      if (scaled) oS.add<VEC>(sp, sp, sp, count);
      o1.add<VEC>(x, x, x, count);
    }
  }
  float lse1, lseS = 0.f, lseT = 0.f, kd = 0.f, soft_ce = 0.f;
  if (!teacher) {
    lse1 = block_merge(o1, red).lse;
  } else {
    const Merged T = block_merge(oT, red);
    lseT = T.lse;
    if (reverse) {
      const Merged S = block_merge(oS, red);
      lseS = S.lse;
      lse1 = scaled ? block_merge(o1, red).lse : lseS;
      kd = S.mean_d - (lseS - lseT);
    } else {
      lse1 = block_merge(o1, red).lse;
      lseS = scaled ? block_merge(oS, red).lse : lse1;
      kd = p.kind == KdKind::forward_kl ? T.mean_d - (lseT - lseS) : -T.mean_d + lseS;
    }
    soft_ce = -T.mean_e + lseS;
  }
  if (threadIdx.x == 0) {
    p.ce[r] = has_ce ? lse1 - to_f(s[target]) : 0.f;
    p.kd[r] = teacher ? tau * tau * kd : 0.f;
    if (p.soft_ce) p.soft_ce[r] = teacher ? tau * tau * soft_ce : 0.f;
  }
  if (!p.compute_grad) return;
  // Thread 0 read s[target] above; make sure that read is done before any overwrite.
  __syncthreads();

  // ---- pass 2: the gradient over the logits ----
  const float w = teacher ? p.kd_weight : 0.f;
  for (int64_t k = int64_t(threadIdx.x) * VEC; k < p.V; k += int64_t(kThreads) * VEC) {
    const int count = p.V - k < VEC ? static_cast<int>(p.V - k) : VEC;
    float x[VEC], tv[VEC];
    load_values<VEC>(x, s, k, count);
    if (teacher) load_values<VEC>(tv, t, k, count);
    Pack<bf16, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float p1 = expf(x[j] - lse1);
      float dce = 0.f;
      if (has_ce) dce = p1 - (k + j == target ? 1.f : 0.f);
      float dkd = 0.f;
      if (teacher) {
        const float lsS = x[j] * inv_tau - lseS;
        const float pS = scaled ? expf(lsS) : p1;
        const float lsT = tv[j] * inv_tau - lseT;
        dkd = reverse ? tau * pS * ((lsS - lsT) - kd) : tau * (pS - expf(lsT));
      }
      out.v[j] = to_bf(p.grad_scale * (w * dkd + (1.f - w) * dce));
    }
    if (count == VEC) {
      store_pack<VEC>(s + k, out);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (j < count) s[k + j] = out.v[j];  // constant indices: out stays in registers
    }
  }
}
}  // namespace

void loss_chunk(const LossParams& p, cudaStream_t stream) {
  KD_CHECK(p.temperature > 0.f, "loss_chunk: temperature must be positive, got ", p.temperature);
  KD_CHECK(p.n >= 0 && p.V > 0 && p.n < (int64_t(1) << 31), "loss_chunk: bad shape n=", p.n,
           " V=", p.V);
  if (p.n == 0) return;
  const int vec = p.teacher_logits ? widest_pack(p.V, p.logits, p.teacher_logits)
                                   : widest_pack(p.V, p.logits);
  dispatch_pack(vec, [&](auto v) {
    loss_kernel<decltype(v)::value><<<static_cast<unsigned>(p.n), kThreads, 0, stream>>>(p);
  });
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
