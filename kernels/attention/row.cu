// Kernels for row.cuh.
//
// Layout of the work (block of kThreads = 4 warps):
// - dot products q.k over D: one warp per key, lanes stride D, butterfly sum;
// - sums over keys for an output channel d: one thread per d walks the keys in
//   order (reads of V_j[d] coalesce across threads);
// - row statistics (max, denominator, D_i): block_max / block_sum, fixed trees.
#include <algorithm>

#include "kernels/attention/row.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;

struct Index {  // offsets into the packed qkv rows (element units)
  int64_t T, H, Hkv, D;
  __device__ explicit Index(const flash::AttentionParams& p) : T(p.T), H(p.H), Hkv(p.Hkv), D(p.D) {}
  __device__ int64_t row(int64_t b, int64_t t) const { return (b * T + t) * (H + 2 * Hkv) * D; }
  __device__ int64_t q(int64_t b, int64_t t, int64_t h) const { return row(b, t) + h * D; }
  __device__ int64_t k(int64_t b, int64_t t, int64_t g) const { return row(b, t) + (H + g) * D; }
  __device__ int64_t v(int64_t b, int64_t t, int64_t g) const { return row(b, t) + (H + Hkv + g) * D; }
  __device__ int64_t o(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * D; }
};

// The params carry bf16 tensors as raw words (params.h): read and written through these.
__device__ __forceinline__ float from_bf16(uint16_t w) { return to_f(__ushort_as_bfloat16(w)); }
__device__ __forceinline__ uint16_t to_bf16(float x) { return __bfloat16_as_ushort(to_bf(x)); }

// Warp-cooperative dot of an fp32 shared vector with a bf16 global vector.
__device__ __forceinline__ float warp_dot(const float* a, const uint16_t* b, int64_t D) {
  float s = 0.f;
  for (int64_t d = threadIdx.x % kWarpSize; d < D; d += kWarpSize) s += a[d] * from_bf16(b[d]);
  return warp_sum(s);
}

// A block of grid (T, B*H): the call's qkv index, query row i of head h in sequence b,
// h's kv head g, and this thread's warp and lane.
struct QueryRow {
  Index ix;
  int64_t i, b, h, g;
  int warp, lane;
  __device__ explicit QueryRow(const flash::AttentionParams& p)
      : ix(p), i(blockIdx.x), b(blockIdx.y / p.H), h(blockIdx.y % p.H), g(h / (p.H / p.Hkv)),
        warp(threadIdx.x / kWarpSize), lane(threadIdx.x % kWarpSize) {}
};

// For channel d of query row i (sequence b, kv head g): sum_{j<=i} w_j V_j[d] and
// sum_{j<=i} V_j[d], keys in order.
__device__ __forceinline__ void weighted_v_sums(const flash::AttentionParams& p, const Index& ix, int64_t b, int64_t g,
                                                int64_t i, const float* w, int64_t d, float& wv, float& vsum) {
  wv = 0.f;
  vsum = 0.f;
  for (int64_t j = 0; j <= i; ++j) {
    const float v = from_bf16(p.qkv[ix.v(b, j, g) + d]);
    wv += w[j] * v;
    vsum += v;
  }
}

// grid (T, B*H): block (i, b*H + h). Shared: q (D), scores (T).
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(flash::AttentionParams p) {
  extern __shared__ float smem[];
  __shared__ float red[kWarpSize];
  const auto [ix, i, b, h, g, warp, lane] = QueryRow(p);
  float* q = smem;
  float* s = smem + p.D;

  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) q[d] = from_bf16(p.qkv[ix.q(b, i, h) + d]);
  __syncthreads();
  for (int64_t j = warp; j <= i; j += kWarps) {
    const float dot = warp_dot(q, p.qkv + ix.k(b, j, g), p.D);
    if (lane == 0) s[j] = p.scale * dot;
  }
  __syncthreads();

  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) m = fmaxf(m, s[j]);
  m = block_max(m, red);
  if (p.sink) m = fmaxf(m, p.sinks[h]);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    const float e = expf(s[j] - m);
    s[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red);  // its barriers also publish the s[j] writes
  if (p.sink) sum += expf(p.sinks[h] - m);
  if (threadIdx.x == 0) p.lse[(b * p.H + h) * p.T + i] = m + logf(sum);
  const float inv = 1.f / sum;

  float a = 1.f, beta = 0.f;
  if (p.affine) {
    a = from_bf16(p.alpha[(b * p.T + i) * p.H + h]);
    beta = (p.alpha_ma[h] - a) / flash::affine_bias_count(p, i);
  }
  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
    float acc, vsum;
    weighted_v_sums(p, ix, b, g, i, s, d, acc, vsum);
    const float o = p.affine ? a * (acc * inv) + beta * vsum : acc * inv;
    p.out[ix.o(b, i, h) + d] = to_bf16(o);
  }
}

// Pass 1, grid (T, B*H): block (i, b*H + h) writes dq_i, Drow_i and dalpha_i.
// Shared: q (D), dO (D), dO' = alpha dO (D), p (T), dp (T).
__global__ void __launch_bounds__(kThreads) attention_backward_query_kernel(flash::AttentionParams p,
                                                                          float* drow) {
  extern __shared__ float smem[];
  __shared__ float red[kWarpSize];
  const auto [ix, i, b, h, g, warp, lane] = QueryRow(p);
  float* q = smem;
  float* dO = q + p.D;
  float* dop = dO + p.D;
  float* pj = dop + p.D;
  float* dpj = pj + p.T;

  const float a = p.affine ? from_bf16(p.alpha[(b * p.T + i) * p.H + h]) : 1.f;
  const float l = p.lse[(b * p.H + h) * p.T + i];
  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
    q[d] = from_bf16(p.qkv[ix.q(b, i, h) + d]);
    dO[d] = from_bf16(p.dout[ix.o(b, i, h) + d]);
    dop[d] = a * dO[d];
  }
  __syncthreads();
  for (int64_t j = warp; j <= i; j += kWarps) {
    const float qk = warp_dot(q, p.qkv + ix.k(b, j, g), p.D);
    const float dv = warp_dot(dop, p.qkv + ix.v(b, j, g), p.D);
    if (lane == 0) {
      pj[j] = expf(p.scale * qk - l);
      dpj[j] = dv;
    }
  }
  __syncthreads();

  // (PV)_i and sum_j V_j per channel, then D_i and dalpha_i as block sums.
  float di_part = 0.f, da_part = 0.f;
  const float invN = 1.f / flash::affine_bias_count(p, i);
  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
    float pv, vsum;
    weighted_v_sums(p, ix, b, g, i, pj, d, pv, vsum);
    di_part += dop[d] * pv;
    da_part += dO[d] * (pv - vsum * invN);
  }
  const float Di = block_sum(di_part, red);
  const float da = block_sum(da_part, red);
  if (threadIdx.x == 0) {
    drow[(b * p.H + h) * p.T + i] = Di;
    if (p.affine) p.dalpha[(b * p.T + i) * p.H + h] = to_bf16(da);
  }
  // dS_j = p_j (dp_j - D_i), in place over dpj; each thread rewrites its own j.
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) dpj[j] = pj[j] * (dpj[j] - Di);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
    float acc = 0.f;
    for (int64_t j = 0; j <= i; ++j) acc += dpj[j] * from_bf16(p.qkv[ix.k(b, j, g) + d]);
    p.dqkv[ix.q(b, i, h) + d] = to_bf16(p.scale * acc);
  }
}

// Pass 2, grid (T, B*Hkv): block (j, b*Hkv + g) writes dk_j and dv_j, summing over the
// group's query heads (in order) and queries i >= j (in order).
// Shared: k (D), v (D), dk (D), dv (D), cq (T), cv (T).
// At least 10 blocks per SM: left alone, ptxas gives this kernel 64 registers (8 blocks)
// since the affine divisor became a runtime choice; 48 fit with no spill (kernel_report.sh).
__global__ void __launch_bounds__(kThreads, 10) attention_backward_key_kernel(flash::AttentionParams p,
                                                                        const float* drow) {
  extern __shared__ float smem[];
  const Index ix(p);
  const int64_t j = blockIdx.x, b = blockIdx.y / p.Hkv, g = blockIdx.y % p.Hkv;
  const int64_t group = p.H / p.Hkv;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  float* k = smem;
  float* v = k + p.D;
  float* dk = v + p.D;
  float* dv = dk + p.D;
  float* cq = dv + p.D;  // coefficient of q_i in dk_j: scale * dS_ij
  float* cv = cq + p.T;  // coefficient of dO_i in dv_j: p_ij alpha_i + beta_i

  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
    k[d] = from_bf16(p.qkv[ix.k(b, j, g) + d]);
    v[d] = from_bf16(p.qkv[ix.v(b, j, g) + d]);
    dk[d] = 0.f;
    dv[d] = 0.f;
  }
  __syncthreads();
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const float ma = p.affine ? p.alpha_ma[h] : 0.f;
    for (int64_t i = j + warp; i < p.T; i += kWarps) {
      const float qk = warp_dot(k, p.qkv + ix.q(b, i, h), p.D);
      const float dOv = warp_dot(v, p.dout + ix.o(b, i, h), p.D);
      if (lane == 0) {
        const int64_t r = (b * p.H + h) * p.T + i;
        const float a = p.affine ? from_bf16(p.alpha[(b * p.T + i) * p.H + h]) : 1.f;
        const float pij = expf(p.scale * qk - p.lse[r]);
        cq[i] = p.scale * pij * (a * dOv - drow[r]);
        cv[i] = pij * a + (p.affine ? (ma - a) / flash::affine_bias_count(p, i) : 0.f);
      }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
      float acc_k = dk[d], acc_v = dv[d];
      for (int64_t i = j; i < p.T; ++i) {
        acc_k += cq[i] * from_bf16(p.qkv[ix.q(b, i, h) + d]);
        acc_v += cv[i] * from_bf16(p.dout[ix.o(b, i, h) + d]);
      }
      dk[d] = acc_k;
      dv[d] = acc_v;
    }
    __syncthreads();  // cq/cv are rewritten for the next head
  }
  for (int64_t d = threadIdx.x; d < p.D; d += kThreads) {
    p.dqkv[ix.k(b, j, g) + d] = to_bf16(dk[d]);
    p.dqkv[ix.v(b, j, g) + d] = to_bf16(dv[d]);
  }
}

// grid (H): dsinks[h] -= sum over (b, i) of exp(s_h - lse) * D_i, fixed tree.
__global__ void __launch_bounds__(kThreads) attention_dsinks_kernel(flash::AttentionParams p,
                                                                  const float* drow) {
  __shared__ float red[kWarpSize];
  const int64_t h = blockIdx.x;
  const float s = p.sinks[h];
  float acc = 0.f;
  for (int64_t bi = threadIdx.x; bi < p.B * p.T; bi += kThreads) {
    const int64_t b = bi / p.T, i = bi % p.T;
    const int64_t r = (b * p.H + h) * p.T + i;
    acc += expf(s - p.lse[r]) * drow[r];
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) p.dsinks[h] -= acc;
}

void check_params(const flash::AttentionParams& p, const char* op) {
  KD_CHECK(p.B >= 0 && p.T >= 0 && p.H > 0 && p.Hkv > 0 && p.D > 0 && p.H % p.Hkv == 0, op,
           ": bad shape B=", p.B, " T=", p.T, " H=", p.H, " Hkv=", p.Hkv, " D=", p.D);
  KD_CHECK(p.B * p.H <= row::kMaxGridY && p.T < (int64_t(1) << 31), op, ": B*H=", p.B * p.H,
           " exceeds the grid limit ", row::kMaxGridY);
  KD_CHECK(!p.sink || p.sinks != nullptr, op, " (sink): sinks must be given");
  KD_CHECK(!p.affine || (p.alpha != nullptr && p.alpha_ma != nullptr), op,
           " (affine): alpha and alpha_ma must be given");
}

// Opts a kernel into more than 48 KB of dynamic shared memory when needed.
template <typename Kernel>
void set_smem(Kernel kernel, size_t bytes, const char* op) {
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  KD_CHECK(bytes + row::kReductionBytes <= static_cast<size_t>(limit), op, ": needs ", bytes,
           " bytes of shared memory per block (limit ", limit, "); sequence too long for the ",
           "unfused attention");
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)));
}
}  // namespace

void row_attention_forward(const flash::AttentionParams& p, cudaStream_t stream) {
  check_params(p, "attention_forward");
  if (p.B == 0 || p.T == 0) return;
  const size_t smem = row::forward_smem_bytes(p.T, p.D);
  set_smem(attention_forward_kernel, smem, "attention_forward");
  const dim3 grid(static_cast<unsigned>(p.T), static_cast<unsigned>(p.B * p.H));
  attention_forward_kernel<<<grid, kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

size_t row_attention_backward_workspace_bytes(const flash::AttentionParams& p) {
  return static_cast<size_t>(p.B * p.H * p.T) * sizeof(float);
}

void row_attention_backward(const flash::AttentionParams& p, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  check_params(p, "attention_backward");
  KD_CHECK(!p.affine || p.dalpha != nullptr, "attention_backward (affine): dalpha must be given");
  if (p.B == 0 || p.T == 0) return;
  KD_CHECK(workspace != nullptr && workspace_bytes >= row_attention_backward_workspace_bytes(p),
           "attention_backward: workspace of ", workspace_bytes, " bytes, ",
           row_attention_backward_workspace_bytes(p), " needed");
  float* drow = static_cast<float*>(workspace);
  const size_t smem_q = row::backward_query_smem_bytes(p.T, p.D);
  const size_t smem_k = row::backward_key_smem_bytes(p.T, p.D);
  set_smem(attention_backward_query_kernel, smem_q, "attention_backward");
  set_smem(attention_backward_key_kernel, smem_k, "attention_backward");
  attention_backward_query_kernel<<<dim3(unsigned(p.T), unsigned(p.B * p.H)), kThreads, smem_q,
                                    stream>>>(p, drow);
  CUDA_CHECK_LAUNCH();
  attention_backward_key_kernel<<<dim3(unsigned(p.T), unsigned(p.B * p.Hkv)), kThreads, smem_k,
                                  stream>>>(p, drow);
  CUDA_CHECK_LAUNCH();
  if (p.sink && p.dsinks != nullptr) {
    attention_dsinks_kernel<<<unsigned(p.H), kThreads, 0, stream>>>(p, drow);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kdtrain::cuda
