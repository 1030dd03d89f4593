// The memory plan (model/memory_plan.h) for the run issue 13 sizes: llama3.2-1b
// student with the llama3.2-3b teacher, micro-batch 8, T = 2048, on an 80 GiB
// device. Its parts come from the code the run allocates with, so the checks
// here are about the rules: a bf16-only teacher, one layer of teacher
// activations, a loss chunk sized to the memory left, ZeRO-1 shards.
#include <catch2/catch.hpp>

#include "model/activations.h"
#include "model/loss.h"
#include "model/memory_plan.h"

using namespace kdtrain;

namespace {
MemoryPlanInput one_b_with_teacher(double device_gib) {
  MemoryPlanInput in;
  in.student = model_preset("llama3.2-1b");
  in.teacher = model_preset("llama3.2-3b");
  in.micro_batch = 8;
  in.seq_len = 2048;
  in.device_bytes = static_cast<int64_t>(device_gib * (int64_t(1) << 30));
  return in;
}
}  // namespace

TEST_CASE("memory plan: bf16 teacher, streamed activations, loss chunk from what is left",
          "[memory]") {
  const MemoryPlanInput in = one_b_with_teacher(80);
  const MemoryPlan p = plan_memory(in);
  const ParamLayout student = make_param_layout(in.student, in.attention);
  const ParamLayout teacher = make_param_layout(*in.teacher, in.teacher_attention);
  CHECK(p.student_master == 4 * student.total);
  CHECK(p.student_compute == 2 * student.total);
  CHECK(p.optimizer == 8 * student.total);
  // The teacher: 2 bytes per parameter plus its fp32 sinks/alpha_ma side buffer.
  CHECK(p.teacher_weights >= 2 * teacher.total);
  CHECK(p.teacher_weights < 2 * teacher.total + (int64_t(1) << 20));
  CHECK(p.student_activations ==
        static_cast<int64_t>(plan_activations(in.student, features_of(in.attention.variant),
                                              DType::bf16, ModelUse::train, 8, 2048)
                                 .total_bytes));
  // One streamed layer of a 28-layer teacher against every layer of the student.
  CHECK(p.teacher_activations * 8 < p.student_activations);
  CHECK(p.loss_chunk_rows == 8192);
  CHECK(p.loss_buffers == 2 * 8192 * in.student.vocab_size * 2);
  CHECK(p.total() == p.student_compute + p.student_master + p.student_grads + p.optimizer +
                         p.teacher_weights + p.student_activations + p.teacher_activations +
                         p.loss_buffers + p.workspace);
  CHECK(p.total() < int64_t(80) << 30);  // the run that ran out of memory now fits

  // A smaller device: the chunk shrinks to what is left, never below 256 rows.
  const MemoryPlan small = plan_memory(one_b_with_teacher(50));  // ~1.9 GiB left
  CHECK(small.loss_chunk_rows < 8192);
  CHECK(small.loss_chunk_rows >= 256);
  CHECK(small.loss_chunk_rows % 256 == 0);

  // ZeRO-1 over 8 ranks: each keeps an eighth of the moments (rounded up).
  MemoryPlanInput dp = in;
  dp.world_size = 8;
  const MemoryPlan shard = plan_memory(dp);
  CHECK(shard.optimizer_all_ranks == 8 * student.total);
  CHECK(shard.optimizer * 8 >= shard.optimizer_all_ranks);
  CHECK(shard.optimizer * 8 < shard.optimizer_all_ranks + 8 * 8 * 8);
}
