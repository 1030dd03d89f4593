// Fused causal attention, forward. Contract and numerics: flash_attention.cuh.
//
// One block of Br/16 warps per (b, h, query tile of Br rows); warp w owns rows
// [16w, 16w + 16) of the tile. Per key tile of Bc rows (ascending, stopping at the
// tile holding the last row's diagonal):
//   1. K and V tiles are staged in shared memory (zero-filled past T);
//   2. S = Q K^T (tensor cores) -> per-warp fp32 scratch;
//   3. online softmax per row (mask j <= i only on tiles that cross the diagonal):
//      m_new = max(m, rowmax), corr = e^{m - m_new}, P = e^{S - m_new} as bf16,
//      l = l corr + rowsum(P);
//   4. PV (tensor cores) -> scratch; acc = acc corr + PV, acc in registers;
//   5. affine: a tile entirely at or below the diagonal adds its column sums to a
//      shared fp32 vector (the part of prefix(V) shared by all the tile's rows).
// Epilogue: affine needs sum_{j in [i0, i]} v_j per row — with Bc dividing Br the
// crossing tiles are exactly the query tile's own rows — a column scan of those V
// rows in shared memory. Then out = alpha acc / l + beta S (bf16), lse = m + log l.
#include <algorithm>
#include <cmath>

#include "cuda_check.cuh"
#include "flash_attention.cuh"
#include "flash_attention_tile.cuh"
#include "flash_params.h"

namespace kdtrain::cuda {
namespace {

using namespace flash_detail;
using kdtrain::flash::FlashParams;

template <int D, int Br, int Bc>
struct FwdLayout {
  static constexpr int kWarps = Br / kFrag;
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kLdh = Strides<D>::kHalf;           // bf16 Q/K/V rows
  static constexpr int kLds = (Bc > D ? Bc : D) + 4;       // fp32 scratch rows
  static constexpr int kLdp = Bc + 8;                      // bf16 P rows
  static constexpr size_t kQ = 0;                                            // Q (Br x D)
  static constexpr size_t kK = kQ + sizeof(bf16) * Br * kLdh;                // K (Bc x D)
  static constexpr size_t kV = kK + sizeof(bf16) * Bc * kLdh;                // V (Bc x D)
  static constexpr size_t kS = kV + sizeof(bf16) * Bc * kLdh;                // scratch (Br x W)
  static constexpr size_t kP = kS + sizeof(float) * Br * kLds;               // P (Br x Bc)
  static constexpr size_t kVsum = kP + sizeof(bf16) * Br * kLdp;             // prefix (D) [affine]
  static constexpr size_t kBytes = kVsum + sizeof(float) * D;
  static_assert(Br % kFrag == 0 && Bc % kFrag == 0 && Br % Bc == 0, "tile shape");
  static_assert(2 * Bc >= Br, "the epilogue stages Br V rows in the K and V buffers");
  static_assert(kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0, "WMMA alignment");
};

template <int D, int Br, int Bc, typename Flags>
__global__ void __launch_bounds__(FwdLayout<D, Br, Bc>::kThreads)
    flash_forward_kernel(FlashParams p, const bf16* __restrict__ qkv, const float* __restrict__ sinks,
                         const bf16* __restrict__ alpha, const float* __restrict__ alpha_ma,
                         bf16* __restrict__ out, float* __restrict__ lse) {
  using L = FwdLayout<D, Br, Bc>;
  constexpr bool kSink = Flags::kSink, kAffine = Flags::kAffine;
  constexpr int kHalfD = D / 2, kHalfC = Bc / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::kV);
  float* Ss = reinterpret_cast<float*>(smem + L::kS);
  bf16* Ps = reinterpret_cast<bf16*>(smem + L::kP);
  float* vsum = reinterpret_cast<float*>(smem + L::kVsum);

  // Heaviest tiles (most keys) first.
  const int qt = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / p.group;
  const int T = static_cast<int>(p.T);
  const int i0 = qt * Br;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int r_local = warp * kFrag + lane / 2, half = lane & 1;
  const int i = i0 + r_local;  // this lane's query row (may be >= T: computed, never stored)

  const bf16* qbase = qkv + b * p.qkv_batch + h * p.D;
  const bf16* kbase = qkv + b * p.qkv_batch + p.k_offset + g * p.D;
  const bf16* vbase = qkv + b * p.qkv_batch + p.v_offset + g * p.D;

  load_rows<D, Br>(Qs, qbase + static_cast<int64_t>(i0) * p.qkv_token, p.qkv_token, min(Br, T - i0));
  if constexpr (kAffine) {
    for (int d = threadIdx.x; d < D; d += L::kThreads) vsum[d] = 0.f;
  }

  // The sink is a key of logit s_h and value 0: it seeds the running max and sum.
  float m = kSink ? sinks[h] : -INFINITY;
  float l = kSink ? 1.f : 0.f;
  float acc[kHalfD];
#pragma unroll
  for (int d = 0; d < kHalfD; ++d) acc[d] = 0.f;

  float* S_warp = Ss + warp * kFrag * L::kLds;
  bf16* P_warp = Ps + warp * kFrag * L::kLdp;
  const int kend = min(T, i0 + Br);  // keys beyond the last row's diagonal are never visible
  for (int j0 = 0; j0 < kend; j0 += Bc) {
    __syncthreads();  // previous K/V and scratch fully consumed
    load_rows<D, Bc>(Ks, kbase + static_cast<int64_t>(j0) * p.qkv_token, p.qkv_token, min(Bc, T - j0));
    load_rows<D, Bc>(Vs, vbase + static_cast<int64_t>(j0) * p.qkv_token, p.qkv_token, min(Bc, T - j0));
    __syncthreads();
    const bool full = j0 + Bc - 1 <= i0;  // every key of the tile visible to every row (and < T)
    if constexpr (kAffine) {
      if (full) {
        for (int d = threadIdx.x; d < D; d += L::kThreads) {
          float s = 0.f;
          for (int c = 0; c < Bc; ++c) s += __bfloat162float(Vs[c * L::kLdh + d]);
          vsum[d] += s;
        }
      }
    }

    // S = Q_w K^T
#pragma unroll
    for (int n = 0; n < Bc; n += kFrag) {
      FragC c;
      wmma::fill_fragment(c, 0.f);
      mma_abt<D>(c, Qs + warp * kFrag * L::kLdh, L::kLdh, Ks + n * L::kLdh, L::kLdh);
      wmma::store_matrix_sync(S_warp + n, c, L::kLds, wmma::mem_row_major);
    }
    __syncwarp();

    float sv[kHalfC];
    float mx = m;
#pragma unroll
    for (int c = 0; c < kHalfC; ++c) {
      const int col = half * kHalfC + c;
      float x = S_warp[(lane / 2) * L::kLds + col] * p.scale;
      if (!full && j0 + col > i) x = -INFINITY;
      sv[c] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    // Key 0 is visible to every row, so mx is finite from the first tile on.
    const float corr = (m == -INFINITY) ? 0.f : __expf(m - mx);
    float rowsum = 0.f;
#pragma unroll
    for (int c = 0; c < kHalfC; ++c) {
      const float e = (sv[c] == -INFINITY) ? 0.f : __expf(sv[c] - mx);
      rowsum += e;
      P_warp[(lane / 2) * L::kLdp + half * kHalfC + c] = __float2bfloat16(e);
    }
    rowsum += __shfl_xor_sync(0xffffffffu, rowsum, 1);
    l = l * corr + rowsum;
    m = mx;
    __syncwarp();

    // PV -> scratch (S has been read into registers), then acc = acc * corr + PV.
#pragma unroll
    for (int n = 0; n < D; n += kFrag) {
      FragC c;
      wmma::fill_fragment(c, 0.f);
      mma_ab<Bc>(c, P_warp, L::kLdp, Vs + n, L::kLdh);
      wmma::store_matrix_sync(S_warp + n, c, L::kLds, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int d = 0; d < kHalfD; ++d) acc[d] = acc[d] * corr + S_warp[(lane / 2) * L::kLds + half * kHalfD + d];
  }

  // Epilogue.
  float o[kHalfD];
  const float inv_l = 1.f / l;
  if constexpr (kAffine) {
    // Column scan of v rows [i0, i0 + Br) (the diagonal part of each row's prefix).
    __syncthreads();
    bf16* Vd = Ks;  // K and V buffers are contiguous: room for Br rows
    load_rows<D, Br>(Vd, vbase + static_cast<int64_t>(i0) * p.qkv_token, p.qkv_token, min(Br, T - i0));
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += L::kThreads) {
      float run = 0.f;
      for (int r = 0; r < Br; ++r) {
        run += __bfloat162float(Vd[r * L::kLdh + d]);
        Ss[r * L::kLds + d] = run;
      }
    }
    __syncthreads();
    const float a = (i < T) ? __bfloat162float(alpha[b * p.alpha_batch + static_cast<int64_t>(i) * p.alpha_token + h]) : 0.f;
    const float beta = (alpha_ma[h] - a) / static_cast<float>(i + 1);
#pragma unroll
    for (int d = 0; d < kHalfD; ++d) {
      const int col = half * kHalfD + d;
      o[d] = a * (acc[d] * inv_l) + beta * (vsum[col] + Ss[r_local * L::kLds + col]);
    }
  } else {
#pragma unroll
    for (int d = 0; d < kHalfD; ++d) o[d] = acc[d] * inv_l;
  }
  if (i < T) {
    store_bf16_row<kHalfD>(out + b * p.o_batch + static_cast<int64_t>(i) * p.o_token + h * p.D + half * kHalfD, o);
    if (half == 0) lse[b * p.lse_batch + h * p.lse_head + i] = m + logf(l);
  }
}

template <int D, typename Flags>
void launch_forward(const FlashParams& p, const AttentionForwardArgs& a, cudaStream_t stream) {
  constexpr auto tiles = kdtrain::flash::flash_tiles(D, Flags::kSink, Flags::kAffine,
                                                      kdtrain::flash::FlashPass::forward);
  constexpr int Br = tiles.Br, Bc = tiles.Bc;
  using L = FwdLayout<D, Br, Bc>;
  static_assert(L::kWarps == tiles.warps, "flash_tiles and the kernel disagree on warps");
  auto kernel = flash_forward_kernel<D, Br, Bc, Flags>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(L::kBytes)));
  const dim3 grid(static_cast<unsigned>((p.T + Br - 1) / Br), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.B));
  kernel<<<grid, L::kThreads, L::kBytes, stream>>>(
      p, static_cast<const bf16*>(a.qkv), a.sinks, static_cast<const bf16*>(a.alpha), a.alpha_ma,
      static_cast<bf16*>(a.out), a.lse);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool flash_attention_supported(const AttentionShape& s) {
  return (s.D == 64 || s.D == 128) && s.Hkv > 0 && s.H % s.Hkv == 0 && s.T >= 0 && s.B >= 0;
}

void flash_attention_forward(const AttentionForwardArgs& args, cudaStream_t stream) {
  const AttentionShape& s = args.shape;
  if (!flash_attention_supported(s))
    fail("flash attention: unsupported shape (head dim ", s.D, ", H ", s.H, ", Hkv ", s.Hkv,
         "); head dims 64 and 128 with H a multiple of Hkv are supported");
  if (has_sink(args.variant) && has_affine(args.variant))
    fail("flash attention: sink and affine cannot be combined");
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  if (s.B > 65535 || s.H > 65535) fail("flash attention: B and H must be at most 65535");
  const FlashParams p = kdtrain::flash::make_flash_params(s.B, s.T, s.H, s.Hkv, s.D, args.scale);
  kdtrain::flash::flash_dispatch(has_sink(args.variant), has_affine(args.variant), [&](auto flags) {
    using Flags = decltype(flags);
    if (s.D == 64)
      launch_forward<64, Flags>(p, args, stream);
    else
      launch_forward<128, Flags>(p, args, stream);
  });
}

}  // namespace kdtrain::cuda
