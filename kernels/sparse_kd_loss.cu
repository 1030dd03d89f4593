// Kernel for sparse_kd_loss.cuh: one block of kThreads per row; the maths is the
// CPU reference's (src/backend/cpu/cpu_sparse_kd.cpp), in fp32.
#include "kernels/cuda_check.cuh"
#include "kernels/online_softmax.cuh"
#include "kernels/sparse_kd_loss.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 512;

__device__ __forceinline__ bool in_top(const uint32_t* mask, int64_t j) {
  return (mask[j >> 5] >> (j & 31)) & 1u;
}

// The teacher and the KD sums over the row's K ids, the same in every thread.
struct TopSums {
  float lse_a;      // log sum exp of the tempered teacher values (with the tail in bucket mode)
  float fwd, xent;  // sum_S q (log q - log p_S) and -sum_S q log p_S
  float rev;        // sum_S p_S (log p_S - log q)
};

__device__ TopSums top_sums(const SparseKdParams& p, const bf16* s, const int32_t* ids,
                            const float* lp, float a_tail, float inv_tau, float lseS, float* red) {
  float mx = a_tail;
  for (int64_t k = threadIdx.x; k < p.K; k += kThreads) mx = fmaxf(mx, lp[k] * inv_tau);
  mx = block_max(mx, red);
  float z = 0.f;
  for (int64_t k = threadIdx.x; k < p.K; k += kThreads) z += expf(lp[k] * inv_tau - mx);
  z = block_sum(z, red) + (a_tail == -INFINITY ? 0.f : expf(a_tail - mx));
  const float lse_a = mx + logf(z);
  float fwd = 0.f, xent = 0.f, rev = 0.f;
  for (int64_t k = threadIdx.x; k < p.K; k += kThreads) {
    const float lq = lp[k] * inv_tau - lse_a, q = expf(lq);
    const float ls = to_f(s[ids[k]]) * inv_tau - lseS;
    if (q > 0.f) {
      fwd += q * (lq - ls);
      xent -= q * ls;
    }
    rev += expf(ls) * (ls - lq);
  }
  return TopSums{lse_a, block_sum(fwd, red), block_sum(xent, red), block_sum(rev, red)};
}

template <int VEC>
__global__ void __launch_bounds__(kThreads) sparse_kd_kernel(SparseKdParams p) {
  extern __shared__ uint32_t mask[];  // (V + 31) / 32 words: the row's K ids
  __shared__ float red[kWarpSize];
  const int64_t r = blockIdx.x;
  bf16* s = p.logits + r * p.V;
  const int32_t* ids = p.ids + r * p.K;
  const float* lp = p.logp + r * p.K;
  const float tau = p.temperature, inv_tau = 1.f / tau;
  const bool scaled = tau != 1.f;
  const int32_t target = p.targets[r];
  const bool has_ce = target >= 0 && target < p.V;
  const bool has_tail = p.K < p.V;
  const bool bucket = p.bucket && has_tail;

  for (int64_t w = threadIdx.x; w < (p.V + 31) / 32; w += kThreads) mask[w] = 0u;
  __syncthreads();
  for (int64_t k = threadIdx.x; k < p.K; k += kThreads)
    if (ids[k] >= 0 && ids[k] < p.V) atomicOr(&mask[ids[k] >> 5], 1u << (ids[k] & 31));
  __syncthreads();

  // ---- pass 1: softmax(s), softmax(s/tau), and softmax(s/tau) over the tail ----
  Online o1, oS, oTail;
  for (int64_t k = int64_t(threadIdx.x) * VEC; k < p.V; k += int64_t(kThreads) * VEC) {
    const int count = p.V - k < VEC ? static_cast<int>(p.V - k) : VEC;
    float x[VEC], sp[VEC], tail[VEC];
    load_values<VEC>(x, s, k, count);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sp[j] = x[j] * inv_tau;
      tail[j] = j < count && !in_top(mask, k + j) ? sp[j] : -INFINITY;
    }
    o1.add<VEC>(x, x, x, count);
    if (scaled) oS.add<VEC>(sp, sp, sp, count);
    oTail.add<VEC>(tail, sp, sp, count);
  }
  const float lse1 = block_merge(o1, red).lse;
  const float lseS = scaled ? block_merge(oS, red).lse : lse1;
  const Merged T = block_merge(oTail, red);
  const float log_P = has_tail ? T.lse - lseS : -INFINITY, P = expf(log_P);
  const float tail_plogp = has_tail ? P * (T.mean_d - lseS) : 0.f;  // sum_tail p_S log p_S

  const float a_tail = bucket ? p.log_tail[r] * inv_tau : -INFINITY;
  const TopSums top = top_sums(p, s, ids, lp, a_tail, inv_tau, lseS, red);
  const float lq_tail = a_tail - top.lse_a, q_tail = expf(lq_tail);
  float fwd = top.fwd, xent = top.xent, rev = top.rev, logged = top.xent;
  if (bucket) {
    if (q_tail > 0.f) {
      fwd += q_tail * (lq_tail - log_P);
      xent -= q_tail * log_P;
      logged -= q_tail / P * tail_plogp;
    }
    if (P > 0.f) rev += P * (log_P - lq_tail);
  }
  const bool reverse = p.kind == KdKind::reverse_kl;
  const float kd = p.kind == KdKind::forward_kl ? fwd : reverse ? rev : xent;
  if (threadIdx.x == 0) {
    p.ce[r] = has_ce ? lse1 - to_f(s[target]) : 0.f;
    p.kd[r] = tau * tau * kd;
    if (p.soft_ce) p.soft_ce[r] = tau * tau * logged;
  }
  if (!p.compute_grad) return;
  __syncthreads();  // thread 0's read of s[target] before any overwrite

  // ---- pass 2: the tail's gradient; the K ids' slots keep their logits ----
  const float w = p.kd_weight;
  const float tail_factor =
      reverse ? (log_P - lq_tail) - kd : 1.f - (bucket && q_tail > 0.f ? q_tail / P : 0.f);
  auto grad = [&](float dkd, float x, int64_t j) {
    const float dce = has_ce ? expf(x - lse1) - (j == target ? 1.f : 0.f) : 0.f;
    return to_bf(p.grad_scale * (w * dkd + (1.f - w) * dce));
  };
  for (int64_t k = int64_t(threadIdx.x) * VEC; k < p.V; k += int64_t(kThreads) * VEC) {
    const int count = p.V - k < VEC ? static_cast<int>(p.V - k) : VEC;
    float x[VEC];
    load_values<VEC>(x, s, k, count);
    Pack<bf16, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float pS = expf(x[j] * inv_tau - lseS);
      out.v[j] = in_top(mask, k + j) ? to_bf(x[j]) : grad(tau * pS * tail_factor, x[j], k + j);
    }
    if (count == VEC) {
      store_pack<VEC>(s + k, out);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (j < count) s[k + j] = out.v[j];
    }
  }
  __syncthreads();
  // ---- the K ids' gradient ----
  for (int64_t k = threadIdx.x; k < p.K; k += kThreads) {
    const int32_t j = ids[k];
    if (j < 0 || j >= p.V) continue;
    const float x = to_f(s[j]);
    const float lq = lp[k] * inv_tau - top.lse_a, ls = x * inv_tau - lseS, pS = expf(ls);
    const float dkd = reverse ? tau * pS * ((ls - lq) - kd) : tau * (pS - expf(lq));
    s[j] = grad(dkd, x, j);
  }
}
}  // namespace

void sparse_kd_loss_chunk(const SparseKdParams& p, cudaStream_t stream) {
  KD_CHECK(p.temperature > 0.f, "sparse_kd_loss_chunk: temperature must be positive, got ",
           p.temperature);
  KD_CHECK(p.n >= 0 && p.V > 0 && p.n < (int64_t(1) << 31) && p.K >= 1 && p.K <= p.V,
           "sparse_kd_loss_chunk: bad shape n=", p.n, " V=", p.V, " K=", p.K);
  KD_CHECK(p.V <= kSparseKdMaxVocab, "sparse_kd_loss_chunk: vocabulary ", p.V,
           " exceeds the ", kSparseKdMaxVocab, " ids whose bitmask fits in shared memory");
  if (p.n == 0) return;
  const size_t mask_bytes = static_cast<size_t>((p.V + 31) / 32) * sizeof(uint32_t);
  dispatch_pack(widest_pack(p.V, p.logits), [&](auto v) {
    sparse_kd_kernel<decltype(v)::value>
        <<<static_cast<unsigned>(p.n), kThreads, mask_bytes, stream>>>(p);
  });
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
