// CpuBackend: the fp32 reference implementation of the Backend interface.
//
// Numerics: act_dtype() is f32, so activations, the compute copy of the weights and
// every statistic are plain float arrays and each method forwards to the float
// instantiation of the op in cpu_ops.h. Memory is host memory, 256-byte aligned and
// zeroed; to_host/to_device/copy are memcpy and the dtype conversions are copies.
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/backend_stats.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "core/error.h"

namespace kdtrain {

namespace {

constexpr size_t kAlignment = 256;

float* F(void* p) { return static_cast<float*>(p); }
const float* F(const void* p) { return static_cast<const float*>(p); }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int64_t threads) {
    if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
    cpu::set_blas_single_threaded();
  }

  std::string name() const override { return "cpu"; }
  DType act_dtype() const override { return DType::f32; }

  void* alloc(size_t bytes) override {
    const size_t rounded = ((bytes + kAlignment - 1) / kAlignment) * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    KD_CHECK(p != nullptr, "cpu backend: out of memory allocating ", bytes, " bytes");
    ++counters_.allocs;
    std::memset(p, 0, rounded == 0 ? kAlignment : rounded);
    memory_.on_alloc(p, rounded == 0 ? kAlignment : rounded);
    return p;
  }
  void release(void* ptr) override {
    memory_.on_release(ptr);
    std::free(ptr);
  }
  void zero(void* ptr, size_t bytes) override {
    if (bytes > 0) std::memset(ptr, 0, bytes);
  }
  void to_host(void* host, const void* device, size_t bytes) override {
    ++counters_.to_host_calls;
    counters_.to_host_bytes += static_cast<int64_t>(bytes);
    if (bytes > 0) std::memcpy(host, device, bytes);
  }
  void to_device(void* device, const void* host, size_t bytes) override {
    ++counters_.to_device_calls;
    counters_.to_device_bytes += static_cast<int64_t>(bytes);
    if (bytes > 0) std::memcpy(device, host, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void synchronize() override {}
  void convert_from_f32(void* dst, const float* src, int64_t n) override {
    copy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
  void convert_to_f32(float* dst, const void* src, int64_t n) override {
    copy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }

  void embedding_forward(void* out, const int32_t* tokens, const void* wte, int64_t N,
                         int64_t C) override {
    op_checks::embedding_forward(out, tokens, wte, N, C);
    cpu::embedding_forward(F(out), tokens, F(wte), N, C);
  }
  void embedding_backward(float* dwte, const void* dout, const int32_t* tokens, int64_t N,
                          int64_t C, int64_t V) override {
    op_checks::embedding_backward(dwte, dout, tokens, N, C, V);
    cpu::embedding_backward(dwte, F(dout), tokens, N, C, V);
  }

  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int64_t N,
                       int64_t C, float eps) override {
    op_checks::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    cpu::rmsnorm_forward(F(out), rstd, F(inp), F(weight), N, C, eps);
  }
  void add_rmsnorm_forward(void* sum_out, void* out, float* rstd, const void* a, const void* b,
                           const void* weight, int64_t N, int64_t C, float eps) override {
    op_checks::add_rmsnorm_forward(sum_out, out, rstd, a, b, weight, N, C, eps);
    cpu::add_rmsnorm_forward(F(sum_out), F(out), rstd, F(a), F(b), F(weight), N, C, eps);
  }
  void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int64_t N, int64_t C) override {
    op_checks::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    cpu::rmsnorm_backward(F(dinp), dweight, F(dout), F(inp), F(weight), rstd, N, C);
  }

  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                      int64_t N, int64_t IC, int64_t OC) override {
    op_checks::matmul_forward(out, inp, weight, N, IC, OC);
    cpu::matmul_forward(F(out), F(inp), F(weight), F(bias), N, IC, OC);
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, int64_t N, int64_t IC, int64_t OC,
                       bool accumulate_dinp) override {
    op_checks::matmul_backward(dout, inp, weight, N, IC, OC);
    cpu::matmul_backward(F(dinp), dweight, dbias, F(dout), F(inp), F(weight), N, IC, OC,
                         accumulate_dinp);
  }

  void rope_forward(void* x, const float* cos, const float* sin, int64_t B, int64_t T,
                    int64_t n_heads, int64_t n_rot, int64_t D) override {
    op_checks::rope("rope_forward", x, cos, sin, B, T, n_heads, n_rot, D);
    cpu::rope_forward(F(x), cos, sin, B, T, n_heads, n_rot, D);
  }
  void rope_backward(void* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                     int64_t n_heads, int64_t n_rot, int64_t D) override {
    op_checks::rope("rope_backward", dx, cos, sin, B, T, n_heads, n_rot, D);
    cpu::rope_backward(F(dx), cos, sin, B, T, n_heads, n_rot, D);
  }

  void attention_forward(const AttentionForwardArgs& a) override {
    op_checks::attention_forward(a);
    cpu::attention_forward(F(a.out), a.lse, F(a.qkv), a.sinks, F(a.alpha), a.alpha_ma,
                           a.shape, a.scale, a.features);
    paths_.record(a.shape, a.features, false, kAttentionPath, "");
  }
  void attention_backward(const AttentionBackwardArgs& a) override {
    op_checks::attention_backward(a);
    cpu::attention_backward(F(a.dqkv), a.dsinks, F(a.dalpha), F(a.dout), F(a.qkv), a.lse,
                            a.sinks, F(a.alpha), a.alpha_ma, a.shape, a.scale,
                            a.features);
    paths_.record(a.shape, a.features, true, kAttentionPath, "");
  }

  void alpha_activation_forward(void* alpha, const void* z, int64_t n,
                                AlphaActivation act) override {
    op_checks::elementwise("alpha_activation_forward", n, {alpha, z});
    cpu::alpha_activation_forward(F(alpha), F(z), n, act);
  }
  void alpha_activation_backward(void* dz, const void* dalpha, const void* z, int64_t n,
                                 AlphaActivation act) override {
    op_checks::elementwise("alpha_activation_backward", n, {dz, dalpha, z});
    cpu::alpha_activation_backward(F(dz), F(dalpha), F(z), n, act);
  }
  void column_sum_accumulate(float* sums, const void* x, int64_t N, int64_t H) override {
    op_checks::column_sum(sums, x, N, H);
    cpu::column_sum_accumulate(sums, F(x), N, H);
  }

  void sigmoid_gate_forward(void* out, const void* inp, const void* gate, int64_t n) override {
    op_checks::elementwise("sigmoid_gate_forward", n, {out, inp, gate});
    cpu::sigmoid_gate_forward(F(out), F(inp), F(gate), n);
  }
  void sigmoid_gate_backward(void* dinp, void* dgate, const void* dout, const void* inp,
                             const void* gate, int64_t n) override {
    op_checks::elementwise("sigmoid_gate_backward", n, {dinp, dgate, dout, inp, gate});
    cpu::sigmoid_gate_backward(F(dinp), F(dgate), F(dout), F(inp), F(gate), n);
  }

  void swiglu_forward(void* out, const void* gate_up, int64_t N, int64_t F_) override {
    op_checks::swiglu("swiglu_forward", N, F_, {out, gate_up});
    cpu::swiglu_forward(F(out), F(gate_up), N, F_);
  }
  void swiglu_backward(void* dgate_up, const void* dout, const void* gate_up, int64_t N,
                       int64_t F_) override {
    op_checks::swiglu("swiglu_backward", N, F_, {dgate_up, dout, gate_up});
    cpu::swiglu_backward(F(dgate_up), F(dout), F(gate_up), N, F_);
  }

  void add(void* out, const void* a, const void* b, int64_t n) override {
    op_checks::elementwise("add", n, {out, a, b});
    cpu::add(F(out), F(a), F(b), n);
  }
  void accumulate(void* dst, const void* src, int64_t n) override {
    op_checks::elementwise("accumulate", n, {dst, src});
    cpu::accumulate(F(dst), F(src), n);
  }

  void loss_chunk(const LossChunkArgs& a) override {
    op_checks::loss_chunk(a);
    cpu::loss_chunk(F(a.logits), F(a.teacher_logits), a.targets, a.ce, a.kd, a.n, a.V,
                    a.kd_loss, a.temperature, a.kd_weight, a.grad_scale, a.compute_grad, a.soft_ce);
  }

  void sparse_kd_loss_chunk(const SparseKdChunkArgs& a) override {
    op_checks::sparse_kd_loss_chunk(a);
    cpu::sparse_kd_loss_chunk(F(a.logits), a.targets, a.ids, a.logp, a.log_tail, a.ce, a.kd,
                              a.soft_ce, a.n, a.V, a.K, a.tail, a.kd_loss, a.temperature,
                              a.kd_weight, a.grad_scale, a.compute_grad);
  }

  void topk_log_probs(const TopkArgs& a) override {
    op_checks::topk_log_probs(a);
    cpu::topk_log_probs(F(a.logits), a.n, a.V, a.K, a.ids, a.logp, a.log_tail);
  }

  double sum_squares(const float* x, int64_t n) override {
    op_checks::sum_squares(x, n);
    return cpu::sum_squares(x, n);
  }
  void adamw_update(const AdamWArgs& a) override {
    op_checks::adamw(a);
    if (a.segments == nullptr) {
      cpu::adamw_update(a.master, F(a.compute), a.grad, a.m, a.v, a.n, a.lr, a.beta1, a.beta2,
                        a.eps, a.weight_decay, a.grad_scale, a.step);
      return;
    }
    for (int64_t i = 0; i < a.num_segments; ++i) {
      const int64_t b = a.segments[i].begin;
      float* compute = a.compute ? F(a.compute) + b : nullptr;
      cpu::adamw_update(a.master + b, compute, a.grad + b, a.m + b, a.v + b,
                        a.segments[i].end - b, a.lr, a.beta1, a.beta2, a.eps,
                        a.segments[i].weight_decay, a.grad_scale, a.step);
    }
  }

  std::vector<AttentionPathUse> attention_paths() const override { return paths_.uses(); }
  // Host memory: peak_bytes counts this backend's allocations (the process's peak
  // RSS is `kdtrain bench`'s other figure); there is no device.
  MemoryStats memory_stats() const override {
    MemoryStats m;
    m.current_bytes = memory_.current_bytes();
    m.peak_bytes = memory_.peak_bytes();
    return m;
  }

 private:
  // The unfused fp32 reference (cpu_attention.cpp); the blocked mirror of the
  // fused kernels (flash_mirror_*.cpp) is a test oracle, not a path.
  static constexpr const char* kAttentionPath = "cpu-reference";
  MemoryTracker memory_;
  AttentionPathLog paths_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int64_t threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace kdtrain
