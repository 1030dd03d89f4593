// The fused classifier against a cached sparse teacher (top-K ids, their
// log-probabilities and the log of the remaining mass per row): the CUDA form of
// sparse_kd_loss_chunk (src/backend/backend.h), whose reference and maths are in
// src/backend/cpu/cpu_sparse_kd.cpp. The teacher is never expanded to (n, V).
//
// Numerics: one block per row. The row's K ids are marked in a bitmask in
// shared memory (V/8 bytes: 16 KiB at V = 128256), so the tail's softmax mass
// is summed over the tail ids themselves. Pass 1 reads the bf16 logits once
// with an online (max, sum) for s, s/tau (tau != 1) and s/tau over the tail
// (plus the tail's sum of exp * s/tau); the K ids' terms are then summed by
// fixed block trees; pass 2 writes the tail's gradient (the K ids' slots are
// written back unchanged), and a last step writes the K ids' gradient. Every
// element is owned by one thread and every sum is a fixed tree: deterministic.
// Everything but the logits is fp32. Ids outside [0, V) or repeated in a row,
// and targets >= V, are the caller's to refuse on the host (the CPU reference
// throws); here they are skipped.
#pragma once
#include "kernels/cuda_common.cuh"
#include "kernels/loss.cuh"

namespace kdtrain::cuda {

struct SparseKdParams {
  int64_t n = 0, V = 0, K = 0;
  bf16* logits = nullptr;            // (n, V) student logits in, dlogits out (if compute_grad)
  const int32_t* targets = nullptr;  // (n)
  const int32_t* ids = nullptr;      // (n, K)
  const float* logp = nullptr;       // (n, K)
  const float* log_tail = nullptr;   // (n), read in bucket mode
  bool bucket = false;               // kd.cache_tail=bucket (else renormalize)
  float* ce = nullptr;               // (n), written
  float* kd = nullptr;               // (n), written
  float* soft_ce = nullptr;          // (n) or null, written
  KdKind kind = KdKind::forward_kl;
  float temperature = 1.f;
  float kd_weight = 0.f;
  float grad_scale = 1.f;
  bool compute_grad = true;
};

// The largest vocabulary whose id bitmask fits the default 48 KiB of shared memory.
constexpr int64_t kSparseKdMaxVocab = int64_t(48) * 1024 * 8 - 32 * 32;

void sparse_kd_loss_chunk(const SparseKdParams& p, cudaStream_t stream);

}  // namespace kdtrain::cuda
