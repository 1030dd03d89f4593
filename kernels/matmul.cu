// cuBLASLt products for matmul.cuh, the cublasGemmEx fallback, and the bias kernel.
#include <string>

#include "column_sum.cuh"
#include "cuda_check.cuh"
#include "matmul.cuh"

#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    const cublasStatus_t kd_blas_status_ = (expr);                                          \
    if (kd_blas_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::kdtrain::fail("cuBLAS error ", static_cast<int>(kd_blas_status_), " (",             \
                      cublasGetStatusString(kd_blas_status_), ") in ", #expr, " at ",       \
                      __FILE__, ":", __LINE__);                                             \
  } while (0)

namespace kdtrain::cuda {
namespace {
constexpr int kThreads = 256;

// out(n, o) += bias(o), fp32 add, one rounding.
__global__ void add_bias_kernel(bf16* out, const bf16* bias, int64_t N, int64_t OC) {
  const int64_t total = N * OC;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x)
    out[k] = to_bf(to_f(out[k]) + to_f(bias[k % OC]));
}

// Largest power of two <= 256 dividing the address: cuBLASLt's heuristic assumes
// 256-byte aligned buffers unless told otherwise, and views into activations
// (a chunk of rows, a slice of heads) are often less aligned.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// Column-major C(m,n) = op(A) op(B) + beta C with A, B bf16, C bf16 or fp32
// (c_type), fp32 accumulation. A is stored (k,m) when trans_a else (m,k); B is
// stored (n,k) when trans_b else (k,n).
void gemm(const BlasContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const bf16* A, int64_t lda, const bf16* B, int64_t ldb, void* C, cudaDataType_t c_type,
          int64_t ldc, float beta, cudaStream_t stream) {
  const float alpha = 1.f;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_16BF, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_16BF, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_layout, c_type, m, n, ldc));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ctx.workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_c = alignment_of(C);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t heur = cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc, a_layout, b_layout, c_layout,
                                                             c_layout, pref, 1, &result, &found);
  if (heur == CUBLAS_STATUS_SUCCESS && found > 0) {
    CUBLAS_CHECK(cublasLtMatmul(ctx.lt, desc, &alpha, A, a_layout, B, b_layout, &beta, C, c_layout, C,
                                c_layout, &result.algo, ctx.workspace, ctx.workspace_bytes, stream));
  } else {
    // Fallback: classic cuBLAS accepts any leading dimension and alignment.
    CUBLAS_CHECK(cublasSetStream(ctx.blas, stream));
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, op_a, op_b, static_cast<int>(m), static_cast<int>(n),
                              static_cast<int>(k), &alpha, A, CUDA_R_16BF, static_cast<int>(lda), B,
                              CUDA_R_16BF, static_cast<int>(ldb), &beta, C, c_type,
                              static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(c_layout);
  cublasLtMatrixLayoutDestroy(b_layout);
  cublasLtMatrixLayoutDestroy(a_layout);
  cublasLtMatmulDescDestroy(desc);
}

void check_shape(const char* op, int64_t N, int64_t IC, int64_t OC) {
  const int64_t limit = int64_t(1) << 31;
  KD_CHECK(N >= 0 && IC > 0 && OC > 0 && N < limit && IC < limit && OC < limit, op,
           ": bad shape N=", N, " IC=", IC, " OC=", OC);
}
}  // namespace

BlasContext blas_create(size_t workspace_bytes) {
  BlasContext ctx;
  CUBLAS_CHECK(cublasLtCreate(&ctx.lt));
  CUBLAS_CHECK(cublasCreate(&ctx.blas));
  // Deterministic classic path: no atomics in the fallback either.
  CUBLAS_CHECK(cublasSetAtomicsMode(ctx.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
  ctx.workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&ctx.workspace, workspace_bytes));
  return ctx;
}

void blas_destroy(BlasContext& ctx) {
  if (ctx.workspace) cudaFree(ctx.workspace);
  if (ctx.blas) cublasDestroy(ctx.blas);
  if (ctx.lt) cublasLtDestroy(ctx.lt);
  ctx = BlasContext{};
}

void matmul_forward(const BlasContext& ctx, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int64_t N, int64_t IC, int64_t OC, cudaStream_t stream) {
  check_shape("matmul_forward", N, IC, OC);
  if (N == 0) return;
  // out^T(OC,N) = weight_cm(IC,OC)^T @ inp_cm(IC,N)
  gemm(ctx, true, false, OC, N, IC, weight, IC, inp, IC, out, CUDA_R_16BF, OC, 0.f, stream);
  if (bias != nullptr) {
    add_bias_kernel<<<elementwise_blocks(N * OC, kThreads), kThreads, 0, stream>>>(out, bias, N, OC);
    CUDA_CHECK_LAUNCH();
  }
}

size_t matmul_backward_scratch_bytes(int64_t N, int64_t OC, bool has_dbias) {
  return has_dbias ? column_sum_scratch_bytes(N, OC) : 0;
}

void matmul_backward(const BlasContext& ctx, bf16* dinp, float* dweight, float* dbias,
                     const bf16* dout, const bf16* inp, const bf16* weight, int64_t N, int64_t IC,
                     int64_t OC, bool accumulate_dinp, void* scratch, cudaStream_t stream) {
  check_shape("matmul_backward", N, IC, OC);
  if (N == 0) return;
  if (dinp != nullptr) {
    // dinp^T(IC,N) = weight_cm(IC,OC) @ dout_cm(OC,N)
    gemm(ctx, false, false, IC, N, OC, weight, IC, dout, OC, dinp, CUDA_R_16BF, IC,
         accumulate_dinp ? 1.f : 0.f, stream);
  }
  if (dweight != nullptr) {
    // dweight^T(IC,OC) += inp_cm(IC,N) @ dout_cm(OC,N)^T, fp32 output
    gemm(ctx, false, true, IC, OC, N, inp, IC, dout, OC, dweight, CUDA_R_32F, IC, 1.f, stream);
  }
  if (dbias != nullptr) column_sum_accumulate(dbias, dout, N, OC, scratch, stream);
}

}  // namespace kdtrain::cuda
