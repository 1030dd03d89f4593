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

namespace kdtrain {

// What a model is built for, which decides the memory it holds (model/model.h):
// train (gradients and every layer's activations), frozen (no gradients; every
// layer's activations stay readable for analysis), teacher (forward only: one
// layer's buffers reused by every layer, no gradient scratch).
enum class ModelUse { train, frozen, teacher };

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
                           ActivationPlan* plan = nullptr);

ActivationPlan plan_activations(const ModelConfig& model, AttentionFeatures features, DType act,
                                ModelUse use, int64_t B, int64_t T);

}  // namespace kdtrain
