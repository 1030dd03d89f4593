// CudaBackend: the Backend interface (src/backend/backend.h) on one CUDA device.
//
// Numerics: act_dtype() is bf16: activations and the compute copy of the weights
// are bf16; statistics (rstd, lse), losses, sinks, alpha_ma, parameter gradients
// and optimizer state are fp32. Each method first runs the op's shared argument
// check (src/backend/op_checks.h, the same the CPU backend runs), then forwards
// to one launcher in kernels/<op>.cuh on the backend's stream.
//
// State (no globals): the stream, the cuBLASLt/cuBLAS handles with their
// workspace, one growable scratch buffer shared by the ops that need temporary
// memory (only ever used within one call, in stream order: the attention
// workspaces live there), the device copy of the embedding gradient's token
// buckets, and the reports' bookkeeping (every cudaMalloc goes through
// device_malloc, so memory_stats() sees all of it; attention_paths()).
//
// Synchronisation: every op is asynchronous on the stream except to_host,
// sum_squares (both return host values), release, synchronize, scratch growth and
// to_device of more than kStagingHalfBytes; smaller to_device calls are staged
// through pinned memory and return at once. counters() counts the waits.
#pragma once
#include <memory>

#include "backend/cuda/attention_entry.cuh"
#include "backend/backend.h"
#include "backend/backend_stats.h"
#include "kernels/embedding.cuh"
#include "kernels/matmul.cuh"
#include "kernels/optim.cuh"

namespace kdtrain {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(AttentionForward attention_forward = AttentionForward::auto_select,
                       AttentionBackward attention_backward = AttentionBackward::auto_select);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  DType act_dtype() const override { return DType::bf16; }
  cudaStream_t stream() const { return stream_; }
  void* native_stream() const override { return stream_; }
  // Stochastic rounding of the bf16 compute copy in adamw_update (off by default).
  void set_stochastic_rounding(bool on, uint32_t seed) {
    stochastic_rounding_ = on;
    sr_seed_ = seed;
  }

  void* alloc(size_t bytes) override;
  void release(void* ptr) override;
  void zero(void* ptr, size_t bytes) override;
  void to_host(void* host, const void* device, size_t bytes) override;
  void to_device(void* device, const void* host, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  int64_t free_device_bytes() override;
  void convert_from_f32(void* dst, const float* src, int64_t n) override;
  void convert_to_f32(float* dst, const void* src, int64_t n) override;

  void embedding_forward(void* out, const int32_t* tokens, const void* wte, int64_t N,
                         int64_t C) override;
  void embedding_backward(float* dwte, const void* dout, const int32_t* tokens, int64_t N,
                          int64_t C, int64_t V) override;
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int64_t N,
                       int64_t C, float eps) override;
  void add_rmsnorm_forward(void* sum_out, void* out, float* rstd, const void* a, const void* b,
                           const void* weight, int64_t N, int64_t C, float eps) override;
  void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int64_t N, int64_t C) override;
  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                      int64_t N, int64_t IC, int64_t OC) override;
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, int64_t N, int64_t IC, int64_t OC,
                       bool accumulate_dinp) override;
  void rope_forward(void* x, const float* cos, const float* sin, int64_t B, int64_t T,
                    int64_t n_heads, int64_t n_rot, int64_t D) override;
  void rope_backward(void* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                     int64_t n_heads, int64_t n_rot, int64_t D) override;
  void attention_forward(const AttentionForwardArgs& args) override;
  void attention_backward(const AttentionBackwardArgs& args) override;
  void alpha_activation_forward(void* alpha, const void* z, int64_t n,
                                AlphaActivation act) override;
  void alpha_activation_backward(void* dz, const void* dalpha, const void* z, int64_t n,
                                 AlphaActivation act) override;
  void column_sum_accumulate(float* sums, const void* x, int64_t N, int64_t H) override;
  void sigmoid_gate_forward(void* out, const void* inp, const void* gate, int64_t n) override;
  void sigmoid_gate_backward(void* dinp, void* dgate, const void* dout, const void* inp,
                             const void* gate, int64_t n) override;
  void swiglu_forward(void* out, const void* gate_up, int64_t N, int64_t F) override;
  void swiglu_backward(void* dgate_up, const void* dout, const void* gate_up, int64_t N,
                       int64_t F) override;
  void add(void* out, const void* a, const void* b, int64_t n) override;
  void accumulate(void* dst, const void* src, int64_t n) override;
  void loss_chunk(const LossChunkArgs& args) override;
  void sparse_kd_loss_chunk(const SparseKdChunkArgs& args) override;
  void topk_log_probs(const TopkArgs& args) override;
  double sum_squares(const float* x, int64_t n) override;
  void adamw_update(const AdamWArgs& args) override;

  std::vector<AttentionPathUse> attention_paths() const override { return paths_.uses(); }
  MemoryStats memory_stats() const override;

 private:
  static constexpr size_t kStagingHalfBytes = size_t(8) << 20;
  void* scratch(size_t bytes);  // at least `bytes` of device memory, contents undefined
  // cudaMalloc / cudaFree with the memory bookkeeping (backend_stats.h).
  void* device_malloc(size_t bytes);
  void device_free(void* ptr);
  void sample_device_memory();  // device_used_peak_ from cudaMemGetInfo
  void run_attention(const flash::AttentionParams& p, cuda::AttentionPass pass,
                     const AttentionShape& shape, AttentionFeatures features);
  void wait_for_stream();       // the host waits for the stream (counted)

  cudaStream_t stream_ = nullptr;
  cuda::BlasContext blas_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  int32_t* buckets_ = nullptr;  // device copy of ids | offsets | positions
  size_t buckets_capacity_ = 0; // in int32 elements
  char* staging_ = nullptr;     // pinned, 2 x kStagingHalfBytes (to_device)
  size_t staging_used_ = 0;     // bytes used in the current half
  int staging_side_ = 0;
  cudaEvent_t staging_done_[2] = {nullptr, nullptr};  // last copy issued from each half
  cuda::AdamWSegment* segments_ = nullptr;  // device copy of the multi-tensor AdamW table
  size_t segments_capacity_ = 0;
  std::vector<cuda::AdamWSegment> segments_host_;
  bool stochastic_rounding_ = false;
  uint32_t sr_seed_ = 0;
  MemoryTracker memory_;
  int64_t device_used_peak_ = 0, device_total_ = 0;  // cudaMemGetInfo samples
  AttentionPathLog paths_;
  cuda::FlashKernels kernels_;  // train.attention_forward / attention_backward, resolved once
};

std::unique_ptr<Backend> make_cuda_backend(AttentionForward attention_forward, AttentionBackward attention_backward);

}  // namespace kdtrain
