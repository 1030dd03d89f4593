// SwiGLU: out(N,F) = silu(gate_up[:, :F]) * gate_up[:, F:], bf16 storage, fp32 math.
// Backward writes (=) dgate_up(N,2F):  dgate = dout*up*(s + g s (1-s)),  dup = dout*silu(g).
// Elementwise over (N,F), deterministic; any F.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {
void swiglu_forward(bf16* out, const bf16* gate_up, int64_t N, int64_t F, cudaStream_t stream);
void swiglu_backward(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int64_t F,
                     cudaStream_t stream);
}  // namespace kdtrain::cuda
