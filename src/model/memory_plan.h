// The device memory of a training run, by owner: one table for every caller.
// `kdtrain info` prints it before a run, `kdtrain bench` beside the arenas it
// measured, and the trainer in its set-up log. Each item comes from the code the
// run allocates with: the parameter table (ParamLayout), the activation layout
// (plan_activations, model/activations.h), the loss chunk rule
// (loss_chunk_tokens) and the optimizer's ZeRO-1 shard (dist::shard_range), so
// no caller can drift from what the trainer allocates.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/activations.h"

namespace kdtrain {

struct MemoryPlanInput {
  ModelConfig student;
  AttentionConfig attention;
  std::optional<ModelConfig> teacher;  // an online teacher (baseline or its own attention)
  AttentionConfig teacher_attention;
  int64_t cache_top_k = 0;             // a cached teacher's K (kd.teacher_cache) instead; 0 = none
  int64_t micro_batch = 1, seq_len = 1;
  DType act_dtype = DType::bf16;       // bf16: the CUDA backend's layout
  int world_size = 1;
  bool zero1 = true;                   // dist.zero1 (counts only when world_size > 1)
  int64_t chunk_tokens = 0;            // kd.chunk_tokens (0 = auto)
  int64_t device_bytes = -1;           // device capacity for the auto loss chunk; -1 = host
  RecomputePlan recompute;             // train.recompute, train.recompute_layers
};

// A run's student and shapes as its config gives them: model, attention,
// train.micro_batch, train.seq_len, dist.zero1, kd.chunk_tokens and the
// recomputation. The caller adds the teacher, the dtype, the ranks and the device.
MemoryPlanInput memory_plan_input(const Config& config);

// Bytes, per rank.
struct MemoryPlan {
  int64_t student_compute = 0;      // compute copy (act dtype); 0 where it is the master (fp32)
  int64_t student_master = 0;       // fp32 master weights
  int64_t student_grads = 0;        // fp32 gradients
  int64_t optimizer = 0;            // AdamW m and v, this rank's shard
  int64_t optimizer_all_ranks = 0;  // the same for the whole arena
  int64_t teacher_weights = 0;      // compute copy only (plus fp32 sinks / alpha_ma)
  int64_t teacher_cache = 0;        // a micro-batch's cached rows: top-K ids, log-probabilities, log tail
  int64_t student_activations = 0;  // the train arena (plan_activations)
  int64_t teacher_activations = 0;  // the teacher arena: one layer's
  int64_t loss_chunk_rows = 0;
  int64_t loss_buffers = 0;         // (rows, V) logits of the student and an online teacher
  int64_t workspace = 0;            // cuBLASLt workspace and the backend's fixed buffers
  ActivationPlan student_activation_plan;  // the student arena, buffer by buffer
  MemoryPlanInput input;                   // what was planned
  int64_t total() const {
    return student_compute + student_master + student_grads + optimizer + teacher_weights + teacher_cache +
           student_activations + teacher_activations + loss_buffers + workspace;
  }

  // The table, in print order: every item of total() once.
  struct Row {
    std::string key;    // JSON: "<key>_bytes"
    std::string label;  // text
    int64_t bytes = 0;
  };
  std::vector<Row> rows() const;
};

MemoryPlan plan_memory(const MemoryPlanInput& in);

// {"<key>_bytes" per row, "items" (each row's key and label, in order),
//  "total_bytes", "optimizer_all_ranks_bytes", "loss_chunk_rows", the shapes
//  planned for ("micro_batch", "seq_len", "world_size", "zero1", "act_dtype"),
//  "student_activations_per_layer_bytes" and "activation_buffers"}.
nlohmann::json to_json(const MemoryPlan& plan);
// The table (to_json's form) as text lines in MiB, the total last. `measured`
// ("<key>_bytes" → bytes a run allocated) adds a second column where it has the key.
std::vector<std::string> memory_plan_lines(const nlohmann::json& plan,
                                           const nlohmann::json& measured = nlohmann::json::object());

}  // namespace kdtrain
