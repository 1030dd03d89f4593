// Matrix products of the linear layers through cuBLASLt: bf16 inputs, fp32
// accumulation (CUBLAS_COMPUTE_32F), row-major tensors as in backend.h.
//
//   forward:  out(N,OC) = inp(N,IC) @ weight(OC,IC)^T (+ bias(OC))           bf16, =
//   backward: dinp(N,IC) = (or +=) dout(N,OC) @ weight(OC,IC)               bf16
//             dweight(OC,IC) += dout^T @ inp                                fp32, beta = 1
//             dbias(OC) += column sums of dout                              fp32, column_sum.cuh
//
// Row-major X(r,c) is column-major X^T with leading dimension c, so each product
// is issued as its transpose in column-major form (see matmul.cu).
// Plans: the descriptors, layouts and heuristic answer of each distinct call
// (MatmulKey, matmul_plan.h) are built once and cached in the context; a step
// reuses them (about 700 products per step, a handful of distinct keys).
// Numerics: the bias is added by cuBLASLt's BIAS epilogue inside the product (fp32
// accumulator + bias, one rounding to bf16); where the heuristic offers no
// algorithm (the cublasGemmEx fallback) a small kernel adds it after (one more
// rounding). dbias stays a column-sum kernel (column_sum.cuh): the BGRADB epilogue
// writes (=) where dbias accumulates (+=) and does not document a fixed reduction
// order.
// Determinism: cuBLAS gives the same bits run after run on the same GPU model and
// library version for the same algorithm; the algorithm is a function of shapes
// and pointer alignment only (heuristic query, fixed workspace), and the
// reductions over k stay inside the kernel (no atomics in the default schemes).
// When cuBLASLt's heuristic offers no algorithm (odd leading dimensions), the
// product falls back to cublasGemmEx with the same types.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {

struct PlanCache;  // matmul.cu

// Handles, workspace and the plan cache owned by the backend (no globals).
struct BlasContext {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;  // fallback path only
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  PlanCache* plans = nullptr;
};
// Plans built so far (distinct keys) and products run, for tests and reports.
struct PlanStats {
  int64_t plans = 0, products = 0;
};
PlanStats plan_stats(const BlasContext& ctx);

// Creates handles and a workspace of `workspace_bytes`; destroy with blas_destroy.
BlasContext blas_create(size_t workspace_bytes);
void blas_destroy(BlasContext& ctx);

// bias may be null.
void matmul_forward(const BlasContext& ctx, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int64_t N, int64_t IC, int64_t OC, cudaStream_t stream);

// Bytes of scratch matmul_backward needs (for dbias); 0 without dbias.
size_t matmul_backward_scratch_bytes(int64_t N, int64_t OC, bool has_dbias);

// dinp, dweight, dbias may each be null. scratch: matmul_backward_scratch_bytes.
void matmul_backward(const BlasContext& ctx, bf16* dinp, float* dweight, float* dbias,
                     const bf16* dout, const bf16* inp, const bf16* weight, int64_t N, int64_t IC,
                     int64_t OC, bool accumulate_dinp, void* scratch, cudaStream_t stream);

}  // namespace kdtrain::cuda
