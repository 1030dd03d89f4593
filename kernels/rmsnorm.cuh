// RMSNorm on the CUDA backend: the launchers only (kernels live in rmsnorm.cu).
//
// Numerics (mirrors the CPU reference of backend.h):
// - storage is bf16 for activations and the weight; every sum is fp32;
//   rstd and dweight are fp32.
// - forward:   rstd[n] = 1/sqrt(mean_c(inp[n,c]^2) + eps),  out = inp * rstd * weight (=)
// - backward:  dinp += rstd*w*dout - rstd^3/C * inp * sum_c(dout*w*inp)    (bf16, +=)
//              dweight += sum_n dout * inp * rstd                          (fp32, +=)
// - deterministic: no float atomics. dweight is reduced as fixed row chunks into
//   a scratch buffer, then summed chunk by chunk in order, so the bits depend only
//   on (N, C) and the inputs, never on the GPU model or scheduling.
// - loads are vectorised (up to 16 bytes: 8 bf16) when C and the pointers allow;
//   any C works, odd C falls back to scalar loads.
// - fused add: sum_out = bf16(a + b) (one rounding, as the add op), then the forward
//   above on sum_out: bit for bit what add followed by rmsnorm_forward computes.
//   sum_out may alias a or b (each lane reads its columns before writing them).
// Otherwise buffers must not alias each other. N == 0 is a no-op.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kdtrain::cuda {

// out (N,C) bf16, rstd (N) fp32, inp (N,C) bf16, weight (C) bf16.
void rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* inp,
                     const __nv_bfloat16* weight, int64_t N, int64_t C, float eps,
                     cudaStream_t stream);

// sum_out (N,C) = a + b, then out, rstd as rmsnorm_forward on sum_out.
void add_rmsnorm_forward(__nv_bfloat16* sum_out, __nv_bfloat16* out, float* rstd,
                         const __nv_bfloat16* a, const __nv_bfloat16* b,
                         const __nv_bfloat16* weight, int64_t N, int64_t C, float eps,
                         cudaStream_t stream);

// Bytes of device scratch rmsnorm_backward needs for this shape (fp32 partial sums).
size_t rmsnorm_backward_scratch_bytes(int64_t N, int64_t C);

// dinp (N,C) bf16 accumulated, dweight (C) fp32 accumulated, scratch of
// rmsnorm_backward_scratch_bytes(N, C) bytes (contents ignored and clobbered),
// dout/inp (N,C) bf16, weight (C) bf16, rstd (N) fp32 from the forward.
void rmsnorm_backward(__nv_bfloat16* dinp, float* dweight, void* scratch,
                      const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                      const __nv_bfloat16* weight, const float* rstd, int64_t N, int64_t C,
                      cudaStream_t stream);

}  // namespace kdtrain::cuda
