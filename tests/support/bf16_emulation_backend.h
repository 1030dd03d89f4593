// The CPU backend with the CUDA backend's storage precision: every op runs in fp32 on
// the CPU, then each output the CUDA backend stores in bf16 (activations, activation
// gradients, dlogits, the compute copy of the weights) is rounded to bf16. Parameter
// gradients, statistics, losses and optimizer state stay fp32, as on the GPU.
//
// It is the low-precision reference of the whole-model test (FlashAttention's rule:
// the GPU's error against the fp32 CPU model must be within 2x this model's error
// plus a floor), separating rounding from a defect. What it does not model: the
// roundings inside a fused kernel (P and dS in the attention), summation orders, and
// optimizer steps (it serves single forward/backward passes).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "support/test_cuda_util.h"

namespace kdtrain::cudatest {

class Bf16EmulationBackend final : public Backend {
 public:
  Bf16EmulationBackend() : cpu_(make_backend("cpu", 0)) {}
  std::string name() const override { return "cpu-bf16-emulation"; }
  DType act_dtype() const override { return DType::f32; }

  void* alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void release(void* p) override { cpu_->release(p); }
  void zero(void* p, size_t bytes) override { cpu_->zero(p, bytes); }
  void to_host(void* h, const void* d, size_t bytes) override { cpu_->to_host(h, d, bytes); }
  void to_device(void* d, const void* h, size_t bytes) override { cpu_->to_device(d, h, bytes); }
  void copy(void* d, const void* s, size_t bytes) override { cpu_->copy(d, s, bytes); }
  void synchronize() override {}
  void convert_from_f32(void* d, const float* s, int64_t n) override {
    cpu_->convert_from_f32(d, s, n);
    round(d, n);
  }
  void convert_to_f32(float* d, const void* s, int64_t n) override { cpu_->convert_to_f32(d, s, n); }

  void embedding_forward(void* out, const int32_t* t, const void* w, int64_t N, int64_t C) override {
    cpu_->embedding_forward(out, t, w, N, C);
    round(out, N * C);
  }
  void embedding_backward(float* dw, const void* d, const int32_t* t, int64_t N, int64_t C,
                          int64_t V) override {
    cpu_->embedding_backward(dw, d, t, N, C, V);
  }
  void rmsnorm_forward(void* out, float* rstd, const void* in, const void* w, int64_t N, int64_t C,
                       float eps) override {
    cpu_->rmsnorm_forward(out, rstd, in, w, N, C, eps);
    round(out, N * C);
  }
  // As the CUDA kernel: the sum rounded to bf16 once, the norm of the rounded sum.
  void add_rmsnorm_forward(void* sum, void* out, float* rstd, const void* a, const void* b,
                           const void* w, int64_t N, int64_t C, float eps) override {
    add(sum, a, b, N * C);
    rmsnorm_forward(out, rstd, sum, w, N, C, eps);
  }
  void rmsnorm_backward(void* din, float* dw, const void* d, const void* in, const void* w,
                        const float* rstd, int64_t N, int64_t C) override {
    cpu_->rmsnorm_backward(din, dw, d, in, w, rstd, N, C);
    round(din, N * C);
  }
  void matmul_forward(void* out, const void* in, const void* w, const void* b, int64_t N, int64_t IC,
                      int64_t OC) override {
    cpu_->matmul_forward(out, in, w, b, N, IC, OC);
    round(out, N * OC);
  }
  void matmul_backward(void* din, float* dw, float* db, const void* d, const void* in, const void* w,
                       int64_t N, int64_t IC, int64_t OC, bool acc) override {
    cpu_->matmul_backward(din, dw, db, d, in, w, N, IC, OC, acc);
    round(din, N * IC);
  }
  void rope_forward(void* x, const float* c, const float* s, int64_t B, int64_t T, int64_t heads,
                    int64_t n_rot, int64_t D) override {
    cpu_->rope_forward(x, c, s, B, T, heads, n_rot, D);
    round(x, B * T * heads * D);
  }
  void rope_backward(void* x, const float* c, const float* s, int64_t B, int64_t T, int64_t heads,
                     int64_t n_rot, int64_t D) override {
    cpu_->rope_backward(x, c, s, B, T, heads, n_rot, D);
    round(x, B * T * heads * D);
  }
  void attention_forward(const AttentionForwardArgs& a) override {
    cpu_->attention_forward(a);
    round(a.out, a.shape.B * a.shape.T * a.shape.H * a.shape.D);
  }
  void attention_backward(const AttentionBackwardArgs& a) override {
    cpu_->attention_backward(a);
    const AttentionShape& s = a.shape;
    round(a.dqkv, s.B * s.T * (s.H + 2 * s.Hkv) * s.D);
    if (a.features.affine) round(a.dalpha, s.B * s.T * s.H);
  }
  void alpha_activation_forward(void* alpha, const void* z, int64_t n, AlphaActivation act) override {
    cpu_->alpha_activation_forward(alpha, z, n, act);
    round(alpha, n);
  }
  void alpha_activation_backward(void* dz, const void* da, const void* z, int64_t n,
                                 AlphaActivation act) override {
    cpu_->alpha_activation_backward(dz, da, z, n, act);
    round(dz, n);
  }
  void column_sum_accumulate(float* sums, const void* x, int64_t N, int64_t H) override {
    cpu_->column_sum_accumulate(sums, x, N, H);
  }
  void sigmoid_gate_forward(void* out, const void* in, const void* g, int64_t n) override {
    cpu_->sigmoid_gate_forward(out, in, g, n);
    round(out, n);
  }
  void sigmoid_gate_backward(void* din, void* dg, const void* d, const void* in, const void* g,
                             int64_t n) override {
    cpu_->sigmoid_gate_backward(din, dg, d, in, g, n);
    round(din, n);
    round(dg, n);
  }
  void swiglu_forward(void* out, const void* gu, int64_t N, int64_t F) override {
    cpu_->swiglu_forward(out, gu, N, F);
    round(out, N * F);
  }
  void swiglu_backward(void* dgu, const void* d, const void* gu, int64_t N, int64_t F) override {
    cpu_->swiglu_backward(dgu, d, gu, N, F);
    round(dgu, 2 * N * F);
  }
  void add(void* out, const void* a, const void* b, int64_t n) override {
    cpu_->add(out, a, b, n);
    round(out, n);
  }
  void accumulate(void* dst, const void* src, int64_t n) override {
    cpu_->accumulate(dst, src, n);
    round(dst, n);
  }
  void loss_chunk(const LossChunkArgs& a) override {
    cpu_->loss_chunk(a);
    if (a.compute_grad) round(a.logits, a.n * a.V);
  }
  void topk_log_probs(const TopkArgs& a) override { cpu_->topk_log_probs(a); }
  void sparse_kd_loss_chunk(const SparseKdChunkArgs& a) override {
    cpu_->sparse_kd_loss_chunk(a);
    if (a.compute_grad) round(a.logits, a.n * a.V);
  }
  double sum_squares(const float* x, int64_t n) override { return cpu_->sum_squares(x, n); }
  // Not emulated: on the CPU the compute copy may be the master itself, so the
  // emulation covers forward and backward passes, not optimizer steps.
  void adamw_update(const AdamWArgs& a) override { cpu_->adamw_update(a); }
  std::vector<AttentionPathUse> attention_paths() const override { return cpu_->attention_paths(); }
  MemoryStats memory_stats() const override { return cpu_->memory_stats(); }

 private:
  static void round(void* p, int64_t n) {
    float* f = static_cast<float*>(p);
    if (f == nullptr) return;
    for (int64_t i = 0; i < n; ++i) f[i] = round_bf16(f[i]);
  }
  std::unique_ptr<Backend> cpu_;
};

}  // namespace kdtrain::cudatest
