// cuBLASLt products for matmul.cuh with cached plans, the cublasGemmEx fallback,
// and the fallback's bias kernel.
#include <string>
#include <unordered_map>

#include "kernels/column_sum.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/matmul.cuh"
#include "kernels/matmul_plan.h"

#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    const cublasStatus_t kd_blas_status_ = (expr);                                          \
    if (kd_blas_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::kdtrain::fail("cuBLAS error ", static_cast<int>(kd_blas_status_), " (",             \
                      cublasGetStatusString(kd_blas_status_), ") in ", #expr, " at ",       \
                      __FILE__, ":", __LINE__);                                             \
  } while (0)

namespace kdtrain::cuda {

// One cached plan: the cuBLASLt objects of a key and the heuristic's algorithm, or
// `fallback` when cuBLASLt offers none (odd leading dimensions or alignments).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool fallback = false;
};

struct PlanCache {
  std::unordered_map<MatmulKey, Plan, MatmulKeyHash> plans;
  int64_t products = 0;
  ~PlanCache() {
    for (auto& [key, p] : plans) {
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    }
  }
};

namespace {
constexpr int kThreads = 256;

// out(n, o) += bias(o), fp32 add, one rounding (fallback path only): rows from the
// grid's y, columns from x, no division per element.
__global__ void add_bias_kernel(bf16* out, const bf16* bias, int64_t N, int OC) {
  row_pack_loop<1>(N, blockIdx.y, gridDim.y, OC, blockIdx.x * blockDim.x + threadIdx.x,
                   gridDim.x * blockDim.x, [&](int64_t r, int o) {
                     out[r * OC + o] = to_bf(to_f(out[r * OC + o]) + to_f(bias[o]));
                   });
}

// Builds the plan of a key: descriptors, layouts, epilogue and the heuristic's first
// algorithm for this workspace and these alignments.
Plan build_plan(const BlasContext& ctx, const MatmulKey& key, const bf16* bias) {
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (key.epilogue == MatmulEpilogue::bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
    // The pointer is set per call; one is needed here for the heuristic's checks.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const int64_t m = key.m, n = key.n, k = key.k;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, key.trans_a ? k : m, key.trans_a ? m : k, key.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, key.trans_b ? n : k, key.trans_b ? k : n, key.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, static_cast<cudaDataType_t>(key.c_type), m, n, key.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ctx.workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a, sizeof(key.align_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b, sizeof(key.align_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof(key.align_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c, sizeof(key.align_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t heur =
      cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (heur == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
  } else {
    p.fallback = true;
  }
  return p;
}

// Column-major C(m,n) = op(A) op(B) + beta C (+ bias(m) with the bias epilogue), A and
// B bf16, C bf16 or fp32 (c_type), fp32 accumulation. A is stored (k,m) when trans_a
// else (m,k); B is stored (n,k) when trans_b else (k,n). Returns false when the plan
// is the fallback and the bias (if any) is still to be added.
bool gemm(const BlasContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const bf16* A, int64_t lda, const bf16* B, int64_t ldb, void* C, cudaDataType_t c_type,
          int64_t ldc, float beta, const bf16* bias, cudaStream_t stream) {
  // In MatmulKey's field order (matmul_plan.h).
  const MatmulKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, static_cast<int>(c_type),
                      /*accumulate=*/beta != 0.f, address_alignment(A), address_alignment(B),
                      address_alignment(C), bias ? MatmulEpilogue::bias : MatmulEpilogue::none};
  auto found = ctx.plans->plans.find(key);
  if (found == ctx.plans->plans.end())
    found = ctx.plans->plans.emplace(key, build_plan(ctx, key, bias)).first;
  Plan& p = found->second;
  ++ctx.plans->products;
  const float alpha = 1.f;
  if (!p.fallback) {
    if (bias)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    CUBLAS_CHECK(cublasLtMatmul(ctx.lt, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                ctx.workspace, ctx.workspace_bytes, stream));
    return true;
  }
  // Fallback: classic cuBLAS accepts any leading dimension and alignment.
  CUBLAS_CHECK(cublasSetStream(ctx.blas, stream));
  CUBLAS_CHECK(cublasGemmEx(ctx.blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                            static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, A,
                            CUDA_R_16BF, static_cast<int>(lda), B, CUDA_R_16BF, static_cast<int>(ldb), &beta,
                            C, c_type, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return bias == nullptr;
}

void check_shape(const char* op, int64_t N, int64_t IC, int64_t OC) {
  const int64_t limit = int64_t(1) << 31;
  KD_CHECK(N >= 0 && IC > 0 && OC > 0 && N < limit && IC < limit && OC < limit, op,
           ": bad shape N=", N, " IC=", IC, " OC=", OC);
}
}  // namespace

PlanStats plan_stats(const BlasContext& ctx) {
  PlanStats s;
  if (ctx.plans) {
    s.plans = static_cast<int64_t>(ctx.plans->plans.size());
    s.products = ctx.plans->products;
  }
  return s;
}

BlasContext blas_create(size_t workspace_bytes) {
  BlasContext ctx;
  CUBLAS_CHECK(cublasLtCreate(&ctx.lt));
  CUBLAS_CHECK(cublasCreate(&ctx.blas));
  // Deterministic classic path: no atomics in the fallback either.
  CUBLAS_CHECK(cublasSetAtomicsMode(ctx.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
  ctx.workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&ctx.workspace, workspace_bytes));
  ctx.plans = new PlanCache();
  return ctx;
}

void blas_destroy(BlasContext& ctx) {
  delete ctx.plans;  // before the handle its descriptors were made with
  if (ctx.workspace) cudaFree(ctx.workspace);
  if (ctx.blas) cublasDestroy(ctx.blas);
  if (ctx.lt) cublasLtDestroy(ctx.lt);
  ctx = BlasContext{};
}

void matmul_forward(const BlasContext& ctx, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int64_t N, int64_t IC, int64_t OC, cudaStream_t stream) {
  check_shape("matmul_forward", N, IC, OC);
  if (N == 0) return;
  // out^T(OC,N) = weight_cm(IC,OC)^T @ inp_cm(IC,N) (+ bias per row of out^T)
  if (!gemm(ctx, true, false, OC, N, IC, weight, IC, inp, IC, out, CUDA_R_16BF, OC, 0.f, bias,
            stream)) {
    add_bias_kernel<<<row_pack_grid(N, OC, kThreads), kThreads, 0, stream>>>(out, bias, N,
                                                                             static_cast<int>(OC));
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
         accumulate_dinp ? 1.f : 0.f, nullptr, stream);
  }
  if (dweight != nullptr) {
    // dweight^T(IC,OC) += inp_cm(IC,N) @ dout_cm(OC,N)^T, fp32 output
    gemm(ctx, false, true, IC, OC, N, inp, IC, dout, OC, dweight, CUDA_R_32F, IC, 1.f, nullptr,
         stream);
  }
  if (dbias != nullptr) column_sum_accumulate(dbias, dout, N, OC, scratch, stream);
}

}  // namespace kdtrain::cuda
