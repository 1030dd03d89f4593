// Linear layer: out = inp W^T + b and its backward, through BLAS.
//
// Numerics: cblas_sgemm (float) / cblas_dgemm (double), row-major, with OpenBLAS
// itself single-threaded (its own threads spin against OpenMP's: 4x slower on
// 2 cores). We split the rows of every product into fixed blocks of
// kRowBlock, one single-threaded gemm per block under OpenMP: the reduction
// dimension is never split and the partition does not depend on the thread
// count, so each output is summed in one fixed order whatever the threads. The bias gradient is a column sum of dout over rows,
// in row order per column (threads own column blocks).
#include <cblas.h>

#include <algorithm>
#include <type_traits>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_parallel.h"

namespace kdtrain::cpu {

namespace {

constexpr int64_t kRowBlock = 64;

}  // namespace

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb),
                beta, C, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb),
                beta, C, static_cast<int>(ldc));
  }
}

template void gemm_serial<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t);
template void gemm_serial<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                  int64_t, const double*, int64_t, double, double*, int64_t);

namespace {

// gemm_serial over fixed row blocks of C, in parallel.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t blocks = (M + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t m0 = blk * kRowBlock, rows = std::min(kRowBlock, M - m0);
    // Rows m0.. of op(A): row offset in A, or column offset when A is transposed.
    const T* a = trans_a ? A + m0 : A + m0 * lda;
    gemm_serial<T>(trans_a, trans_b, rows, N, K, alpha, a, lda, B, ldb, beta, C + m0 * ldc, ldc);
  }
}

}  // namespace

void set_blas_single_threaded() { openblas_set_num_threads(1); }

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC,
                    int64_t OC) {
  if (N == 0 || OC == 0) return;
  if (IC == 0) {
    std::fill(out, out + N * OC, T(0));
  } else {
    gemm<T>(false, true, N, OC, IC, T(1), inp, IC, weight, IC, T(0), out, OC);
  }
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      T* o = out + n * OC;
      for (int64_t c = 0; c < OC; ++c) o[c] += bias[c];
    }
  }
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t IC, int64_t OC, bool accumulate_dinp) {
  if (N == 0) return;
  if (dinp != nullptr && IC > 0) {
    if (OC == 0) {
      if (!accumulate_dinp) std::fill(dinp, dinp + N * IC, T(0));
    } else {
      gemm<T>(false, false, N, IC, OC, T(1), dout, OC, weight, IC,
              accumulate_dinp ? T(1) : T(0), dinp, IC);
    }
  }
  if (dweight != nullptr && OC > 0 && IC > 0) {
    gemm<T>(true, false, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);
  }
  if (dbias != nullptr) {
    for_column_blocks(OC, [&](int64_t c0, int64_t c1) {
      for (int64_t n = 0; n < N; ++n) {
        const T* d = dout + n * OC;
        for (int64_t c = c0; c < c1; ++c) dbias[c] += d[c];
      }
    });
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                    int64_t, int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*,
                                     int64_t, int64_t, int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t, bool);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t, bool);

}  // namespace kdtrain::cpu
