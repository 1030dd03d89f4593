// The device memory of a training run, by owner, from the same code the run
// allocates with: the parameter table (ParamLayout), the activation layout
// (plan_activations, model/activations.h), the loss chunk rule (loss_chunk_tokens) and the
// optimizer's ZeRO-1 shard (dist::shard_range). `kdtrain info` prints it before a
// run; data parallelism reads the per-rank numbers from it (one model of memory
// for every caller, so none can drift from what the trainer allocates).
#pragma once
#include <cstdint>
#include <optional>

#include "backend/backend.h"
#include "config/config.h"
#include "model/model.h"

namespace kdtrain {

struct MemoryPlanInput {
  ModelConfig student;
  AttentionConfig attention;
  std::optional<ModelConfig> teacher;  // an online teacher (baseline or its own attention)
  AttentionConfig teacher_attention;
  int64_t micro_batch = 1, seq_len = 1;
  DType act_dtype = DType::bf16;       // bf16: the CUDA backend's layout
  int world_size = 1;
  bool zero1 = true;                   // dist.zero1 (counts only when world_size > 1)
  int64_t chunk_tokens = 0;            // kd.chunk_tokens (0 = auto)
  int64_t device_bytes = -1;           // device capacity for the auto loss chunk; -1 = host
  RecomputePlan recompute;             // train.recompute, train.recompute_layers
};

// Bytes, per rank.
struct MemoryPlan {
  int64_t student_compute = 0;      // compute copy (act dtype); 0 where it is the master (fp32)
  int64_t student_master = 0;       // fp32 master weights
  int64_t student_grads = 0;        // fp32 gradients
  int64_t optimizer = 0;            // AdamW m and v, this rank's shard
  int64_t optimizer_all_ranks = 0;  // the same for the whole arena
  int64_t teacher_weights = 0;      // compute copy only (plus fp32 sinks / alpha_ma)
  int64_t student_activations = 0;  // the train arena (plan_activations)
  int64_t teacher_activations = 0;  // the teacher arena: one layer's
  int64_t loss_chunk_rows = 0;
  int64_t loss_buffers = 0;         // (rows, V) logits of the student and the teacher
  int64_t workspace = 0;            // cuBLASLt workspace and the backend's fixed buffers
  int64_t total() const {
    return student_compute + student_master + student_grads + optimizer + teacher_weights +
           student_activations + teacher_activations + loss_buffers + workspace;
  }
};

MemoryPlan plan_memory(const MemoryPlanInput& in);

}  // namespace kdtrain
