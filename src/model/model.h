// The decoder (docs/model.md), written once against the Backend interface. The
// same code runs on the CPU reference and on CUDA.
//
// Memory, by use (ModelUse):
// - train: three parameter-sized arenas (fp32 master weights, the compute copy in
//   the backend's activation dtype — the same memory as the master on the CPU —
//   and fp32 gradients) laid out by ParamLayout, plus one activation arena holding
//   every layer's activations for the backward, laid out for the last (B, T);
// - frozen: the same without gradients (evaluation, analysis: every layer's
//   activations stay readable after the forward);
// - teacher: forward only. The compute copy alone (no fp32 master where the
//   compute dtype is narrower; the fp32 sinks and alpha_ma the attention reads
//   live in a small side buffer), and one layer's activations reused by every
//   layer, since no backward reads them.
// The activation arena is laid out by model/activations.h, which also sizes it
// without allocating (the memory plan of `kdtrain info`, model/memory_plan.h).
//
// A training micro-step is: forward(tokens) → the fused loss
// (model/loss.h) calls head_logits()/head_backward() chunk by chunk, filling
// d(final hidden) → backward(). Parameter gradients accumulate across
// micro-steps until zero_grads().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/activations.h"
#include "model/param_layout.h"
#include "model/variant_state.h"

namespace kdtrain {

class Model {
 public:
  Model(const ModelConfig& model, const AttentionConfig& attention, Backend& backend,
        ModelUse use = ModelUse::train);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return model_; }
  const AttentionConfig& attention() const { return attention_; }
  AttentionFeatures features() const { return features_; }
  const ParamLayout& layout() const { return layout_; }
  Backend& backend() { return backend_; }

  ModelUse use() const { return use_; }
  float* master() { return master_; }  // (layout.total) fp32; null for a bf16 teacher
  float* grads() { return grads_; }    // (layout.total) fp32; null unless trainable
  bool trainable() const { return grads_ != nullptr; }
  void* weights() { return weights_; } // (layout.total) compute copy
  void set_params(const std::vector<float>& host);  // master (if any) and compute copy
  // One tensor of the parameters at arena `offset`, from n bf16 values (e.g. the
  // bytes of a mapped safetensors file, any alignment) or n fp32 ones, for
  // loading a checkpoint without an fp32 copy of the whole model: a teacher
  // without master uploads bf16 values as they are (the compute copy set_params
  // would round them to, bit for bit). Call finish_param_tensors() once every
  // tensor is in.
  void set_param_tensor(int64_t offset, const void* values, int64_t n, bool bf16);
  void finish_param_tensors();
  std::vector<float> get_params();                   // master to host
  std::vector<float> get_grads();
  void refresh_compute_weights();  // compute copy from master (no-op on CPU)
  void zero_grads();
  // The variant's state: sinks and alpha_ma as the attention reads them, the
  // step's alpha sums and the end-of-step update of alpha_ma (model/variant_state.h).
  VariantState& variant() { return *variant_; }
  const VariantState& variant() const { return *variant_; }

  // What the backward recomputes instead of keeping (model/activations.h); takes
  // effect at the next forward. Results are bit-identical for every choice.
  void set_recompute(const RecomputePlan& recompute);
  const RecomputePlan& recompute() const { return recompute_; }

  // Runs the decoder on tokens (B, T) (host int32), keeping what backward needs.
  // With accumulate_alpha, adds the column sums of alpha per (layer, head) to
  // the step's totals in variant().
  void forward(const int32_t* tokens, int64_t B, int64_t T, bool accumulate_alpha);
  int64_t tokens_in_batch() const { return B_ * T_; }
  const void* final_hidden() const;  // (B*T, C) after the final RMSNorm

  // logits(n, V) = final_hidden[start : start+n] @ lm_head^T
  void head_logits(void* logits, int64_t start, int64_t n);
  // From dlogits(n, V): d final_hidden[start : start+n] (written) and d lm_head (+=).
  void head_backward(const void* dlogits, int64_t start, int64_t n);
  // Backpropagates d final_hidden through the decoder into grads().
  void backward();
  // Called during backward() with each range [begin, end) of grads() that this
  // backward pass (and the loss's head_backward before it) will no longer
  // write, in the order it finishes them: an untied lm_head at entry, the
  // final norm, layers L-1 .. 0, the embedding; together they tile the arena.
  // On CUDA the range is final once the work queued so far on the backend's
  // stream has run. Data parallelism reduces a range while the backward goes
  // on (dist/grad_reducer.h). An empty hook: no calls.
  using GradsFinalHook = std::function<void(int64_t begin, int64_t end)>;
  void set_grads_final_hook(GradsFinalHook hook) { grads_final_ = std::move(hook); }

  // --- read-only views for analysis (src/eval/attention_analysis.h) ---
  // Layer l's activations from the last forward, in backend memory and act_dtype();
  // valid until the next forward with a different (B, T).
  int64_t batch_size() const { return B_; }
  int64_t seq_len() const { return T_; }
  const void* layer_qkv(int64_t l) const;    // (B, T, H + 2*Hkv, D), RoPE applied
  const void* layer_alpha(int64_t l) const;  // (B, T, H) activated alpha; null unless affine
  const float* layer_lse(int64_t l) const;   // (B, H, T) fp32 log softmax denominator
  size_t activation_bytes() const { return arena_bytes_; }  // the arena (0 before forward)

 private:
  void ensure_activations(int64_t B, int64_t T);
  void* weight(int64_t offset) const;  // compute-copy pointer at an arena offset
  void forward_layer(int64_t l, bool accumulate_alpha);
  // Layer l's forward up to the SwiGLU output, without the down product and the
  // residual add that end it: what the backward reruns for a whole layer.
  void forward_layer_body(int64_t l, bool accumulate_alpha);
  // Refills what the recomputation dropped, just before backward_layer reads it.
  void recompute_mlp_inputs(int64_t l);
  void recompute_attention_inputs(int64_t l);
  AttentionForwardArgs attention_args(int64_t l) const;
  // The sizes a layer's ops take at the current (B, T): N = B*T tokens, QKV = (H + 2*Hkv)*D.
  struct LayerSizes {
    int64_t B, T, N, C, H, Hkv, D, F, QKV;
  };
  LayerSizes layer_sizes() const;
  void backward_layer(int64_t l);

  ModelConfig model_;
  AttentionConfig attention_;
  AttentionFeatures features_;  // of attention_ (variant and affine divisor), resolved once
  Backend& backend_;
  ModelUse use_;
  ParamLayout layout_;
  float* master_ = nullptr;
  float* grads_ = nullptr;
  void* weights_ = nullptr;  // == master_ when act dtype is fp32
  std::unique_ptr<VariantState> variant_;  // after the arenas: it reads the master's sinks and alpha_ma
  std::vector<int32_t> host_tokens_;  // (B*T) of the last forward
  RecomputePlan recompute_;
  Activations acts_;          // pointers into arena_, laid out for (acts_.B, acts_.T)
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  int64_t B_ = 0, T_ = 0;
  GradsFinalHook grads_final_;
};

}  // namespace kdtrain
