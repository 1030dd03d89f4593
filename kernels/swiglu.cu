// Kernels for swiglu.cuh: rows from the grid's y dimension, VEC-wide packs of
// the F columns from x (row_pack_loop in vec_layout.h; VEC divides F, so the gate
// and up halves of every row start pack-aligned). No division per element.
#include "kernels/cuda_check.cuh"
#include "kernels/swiglu.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

template <int VEC>
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate_up, int64_t N, int F) {
  row_pack_loop<VEC>(N, blockIdx.y, gridDim.y, F / VEC, blockIdx.x * blockDim.x + threadIdx.x,
                     gridDim.x * blockDim.x, [&](int64_t r, int f) {
                       const bf16* row = gate_up + r * 2 * F;
                       const Pack<bf16, VEC> g = load_pack<VEC>(row + f);
                       const Pack<bf16, VEC> u = load_pack<VEC>(row + F + f);
                       Pack<bf16, VEC> o;
#pragma unroll
                       for (int j = 0; j < VEC; ++j) {
                         const float gf = to_f(g.v[j]);
                         o.v[j] = to_bf(gf * sigmoidf_stable(gf) * to_f(u.v[j]));
                       }
                       store_pack<VEC>(out + r * F + f, o);
                     });
}

template <int VEC>
__global__ void swiglu_backward_kernel(bf16* dgate_up, const bf16* dout, const bf16* gate_up,
                                       int64_t N, int F) {
  row_pack_loop<VEC>(N, blockIdx.y, gridDim.y, F / VEC, blockIdx.x * blockDim.x + threadIdx.x,
                     gridDim.x * blockDim.x, [&](int64_t r, int f) {
                       const bf16* row = gate_up + r * 2 * F;
                       const Pack<bf16, VEC> g = load_pack<VEC>(row + f);
                       const Pack<bf16, VEC> u = load_pack<VEC>(row + F + f);
                       const Pack<bf16, VEC> dy = load_pack<VEC>(dout + r * F + f);
                       Pack<bf16, VEC> dg, du;
#pragma unroll
                       for (int j = 0; j < VEC; ++j) {
                         const float gf = to_f(g.v[j]), d = to_f(dy.v[j]);
                         const float s = sigmoidf_stable(gf);
                         dg.v[j] = to_bf(d * to_f(u.v[j]) * (s + gf * s * (1.f - s)));
                         du.v[j] = to_bf(d * gf * s);
                       }
                       store_pack<VEC>(dgate_up + r * 2 * F + f, dg);
                       store_pack<VEC>(dgate_up + r * 2 * F + F + f, du);
                     });
}

void check_shape(const char* op, int64_t N, int64_t F) {
  KD_CHECK(N >= 0 && F >= 0 && F < (int64_t(1) << 30), op, ": bad shape N=", N, " F=", F);
}
}  // namespace

void swiglu_forward(bf16* out, const bf16* gate_up, int64_t N, int64_t F, cudaStream_t stream) {
  check_shape("swiglu_forward", N, F);
  if (N == 0 || F == 0) return;
  dispatch_pack(widest_pack(F, out, gate_up), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    swiglu_forward_kernel<VEC><<<row_pack_grid(N, F / VEC, kThreads), kThreads, 0, stream>>>(
        out, gate_up, N, static_cast<int>(F));
  });
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int64_t F,
                     cudaStream_t stream) {
  check_shape("swiglu_backward", N, F);
  if (N == 0 || F == 0) return;
  dispatch_pack(widest_pack(F, dgate_up, dout, gate_up), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    swiglu_backward_kernel<VEC><<<row_pack_grid(N, F / VEC, kThreads), kThreads, 0, stream>>>(
        dgate_up, dout, gate_up, N, static_cast<int>(F));
  });
  CUDA_CHECK_LAUNCH();
}
}  // namespace kdtrain::cuda
