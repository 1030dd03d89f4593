// Kernels for sigmoid_gate.cuh: flat packs (elementwise.cuh).
#include "kernels/elementwise.cuh"
#include "kernels/sigmoid_gate.cuh"

namespace kdtrain::cuda {
namespace {
// out = inp * sigmoid(gate)
struct Gate {
  __device__ float operator()(float x, float g) const { return x * sigmoidf_stable(g); }
};
// The backward writes two outputs from three inputs: a flat op of its own.
struct GateBackwardOp {
  bf16 *dinp, *dgate;
  const bf16 *dout, *inp, *gate;
  template <int V>
  __device__ void apply(int64_t k) const {
    const Pack<bf16, V> dy = load_pack<V>(dout + k), x = load_pack<V>(inp + k),
                        g = load_pack<V>(gate + k);
    Pack<bf16, V> dx, dg;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float s = sigmoidf_stable(to_f(g.v[j]));
      const float d = to_f(dy.v[j]);
      dx.v[j] = to_bf(d * s);
      dg.v[j] = to_bf(d * to_f(x.v[j]) * s * (1.f - s));
    }
    store_pack<V>(dinp + k, dx);
    store_pack<V>(dgate + k, dg);
  }
};
}  // namespace

void sigmoid_gate_forward(bf16* out, const bf16* inp, const bf16* gate, int64_t n,
                          cudaStream_t stream) {
  launch_map(Gate{}, n, stream, out, inp, gate);
}

void sigmoid_gate_backward(bf16* dinp, bf16* dgate, const bf16* dout, const bf16* inp,
                           const bf16* gate, int64_t n, cudaStream_t stream) {
  launch_flat(GateBackwardOp{dinp, dgate, dout, inp, gate}, n, stream, dinp, dgate, dout, inp,
              gate);
}
}  // namespace kdtrain::cuda
