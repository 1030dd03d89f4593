// Kernel for loss.cuh: one block of kThreads per row.
#include "cuda_check.cuh"
#include "loss.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 512;

// Running max and sum of exp(x - max), updated one value at a time.
struct Online {
  float m = -INFINITY, s = 0.f;
  __device__ void add(float x) {
    if (x == -INFINITY) return;  // contributes exp(-inf) = 0; avoids inf - inf
    if (x > m) {
      s = s * expf(m - x) + 1.f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
};

// Merges every thread's Online into the row's logsumexp (fixed trees).
__device__ float block_logsumexp(Online o, float* red) {
  const float M = block_max(o.m, red);
  const float part = o.m == -INFINITY ? 0.f : o.s * expf(o.m - M);
  return M + logf(block_sum(part, red));
}

__global__ void __launch_bounds__(kThreads) loss_kernel(LossParams p) {
  __shared__ float red[kWarpSize];
  const int64_t r = blockIdx.x;
  bf16* s = p.logits + r * p.V;
  const bool teacher = p.teacher_logits != nullptr;
  const bf16* t = teacher ? p.teacher_logits + r * p.V : nullptr;
  const float inv_tau = 1.f / p.temperature;
  const float tau = p.temperature;
  const int32_t target = p.targets[r];
  const bool has_ce = target >= 0 && target < p.V;

  Online o1, oS, oT;
  for (int64_t k = threadIdx.x; k < p.V; k += kThreads) {
    const float x = to_f(s[k]);
    o1.add(x);
    if (teacher) {
      oS.add(x * inv_tau);
      oT.add(to_f(t[k]) * inv_tau);
    }
  }
  const float lse1 = block_logsumexp(o1, red);
  float lseS = 0.f, lseT = 0.f, acc = 0.f, xent = 0.f;
  if (teacher) {
    lseS = block_logsumexp(oS, red);
    lseT = block_logsumexp(oT, red);
    for (int64_t k = threadIdx.x; k < p.V; k += kThreads) {
      const float lsS = to_f(s[k]) * inv_tau - lseS;
      const float lsT = to_f(t[k]) * inv_tau - lseT;
      const float pS = expf(lsS), pT = expf(lsT);
      if (pT > 0.f) xent -= pT * lsS;
      switch (p.kind) {
        case KdKind::forward_kl: if (pT > 0.f) acc += pT * (lsT - lsS); break;
        case KdKind::reverse_kl: if (pS > 0.f) acc += pS * (lsS - lsT); break;
        case KdKind::soft_ce: if (pT > 0.f) acc -= pT * lsS; break;
      }
    }
    acc = block_sum(acc, red);
    if (p.soft_ce) xent = block_sum(xent, red);
  }
  if (threadIdx.x == 0) {
    p.ce[r] = has_ce ? lse1 - to_f(s[target]) : 0.f;
    p.kd[r] = teacher ? tau * tau * acc : 0.f;
    if (p.soft_ce) p.soft_ce[r] = teacher ? tau * tau * xent : 0.f;
  }
  if (!p.compute_grad) return;
  // Thread 0 read s[target] above; make sure that read is done before any overwrite.
  __syncthreads();
  const float w = teacher ? p.kd_weight : 0.f;
  for (int64_t k = threadIdx.x; k < p.V; k += kThreads) {
    const float x = to_f(s[k]);
    float dce = 0.f;
    if (has_ce) dce = expf(x - lse1) - (k == target ? 1.f : 0.f);
    float dkd = 0.f;
    if (teacher) {
      const float lsS = x * inv_tau - lseS;
      const float pS = expf(lsS);
      const float lsT = to_f(t[k]) * inv_tau - lseT;
      dkd = p.kind == KdKind::reverse_kl ? tau * pS * ((lsS - lsT) - acc) : tau * (pS - expf(lsT));
    }
    s[k] = to_bf(p.grad_scale * (w * dkd + (1.f - w) * dce));
  }
}
}  // namespace

void loss_chunk(const LossParams& p, cudaStream_t stream) {
  KD_CHECK(p.temperature > 0.f, "loss_chunk: temperature must be positive, got ", p.temperature);
  KD_CHECK(p.n >= 0 && p.V > 0 && p.n < (int64_t(1) << 31), "loss_chunk: bad shape n=", p.n,
           " V=", p.V);
  if (p.n == 0) return;
  loss_kernel<<<static_cast<unsigned>(p.n), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
