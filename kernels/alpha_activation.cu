// Kernels for alpha_activation.cuh: flat maps (elementwise.cuh). The activation
// is a runtime field of the map (one instantiation): the branch is uniform across
// the grid, so it costs nothing.
#include "kernels/alpha_activation.cuh"
#include "kernels/elementwise.cuh"

namespace kdtrain::cuda {
namespace {
__device__ __forceinline__ float linear_clip(float x) {
  return x <= -5.f ? 0.f : (x >= 5.f ? 1.f : 0.1f * x + 0.5f);
}

// alpha = act(z)
struct AlphaForward {
  bool sigmoid;
  __device__ float operator()(float x) const { return sigmoid ? sigmoidf_stable(x) : linear_clip(x); }
};

// dz = dalpha * act'(z)
struct AlphaBackward {
  bool sigmoid;
  __device__ float operator()(float dalpha, float x) const {
    float d;
    if (sigmoid) {
      const float s = sigmoidf_stable(x);
      d = s * (1.f - s);
    } else {
      d = (x > -5.f && x < 5.f) ? 0.1f : 0.f;
    }
    return dalpha * d;
  }
};
}  // namespace

void alpha_activation_forward(bf16* alpha, const bf16* z, int64_t n, bool sigmoid,
                              cudaStream_t stream) {
  launch_map(AlphaForward{sigmoid}, n, stream, alpha, z);
}

void alpha_activation_backward(bf16* dz, const bf16* dalpha, const bf16* z, int64_t n,
                               bool sigmoid, cudaStream_t stream) {
  launch_map(AlphaBackward{sigmoid}, n, stream, dz, dalpha, z);
}
}  // namespace kdtrain::cuda
