#include "model/memory_plan.h"

#include <algorithm>

#include "dist/communicator.h"
#include "model/activations.h"
#include "model/loss.h"
#include "model/param_layout.h"

namespace kdtrain {

namespace {
// The CUDA backend's own buffers: the cuBLASLt workspace (32 MiB) and the pinned
// staging of uploads (host memory, not counted); scratch grows to the largest op's
// need, which the rmsnorm/column-sum partials keep under a few MiB at these shapes.
constexpr int64_t kBackendWorkspace = int64_t(48) << 20;
}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  MemoryPlan p;
  const bool fp32 = in.act_dtype == DType::f32;
  const int64_t act = static_cast<int64_t>(dtype_size(in.act_dtype));
  const ParamLayout layout = make_param_layout(in.student, in.attention);
  const int64_t n = layout.total;
  p.student_master = 4 * n;
  p.student_compute = fp32 ? 0 : act * n;
  p.student_grads = 4 * n;
  int64_t shard = n;
  if (in.zero1 && in.world_size > 1) {
    shard = 0;
    for (int r = 0; r < in.world_size; ++r)
      shard = std::max(shard, dist::shard_range(n, r, in.world_size).size());
  }
  p.optimizer = 8 * shard;
  p.optimizer_all_ranks = 8 * n;
  p.student_activations = static_cast<int64_t>(
      plan_activations(in.student, features_of(in.attention.variant), in.act_dtype,
                       ModelUse::train, in.micro_batch, in.seq_len, in.recompute)
          .total_bytes);
  int64_t buffers = 1;
  if (in.teacher) {
    const ParamLayout t = make_param_layout(*in.teacher, in.teacher_attention);
    const int64_t side = 2 * in.teacher->num_hidden_layers * in.teacher->num_attention_heads * 4;
    p.teacher_weights = fp32 ? 4 * t.total : act * t.total + side;
    p.teacher_activations = static_cast<int64_t>(
        plan_activations(*in.teacher, features_of(in.teacher_attention.variant), in.act_dtype,
                         ModelUse::teacher, in.micro_batch, in.seq_len)
            .total_bytes);
    buffers = 2;
  }
  p.workspace = fp32 ? 0 : kBackendWorkspace;
  const int64_t N = in.micro_batch * in.seq_len, V = in.student.vocab_size;
  const int64_t before_loss = p.total();
  const int64_t free_bytes = in.device_bytes < 0 ? -1 : std::max<int64_t>(0, in.device_bytes - before_loss);
  p.loss_chunk_rows = loss_chunk_tokens(in.chunk_tokens, N, V, act, buffers, free_bytes);
  p.loss_buffers = buffers * p.loss_chunk_rows * V * act;
  return p;
}

}  // namespace kdtrain
