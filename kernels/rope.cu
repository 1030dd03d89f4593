// Kernels for rope.cuh. Grid: x over the rotated (head, pack) items of one token,
// y over positions t, z over sequences b (each looping when the grid is capped), so
// the position comes from the grid, not from a division. Each thread rotates VEC
// pairs (x1 at offset i, x2 at i + D/2) with 16-byte loads when D/2 allows.
#include "kernels/cuda_check.cuh"
#include "kernels/rope.cuh"

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 128;

template <int VEC>
__global__ void rope_kernel(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T,
                            int n_heads, int n_rot, int half, float direction) {
  const int items = n_rot * (half / VEC);
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= items) return;
  const RopeItem it = rope_item<VEC>(j, half);
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
      bf16* v = x + ((b * T + t) * n_heads + it.head) * (2 * half) + it.offset;
      const Pack<float, VEC> c = load_pack<VEC>(cos + t * half + it.offset);
      const Pack<float, VEC> s = load_pack<VEC>(sin + t * half + it.offset);
      Pack<bf16, VEC> x1 = load_pack<VEC>(v), x2 = load_pack<VEC>(v + half);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float a = to_f(x1.v[k]), b2 = to_f(x2.v[k]), sk = direction * s.v[k];
        x1.v[k] = to_bf(a * c.v[k] - b2 * sk);
        x2.v[k] = to_bf(b2 * c.v[k] + a * sk);
      }
      store_pack<VEC>(v, x1);
      store_pack<VEC>(v + half, x2);
    }
  }
}

void launch(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T, int64_t n_heads,
            int64_t n_rot, int64_t D, float direction, cudaStream_t stream) {
  KD_CHECK(D % 2 == 0 && n_rot >= 0 && n_rot <= n_heads && n_heads * D < (int64_t(1) << 30),
           "rope: head dim ", D, " must be even and n_rot ", n_rot, " <= n_heads ", n_heads);
  const int64_t half = D / 2;
  if (B <= 0 || T <= 0 || n_rot == 0 || half == 0) return;
  dispatch_pack(widest_pack(half, x, cos, sin), [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    const int64_t items = n_rot * (half / VEC);
    const dim3 grid(static_cast<unsigned>(ceil_div(items, kThreads)),
                    static_cast<unsigned>(std::min<int64_t>(T, 65535)),
                    static_cast<unsigned>(std::min<int64_t>(B, 65535)));
    rope_kernel<VEC><<<grid, kThreads, 0, stream>>>(x, cos, sin, B, T, static_cast<int>(n_heads),
                                                    static_cast<int>(n_rot),
                                                    static_cast<int>(half), direction);
  });
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void rope_forward(bf16* x, const float* cos, const float* sin, int64_t B, int64_t T,
                  int64_t n_heads, int64_t n_rot, int64_t D, cudaStream_t stream) {
  launch(x, cos, sin, B, T, n_heads, n_rot, D, 1.f, stream);
}
void rope_backward(bf16* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t n_heads, int64_t n_rot, int64_t D, cudaStream_t stream) {
  launch(dx, cos, sin, B, T, n_heads, n_rot, D, -1.f, stream);
}
}  // namespace kdtrain::cuda
