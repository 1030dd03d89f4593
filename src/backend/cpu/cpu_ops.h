// The CPU reference ops as free function templates over the scalar type T.
//
// CpuBackend calls the float instantiations; the double instantiations exist so
// tests can check gradients by finite differences to ~1e-8 and so other backends
// can be compared against a float64 truth. Every function is instantiated for
// float and double in the .cpp file of its op group.
//
// Conventions follow src/backend/backend.h (as llm.c): N = B*T tokens, row-major,
// last dimension contiguous; parameter gradients accumulate (+=); activation
// gradients are written (=) unless stated. All ops are deterministic and give the
// same bits for any OpenMP thread count: parallel loops only split independent
// outputs, and every reduction runs in a fixed order.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "config/config.h"

namespace kdtrain::cpu {

// ---- embedding (cpu_embedding.cpp) ----
template <typename T>
void embedding_forward(T* out,                 // (N, C)
                       const int32_t* tokens,  // (N)
                       const T* wte,           // (V, C)
                       int64_t N, int64_t C);
// dwte[tokens[n]] += dout[n]; threads own column blocks, rows summed in token order.
template <typename T>
void embedding_backward(T* dwte,                // (V, C), accumulated
                        const T* dout,          // (N, C)
                        const int32_t* tokens,  // (N)
                        int64_t N, int64_t C, int64_t V);

// ---- RMSNorm (cpu_rmsnorm.cpp) ----
template <typename T>
void rmsnorm_forward(T* out,           // (N, C)
                     T* rstd,          // (N)
                     const T* inp,     // (N, C)
                     const T* weight,  // (C)
                     int64_t N, int64_t C, T eps);
// sum_out = a + b, then rmsnorm_forward(out, rstd, sum_out): the residual add
// fused with the next norm. sum_out may alias a or b.
template <typename T>
void add_rmsnorm_forward(T* sum_out,      // (N, C)
                         T* out,          // (N, C)
                         T* rstd,         // (N)
                         const T* a,      // (N, C)
                         const T* b,      // (N, C)
                         const T* weight, // (C)
                         int64_t N, int64_t C, T eps);
template <typename T>
void rmsnorm_backward(T* dinp,          // (N, C), accumulated
                      T* dweight,       // (C), accumulated
                      const T* dout,    // (N, C)
                      const T* inp,     // (N, C)
                      const T* weight,  // (C)
                      const T* rstd,    // (N)
                      int64_t N, int64_t C);

// ---- matmul (cpu_matmul.cpp, BLAS) ----
// OpenBLAS must not start its own threads: the ops parallelise with OpenMP.
void set_blas_single_threaded();
// C(M,N) = alpha op(A) op(B) + beta C on the calling thread; row-major, leading
// dimensions as stored (so strided views of packed buffers need no copies).
template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

template <typename T>
void matmul_forward(T* out,           // (N, OC)
                    const T* inp,     // (N, IC)
                    const T* weight,  // (OC, IC)
                    const T* bias,    // (OC) or nullptr
                    int64_t N, int64_t IC, int64_t OC);
template <typename T>
void matmul_backward(T* dinp,          // (N, IC), written or accumulated; may be null
                     T* dweight,       // (OC, IC), accumulated; may be null
                     T* dbias,         // (OC), accumulated; may be null
                     const T* dout,    // (N, OC)
                     const T* inp,     // (N, IC)
                     const T* weight,  // (OC, IC)
                     int64_t N, int64_t IC, int64_t OC, bool accumulate_dinp);

// ---- RoPE (cpu_rope.cpp), in place, HF rotate_half convention ----
template <typename T>
void rope_forward(T* x,             // (B, T, n_heads, D)
                  const T* cos,     // (T, D/2)
                  const T* sin,     // (T, D/2)
                  int64_t B, int64_t Tlen, int64_t n_heads, int64_t n_rot, int64_t D);
template <typename T>
void rope_backward(T* dx,           // (B, T, n_heads, D)
                   const T* cos,    // (T, D/2)
                   const T* sin,    // (T, D/2)
                   int64_t B, int64_t Tlen, int64_t n_heads, int64_t n_rot, int64_t D);

// ---- attention core (cpu_attention.cpp), every variant, causal, GQA ----
template <typename T>
void attention_forward(T* out,             // (B, T, H, D)
                       T* lse,             // (B, H, T)
                       const T* qkv,       // (B, T, H + 2*Hkv, D)
                       const T* sinks,     // (H)        [sink]
                       const T* alpha,     // (B, T, H)  [affine]
                       const T* alpha_ma,  // (H)        [affine]
                       AttentionShape dims, T scale, AttentionFeatures features);
template <typename T>
void attention_backward(T* dqkv,            // (B, T, H + 2*Hkv, D), written
                        T* dsinks,          // (H), accumulated     [sink]
                        T* dalpha,          // (B, T, H), written   [affine]
                        const T* dout,      // (B, T, H, D)
                        const T* qkv,       // (B, T, H + 2*Hkv, D)
                        const T* lse,       // (B, H, T)
                        const T* sinks,     // (H)        [sink]
                        const T* alpha,     // (B, T, H)  [affine]
                        const T* alpha_ma,  // (H)        [affine]
                        AttentionShape dims, T scale, AttentionFeatures features);

// ---- elementwise ops and small reductions (cpu_activations.cpp) ----
template <typename T>
void alpha_activation_forward(T* alpha, const T* z, int64_t n, AlphaActivation act);  // (n)
template <typename T>
void alpha_activation_backward(T* dz,            // (n), written
                               const T* dalpha,  // (n)
                               const T* z,       // (n)
                               int64_t n, AlphaActivation act);
// sums(H) += column sums of x(N, H), rows added in order.
template <typename T>
void column_sum_accumulate(T* sums, const T* x, int64_t N, int64_t H);
template <typename T>
void sigmoid_gate_forward(T* out, const T* inp, const T* gate, int64_t n);  // all (n)
template <typename T>
void sigmoid_gate_backward(T* dinp, T* dgate,  // (n), written
                           const T* dout, const T* inp, const T* gate, int64_t n);
template <typename T>
void swiglu_forward(T* out,            // (N, F)
                    const T* gate_up,  // (N, 2F): [gate | up]
                    int64_t N, int64_t F);
template <typename T>
void swiglu_backward(T* dgate_up,        // (N, 2F), written
                     const T* dout,      // (N, F)
                     const T* gate_up,   // (N, 2F)
                     int64_t N, int64_t F);
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);  // out may alias a or b
template <typename T>
void accumulate(T* dst, const T* src, int64_t n);

// ---- fused classifier loss on a chunk (cpu_loss.cpp) ----
// Per row: ce = logsumexp(s) - s[target]; kd = tau^2-scaled KD against the teacher
// (0 without teacher); soft_ce (when non-null) = -tau^2 sum p_T log p_S, the teacher
// soft cross-entropy whatever kd_loss is (0 without teacher). When compute_grad, logits are overwritten with
// grad_scale * (w*dKD + (1-w)*dCE), w = kd_weight (0 without teacher).
// A negative target masks the CE term of that row (ce = 0, no CE gradient).
template <typename T>
void loss_chunk(T* logits,                // (n, V) in: student logits, out: dlogits
                const T* teacher_logits,  // (n, V) or nullptr
                const int32_t* targets,   // (n)
                T* ce,                    // (n), written
                T* kd,                    // (n), written
                int64_t n, int64_t V, KdLoss kd_loss, T temperature, T kd_weight,
                T grad_scale, bool compute_grad,
                T* soft_ce = nullptr);    // (n) or nullptr, written

// ---- the cached sparse teacher (cpu_sparse_kd.cpp) ----
// sparse_kd_loss_chunk of backend.h: the values and gradient loss_chunk computes
// against the dense teacher of dense_cached_teacher, in O(V + K) per row.
template <typename T>
void sparse_kd_loss_chunk(T* logits, const int32_t* targets, const int32_t* ids, const float* logp,
                          const float* log_tail, T* ce, T* kd, T* soft_ce, int64_t n, int64_t V,
                          int64_t K, CacheTail tail, KdLoss kd_loss, T temperature, T kd_weight,
                          T grad_scale, bool compute_grad);

// ---- the teacher cache's top K (cpu_topk.cpp) ----
// topk_log_probs of backend.h: per row the top K ids (ties: lower id), their
// log-probabilities at temperature 1 and the log of the remaining mass.
template <typename T>
void topk_log_probs(const T* logits, int64_t n, int64_t V, int64_t K, int32_t* ids, float* logp,
                    float* log_tail);

// ---- optimizer (cpu_optim.cpp) ----
// Sum of x^2 in double, in fixed blocks added in order: identical for any thread count.
template <typename T>
double sum_squares(const T* x, int64_t n);
// Decoupled AdamW, bias-corrected; writes master, m, v and, unless it aliases master
// or is null, the compute copy.
template <typename T>
void adamw_update(T* master,      // (n)
                  T* compute,     // (n) or nullptr
                  const T* grad,  // (n)
                  T* m, T* v,     // (n)
                  int64_t n, T lr, T beta1, T beta2, T eps, T weight_decay, T grad_scale,
                  int64_t step);

}  // namespace kdtrain::cpu
