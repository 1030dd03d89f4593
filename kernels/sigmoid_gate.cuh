// The gated variants' output gate: out = inp * sigmoid(gate), bf16 storage, fp32 math.
// Backward writes (=) both dinp = dout*s and dgate = dout*inp*s*(1-s). Elementwise,
// deterministic.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
void sigmoid_gate_forward(bf16* out, const bf16* inp, const bf16* gate, int64_t n,
                          cudaStream_t stream);  // all (n)
void sigmoid_gate_backward(bf16* dinp, bf16* dgate, const bf16* dout, const bf16* inp,
                           const bf16* gate, int64_t n, cudaStream_t stream);  // all (n)
}  // namespace kdtrain::cuda
