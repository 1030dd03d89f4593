// The activation arena of one (B, T) shape: every activation the backward reads
// and every gradient scratch buffer, carved out of one backend allocation by one
// layout pass. The same pass, run without memory, is the plan `kdtrain info` and
// `kdtrain bench` print, so the sizes they report are the ones the model allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/choices.h"

namespace kdtrain {

// What a model is built for, which decides the memory it holds (model/model.h):
// train (gradients and every layer's activations), frozen (no gradients; every
// layer's activations stay readable for analysis), teacher (forward only: one
// layer's buffers reused by every layer, no gradient scratch).
enum class ModelUse { train, frozen, teacher };

// What the training backward recomputes instead of keeping (train.recompute and
// train.recompute_layers). A dropped per-layer buffer points, in every layer, at
// one shared buffer of the same size that the forward overwrites layer after
// layer and the backward refills just before it reads it, with the same ops on
// the same inputs, so the results are bit-identical:
// - swiglu: the SwiGLU output, from gate_up (elementwise);
// - norms: also ln1 and ln2, from resid / resid_mid (elementwise; the fp32 rstd
//   of each layer is kept, and rewritten with the same values);
// - mlp: also gate_up, from ln2 (one (N, C) x (C, 2F) product per layer);
// - whole_layers K: layers 0..K-1 keep only their input resid[l] and share one
//   full layer of buffers, refilled by rerunning the layer's forward.
// Only ModelUse::train recomputes: frozen models keep every layer for analysis.
struct RecomputePlan {
  Recompute kept = Recompute::none;
  int64_t whole_layers = 0;
  bool drops_swiglu() const { return kept >= Recompute::swiglu; }
  bool drops_norms() const { return kept >= Recompute::norms; }
  bool drops_gate_up() const { return kept >= Recompute::mlp; }
  bool whole(int64_t layer) const { return layer < whole_layers; }
};

RecomputePlan recompute_plan(const TrainConfig& train);  // train.recompute, train.recompute_layers

// Extra forward FLOPs per token the backward spends recomputing, at sequence
// length T (matrix products and attention; elementwise work counted as zero).
double recompute_flops_per_token(const ModelConfig& model, AttentionFeatures features,
                                 const RecomputePlan& recompute, int64_t T);

// Per-layer buffers are what backward reads; the d* buffers are scratch reused
// layer after layer.
struct Activations {
  int64_t B = 0, T = 0;
  int32_t* tokens = nullptr;          // (N)
  float* rope_cos = nullptr;          // (T, D/2)
  float* rope_sin = nullptr;          // (T, D/2)
  std::vector<void*> resid;           // L+1 x (N, C): input of layer l; resid[L] feeds the final norm
  std::vector<void*> resid_mid;       // L x (N, C): after attention's residual add
  std::vector<void*> ln1, ln2;        // L x (N, C)
  std::vector<float*> ln1_rstd, ln2_rstd;  // L x (N)
  std::vector<void*> qkv;             // L x (N, (H+2Hkv)*D), RoPE applied
  std::vector<float*> lse;            // L x (B, H, T)
  std::vector<void*> att;             // L x (N, H*D): attention core output
  std::vector<void*> alpha_z, alpha;  // L x (N, H)                 [affine]
  std::vector<void*> gate_z, att_gated;  // L x (N, H*D)            [gate]
  std::vector<void*> gate_up;         // L x (N, 2F)
  std::vector<void*> swiglu;          // L x (N, F)
  void* final_norm = nullptr;         // (N, C)
  float* final_rstd = nullptr;        // (N)
  void* proj_out = nullptr;           // (N, C) scratch for o_proj / down_proj outputs
  // gradient scratch
  void* d_final = nullptr;            // (N, C) d final_norm, filled by the loss
  void* d_resid = nullptr;            // (N, C)
  void* d_ln = nullptr;               // (N, C)
  void* d_y = nullptr;                // (N, H*D) gradient of the o_proj input
  void* d_att = nullptr;              // (N, H*D)                   [gate]
  void* d_gate_z = nullptr;           // (N, H*D)                   [gate]
  void* d_alpha = nullptr;            // (N, H)                     [affine]
  void* d_alpha_z = nullptr;          // (N, H)                     [affine]
  void* d_qkv = nullptr;              // (N, (H+2Hkv)*D)
  void* d_swiglu = nullptr;           // (N, F)
  void* d_gate_up = nullptr;          // (N, 2F)
};

// The sizes of the arena, buffer by buffer (bytes rounded up to the 256-byte
// alignment every buffer starts on).
struct ActivationPlan {
  struct Buffer {
    std::string name;   // the Activations field
    int64_t count = 0;  // copies (L for per-layer buffers)
    size_t bytes = 0;   // all copies together
    bool per_layer = false;
  };
  std::vector<Buffer> buffers;
  size_t total_bytes = 0;      // the arena
  size_t per_layer_bytes = 0;  // what one decoder layer keeps (a teacher: the one shared layer)
};

// Lays out `x` for its (x.B, x.T) from `base` (null: sizes only) and returns the
// bytes used; fills `plan` when given.
size_t lay_out_activations(Activations& x, char* base, const ModelConfig& model,
                           AttentionFeatures features, DType act, ModelUse use,
                           const RecomputePlan& recompute, ActivationPlan* plan = nullptr);

ActivationPlan plan_activations(const ModelConfig& model, AttentionFeatures features, DType act,
                                ModelUse use, int64_t B, int64_t T,
                                const RecomputePlan& recompute = {});

}  // namespace kdtrain
