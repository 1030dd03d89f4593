// The backend interface: every op the model definition (src/model/model.cpp) calls.
// The CPU reference (src/backend/cpu/) implements it in fp32; the CUDA backend
// (src/backend/cuda/, launching kernels/) implements the same signatures with bf16 activations and parameters.
//
// Conventions (as llm.c):
// - N = B*T tokens, row-major, last dimension contiguous. Shapes are in comments.
// - Activations (`void*`) are in act_dtype(); parameters passed to ops (`const void*`
//   weights) are the compute copy in act_dtype(); statistics (rstd, lse), losses,
//   sinks, alpha_ma, gradients of parameters and optimizer state are always fp32.
// - Parameter gradients accumulate (+=) so micro-batches add up; activation
//   gradients are written (=) unless the argument says otherwise.
// - Token ids and targets are int32 in backend memory (except embedding_backward's,
//   in host memory).
// - Every op is deterministic: the same inputs give the same bits run after run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"

namespace kdtrain {

enum class DType { f32, bf16 };
inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

struct AttentionShape {
  int64_t B = 0, T = 0;
  int64_t H = 0;    // query heads
  int64_t Hkv = 0;  // key/value heads, divides H; query head h reads kv head h / (H/Hkv)
  int64_t D = 0;    // head dim
};

// Causal attention core for every variant (docs/model.md), which enters as the
// features it switches on (config/attention_variant.h: sink, affine and its
// bias divisor), never as its name. The gate is a separate op: the attention
// reads `sink`, `affine` and `bias_divisor` only.
struct AttentionForwardArgs {
  AttentionShape shape;
  AttentionFeatures features;  // features_of(model's AttentionConfig)
  float scale = 0.f;        // 1/sqrt(D)
  const void* qkv = nullptr;      // (B, T, H + 2*Hkv, D): q heads, k heads, v heads, RoPE applied
  const float* sinks = nullptr;   // (H) sink logits s_h                       [sink]
  const void* alpha = nullptr;    // (B, T, H) activated alpha                 [affine]
  const float* alpha_ma = nullptr;// (H) running mean of alpha                 [affine]
  void* out = nullptr;            // (B, T, H, D): P V, or alpha*PV + beta*sum_{j<=i} V_j,
                                  // beta = (alpha_ma - alpha)/N, N = T, bias_keys or i + 1 (affine_bias_count)
  float* lse = nullptr;           // (B, H, T) log of the softmax denominator, sink included
};

struct AttentionBackwardArgs {
  AttentionShape shape;
  AttentionFeatures features;
  float scale = 0.f;
  const void* qkv = nullptr;      // as forward
  const float* sinks = nullptr;
  const void* alpha = nullptr;
  const float* alpha_ma = nullptr;
  const void* out = nullptr;      // forward output
  const float* lse = nullptr;     // forward statistics
  const void* dout = nullptr;     // (B, T, H, D)
  void* dqkv = nullptr;           // (B, T, H + 2*Hkv, D), written
  float* dsinks = nullptr;        // (H), accumulated                          [sink]
  void* dalpha = nullptr;         // (B, T, H), written                        [affine]
};

// The backward of forward call `f`: its shape, features, scale and inputs, and its
// output and statistics; dout and the gradients are left to the caller.
inline AttentionBackwardArgs attention_backward_args(const AttentionForwardArgs& f) {
  return AttentionBackwardArgs{f.shape, f.features, f.scale, f.qkv, f.sinks, f.alpha, f.alpha_ma, f.out, f.lse};
}

// Fused classifier on a chunk of n tokens: cross-entropy against targets and the
// distillation loss against teacher logits, and, when compute_grad, the gradient
// of  grad_scale * (kd_weight*KD + (1-kd_weight)*CE)  written over `logits`.
struct LossChunkArgs {
  int64_t n = 0, V = 0;
  void* logits = nullptr;               // (n, V) student logits; becomes dlogits
  const void* teacher_logits = nullptr; // (n, V) or nullptr (no KD term)
  const int32_t* targets = nullptr;     // (n)
  float* ce = nullptr;                  // (n) per-token cross-entropy, written
  float* kd = nullptr;                  // (n) per-token KD loss (tau^2-scaled), written; 0 without teacher
  float* soft_ce = nullptr;             // (n) or nullptr: per-token teacher soft cross-entropy
                                        // -tau^2 sum p_T log p_S (= KL + teacher entropy), written
                                        // when non-null; 0 without teacher
  KdLoss kd_loss = KdLoss::forward_kl;
  float temperature = 1.f;
  float kd_weight = 0.f;                // ignored (treated as 0) without teacher
  float grad_scale = 1.f;
  bool compute_grad = true;
};

// The fused classifier against a cached sparse teacher (data/teacher_cache.h):
// per row the teacher's top-K ids, their log-probabilities (temperature 1) and
// the log of the mass outside them. The teacher is never expanded to (n, V);
// the values and the gradient equal loss_chunk's against the dense teacher of
// dense_cached_teacher (model/cached_teacher_loss.h), the tail treated as
// `tail` says (docs/distillation.md). In bucket mode soft_ce is the (K+1)-bucket
// cross-entropy itself. reverse_kl needs bucket.
struct SparseKdChunkArgs {
  int64_t n = 0, V = 0, K = 0;
  void* logits = nullptr;            // (n, V) student logits; becomes dlogits
  const int32_t* targets = nullptr;  // (n)
  const int32_t* ids = nullptr;      // (n, K) distinct per row, in [0, V)
  const float* logp = nullptr;       // (n, K) teacher log-probabilities, fp32
  const float* log_tail = nullptr;   // (n) log of the teacher's mass outside the K ids, fp32
  CacheTail tail = CacheTail::renormalize;
  float* ce = nullptr;               // (n) per-token cross-entropy, written
  float* kd = nullptr;               // (n) per-token KD loss (tau^2-scaled), written
  float* soft_ce = nullptr;          // (n) or nullptr: -tau^2 sum q log p_S of the dense teacher, written
  KdLoss kd_loss = KdLoss::forward_kl;
  float temperature = 1.f;
  float kd_weight = 0.f;
  float grad_scale = 1.f;
  bool compute_grad = true;
};

// Each row's top K of a teacher's logits at temperature 1, for the teacher cache
// (docs/distillation.md): only these (n, K) ids and log-probabilities and the (n)
// tail leave the device. Ids by descending logit, equal logits by lower id first
// (-0 equals +0); logp = z - logsumexp(z); log_tail = log of the probability mass
// outside the K ids (-inf when there is none). A row holding NaN or +inf, or no
// finite logit, has no distribution: its ids are -1, its logp and log_tail NaN.
struct TopkArgs {
  int64_t n = 0, V = 0, K = 0;
  const void* logits = nullptr;  // (n, V) in act_dtype()
  int32_t* ids = nullptr;        // (n, K), written
  float* logp = nullptr;         // (n, K), written
  float* log_tail = nullptr;     // (n), written
};

// A contiguous range [begin, end) of a parameter arena with its weight decay: the
// unit of the multi-tensor AdamW.
struct ParamSegment {
  int64_t begin = 0, end = 0;
  float weight_decay = 0.f;
};

struct AdamWArgs {
  float* master = nullptr;      // (n) fp32 weights, updated
  void* compute = nullptr;      // (n) compute copy in act_dtype(), rewritten; may alias master on CPU
  const float* grad = nullptr;  // (n)
  float* m = nullptr;           // (n) first moment
  float* v = nullptr;           // (n) second moment
  int64_t n = 0;
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.f;
  float grad_scale = 1.f;       // clip factor applied to grad
  int64_t step = 1;             // 1-based, for bias correction
  // Multi-tensor form: when given (host memory; sorted, disjoint, inside [0, n)),
  // only these ranges are updated, each with its own weight decay (weight_decay
  // above is then unused), in one call: one launch on CUDA for the whole model.
  const ParamSegment* segments = nullptr;
  int64_t num_segments = 0;
};

// What a backend did on the host's behalf since it was made, so tests can pin down
// a training step's round trips and `kdtrain bench` can report them per step.
struct BackendCounters {
  int64_t host_waits = 0;       // times the host blocked until the device caught up (CPU: 0)
  int64_t to_host_calls = 0, to_host_bytes = 0;
  int64_t to_device_calls = 0, to_device_bytes = 0;
  int64_t allocs = 0;           // device allocations, the backend's own buffers included
};

// One distinct attention call (shape and features) and the implementation that ran
// its forward and backward, for the logs and `kdtrain bench` (backend_stats.h).
struct AttentionPathUse {
  AttentionShape shape;
  AttentionFeatures features;
  std::string forward, backward;  // implementation names; "" = that pass has not run
  std::string reason;             // why the last call took its path
};

// Memory the backend holds (backend_stats.h says what "peak" counts). -1 = not known.
struct MemoryStats {
  int64_t current_bytes = -1;  // held now: every allocation, scratch and library workspace
  int64_t peak_bytes = -1;     // high-water mark of current_bytes
  // Device-wide used memory (total - free) at its highest sample, taken at every
  // allocation: adds the CUDA context, libraries' own memory and other processes.
  int64_t device_used_peak_bytes = -1;
  int64_t device_total_bytes = -1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  const BackendCounters& counters() const { return counters_; }
  virtual std::string name() const = 0;
  virtual DType act_dtype() const = 0;

  // Memory. alloc returns zeroed memory aligned to 256 bytes. to_host and
  // to_device return once the host buffer may be reused; to_device need not wait
  // for the device (CUDA stages small copies through pinned memory).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  virtual void to_host(void* host, const void* device, size_t bytes) = 0;
  virtual void to_device(void* device, const void* host, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Bytes of device memory free now; -1 for a backend whose memory is host memory.
  virtual int64_t free_device_bytes() { return -1; }
  // The queue this backend's work runs on (a cudaStream_t on CUDA), so that a
  // communicator can order its collectives after the work queued so far; null
  // where every call completes before it returns (the CPU).
  virtual void* native_stream() const { return nullptr; }
  // fp32 <-> act dtype conversions (identity copies on CPU)
  virtual void convert_from_f32(void* dst, const float* src, int64_t n) = 0;
  virtual void convert_to_f32(float* dst, const void* src, int64_t n) = 0;

  // out(N,C) = wte[tokens[n]]                     wte (V,C)
  virtual void embedding_forward(void* out, const int32_t* tokens, const void* wte, int64_t N,
                                 int64_t C) = 0;
  // dwte[tokens[n]] += dout[n]                    deterministic (no float atomics)
  // tokens are in HOST memory (the model keeps the batch's ids): a backend that
  // groups positions by id on the host reads them without a copy back.
  virtual void embedding_backward(float* dwte, const void* dout, const int32_t* tokens,
                                  int64_t N, int64_t C, int64_t V) = 0;

  // out(N,C) = inp * rstd * weight, rstd(N) = 1/sqrt(mean(inp^2) + eps)
  virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight,
                               int64_t N, int64_t C, float eps) = 0;
  // The residual add fused with the next RMSNorm: sum_out(N,C) = a + b (one rounding
  // to act_dtype, as add()), then out, rstd = rmsnorm_forward(sum_out). sum_out may
  // alias a or b; out may alias none of them.
  virtual void add_rmsnorm_forward(void* sum_out, void* out, float* rstd, const void* a,
                                   const void* b, const void* weight, int64_t N, int64_t C,
                                   float eps) = 0;
  // dinp(N,C) += ...   dweight(C) += ...
  virtual void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                                const void* weight, const float* rstd, int64_t N, int64_t C) = 0;

  // out(N,OC) = inp(N,IC) @ weight(OC,IC)^T + bias(OC); bias may be null
  virtual void matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                              int64_t N, int64_t IC, int64_t OC) = 0;
  // dinp(N,IC) = (or += when accumulate_dinp) dout @ weight
  // dweight(OC,IC) += dout^T @ inp;  dbias(OC) += colsum(dout). Any output may be null.
  virtual void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const void* weight, int64_t N, int64_t IC,
                               int64_t OC, bool accumulate_dinp) = 0;

  // In place on x (B, T, n_heads, D): rotates heads [0, n_rot) at position t as
  // Hugging Face LLaMA does (rotate_half over the two halves of each head).
  // cos, sin: (T, D/2) fp32 in backend memory.
  virtual void rope_forward(void* x, const float* cos, const float* sin, int64_t B, int64_t T,
                            int64_t n_heads, int64_t n_rot, int64_t D) = 0;
  // The transpose (inverse) rotation, in place on the gradient.
  virtual void rope_backward(void* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                             int64_t n_heads, int64_t n_rot, int64_t D) = 0;

  virtual void attention_forward(const AttentionForwardArgs& args) = 0;
  virtual void attention_backward(const AttentionBackwardArgs& args) = 0;

  // alpha(n) = phi(z(n)), phi = linear_clip or sigmoid
  virtual void alpha_activation_forward(void* alpha, const void* z, int64_t n,
                                        AlphaActivation act) = 0;
  // dz(n) = dalpha(n) * phi'(z(n))
  virtual void alpha_activation_backward(void* dz, const void* dalpha, const void* z, int64_t n,
                                         AlphaActivation act) = 0;
  // sums(H) += sum over rows of x(N,H), fp32 accumulation (for the alpha_ma update)
  virtual void column_sum_accumulate(float* sums, const void* x, int64_t N, int64_t H) = 0;

  // out(n) = inp(n) * sigmoid(gate(n))
  virtual void sigmoid_gate_forward(void* out, const void* inp, const void* gate, int64_t n) = 0;
  // dinp(n), dgate(n) written
  virtual void sigmoid_gate_backward(void* dinp, void* dgate, const void* dout, const void* inp,
                                     const void* gate, int64_t n) = 0;

  // out(N,F) = silu(gate_up[:, :F]) * gate_up[:, F:]      gate_up (N, 2F)
  virtual void swiglu_forward(void* out, const void* gate_up, int64_t N, int64_t F) = 0;
  // dgate_up(N,2F) written
  virtual void swiglu_backward(void* dgate_up, const void* dout, const void* gate_up, int64_t N,
                               int64_t F) = 0;

  // out = a + b (out may alias a or b);  dst += src
  virtual void add(void* out, const void* a, const void* b, int64_t n) = 0;
  virtual void accumulate(void* dst, const void* src, int64_t n) = 0;

  virtual void loss_chunk(const LossChunkArgs& args) = 0;
  virtual void sparse_kd_loss_chunk(const SparseKdChunkArgs& args) = 0;
  virtual void topk_log_probs(const TopkArgs& args) = 0;

  // Optimizer support.
  virtual double sum_squares(const float* x, int64_t n) = 0;  // deterministic
  virtual void adamw_update(const AdamWArgs& args) = 0;

  // Reporting: the distinct attention calls so far and the path each took, and
  // the memory held.
  virtual std::vector<AttentionPathUse> attention_paths() const = 0;
  virtual MemoryStats memory_stats() const = 0;

 protected:
  BackendCounters counters_;  // kept by each implementation
};

// Throws when the backend is not built or no device exists. The string form
// parses a --device flag ("cpu" or "cuda"). `attention_forward` and `attention_backward`
// (train.attention_forward / attention_backward) are resolved by the CUDA backend once,
// here: a kernel it cannot run is an error now, not at the first call; the CPU backend
// ignores them.
std::unique_ptr<Backend> make_backend(Device device, int64_t threads = 0,
                                      AttentionForward attention_forward = AttentionForward::auto_select,
                                      AttentionBackward attention_backward = AttentionBackward::auto_select);
std::unique_ptr<Backend> make_backend(const std::string& device, int64_t threads = 0);
bool cuda_available();

// Why the training path of `device` cannot run attention of this shape, or "" when it
// can. Checked before anything is built; the rule's one home is the CUDA backend's
// (backend/cuda/attention_path.h: training on CUDA runs the fused kernels only).
std::string training_path_refusal(Device device, const AttentionShape& shape);

}  // namespace kdtrain
