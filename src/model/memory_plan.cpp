#include "model/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "dist/communicator.h"
#include "model/loss.h"
#include "model/param_layout.h"

namespace kdtrain {

namespace {
// The CUDA backend's own buffers: the cuBLASLt workspace (32 MiB) and the pinned
// staging of uploads (host memory, not counted); scratch grows to the largest op's
// need, which the rmsnorm/column-sum partials keep under a few MiB at these shapes.
constexpr int64_t kBackendWorkspace = int64_t(48) << 20;

// The largest rank's share of n elements: ZeRO-1 shards the AdamW moments.
int64_t largest_shard(int64_t n, const MemoryPlanInput& in) {
  if (!in.zero1 || in.world_size <= 1) return n;
  int64_t shard = 0;
  for (int r = 0; r < in.world_size; ++r) shard = std::max(shard, dist::shard_range(n, r, in.world_size).size());
  return shard;
}

void plan_teacher(const MemoryPlanInput& in, MemoryPlan& p) {
  const bool fp32 = in.act_dtype == DType::f32;
  const int64_t act = static_cast<int64_t>(dtype_size(in.act_dtype));
  const int64_t N = in.micro_batch * in.seq_len;
  if (in.teacher) {
    const ParamLayout t = make_param_layout(*in.teacher, in.teacher_attention);
    const int64_t side = 2 * in.teacher->num_hidden_layers * in.teacher->num_attention_heads * 4;
    p.teacher_weights = fp32 ? 4 * t.total : act * t.total + side;
    p.teacher_activations = static_cast<int64_t>(
        plan_activations(*in.teacher, features_of(in.teacher_attention), in.act_dtype, ModelUse::teacher,
                         in.micro_batch, in.seq_len)
            .total_bytes);
  }
  // The fused loss's upload of the rows (model/loss.cpp): int32 ids, fp32
  // log-probabilities, then the fp32 log tail.
  if (in.cache_top_k > 0) p.teacher_cache = N * in.cache_top_k * 8 + N * 4;
}
}  // namespace

MemoryPlanInput memory_plan_input(const Config& config) {
  MemoryPlanInput in;
  in.student = config.model;
  in.attention = config.attention;
  in.micro_batch = config.train.micro_batch;
  in.seq_len = config.train.seq_len;
  in.zero1 = config.dist.zero1;
  in.chunk_tokens = config.kd.chunk_tokens;
  in.recompute = recompute_plan(config.train);
  return in;
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  MemoryPlan p;
  p.input = in;
  const bool fp32 = in.act_dtype == DType::f32;
  const int64_t act = static_cast<int64_t>(dtype_size(in.act_dtype));
  const int64_t n = make_param_layout(in.student, in.attention).total;
  p.student_master = 4 * n;
  p.student_compute = fp32 ? 0 : act * n;
  p.student_grads = 4 * n;
  p.optimizer = 8 * largest_shard(n, in);
  p.optimizer_all_ranks = 8 * n;
  p.student_activation_plan = plan_activations(in.student, features_of(in.attention), in.act_dtype,
                                               ModelUse::train, in.micro_batch, in.seq_len, in.recompute);
  p.student_activations = static_cast<int64_t>(p.student_activation_plan.total_bytes);
  plan_teacher(in, p);
  p.workspace = fp32 ? 0 : kBackendWorkspace;
  const int64_t N = in.micro_batch * in.seq_len, V = in.student.vocab_size;
  const int64_t buffers = in.teacher ? 2 : 1;  // a cached teacher's KD reads its rows, not (n, V) logits
  const int64_t before_loss = p.total();
  const int64_t free_bytes = in.device_bytes < 0 ? -1 : std::max<int64_t>(0, in.device_bytes - before_loss);
  p.loss_chunk_rows = loss_chunk_tokens(in.chunk_tokens, N, V, act, buffers, free_bytes);
  p.loss_buffers = buffers * p.loss_chunk_rows * V * act;
  return p;
}

std::vector<MemoryPlan::Row> MemoryPlan::rows() const {
  const std::string dtype = input.act_dtype == DType::f32 ? "fp32" : "bf16";
  const bool sharded = input.zero1 && input.world_size > 1;
  const std::string adamw = sharded ? "AdamW m, v (fp32; ZeRO-1 over " + std::to_string(input.world_size) +
                                          " ranks: this rank's shard)"
                                    : "AdamW m, v (fp32)";
  return {
      {"student_compute",
       input.act_dtype == DType::f32 ? "student compute copy (none: the fp32 master is it)"
                                     : "student weights (" + dtype + " compute copy)",
       student_compute},
      {"student_master", "student master weights (fp32)", student_master},
      {"student_grads", "student gradients (fp32)", student_grads},
      {"optimizer", adamw, optimizer},
      {"teacher_weights", "teacher weights (" + dtype + " compute copy only)", teacher_weights},
      {"teacher_cache", "cached teacher rows (a micro-batch's top-K)", teacher_cache},
      {"student_activations", "student activations (kept per train.recompute)", student_activations},
      {"teacher_activations", "teacher activations (one layer, reused)", teacher_activations},
      {"loss_buffers",
       "loss chunk (" + std::to_string(loss_chunk_rows) + " rows of logits x " + (input.teacher ? "2" : "1") + ")",
       loss_buffers},
      {"workspace", "workspace (cuBLASLt, backend buffers)", workspace},
  };
}

nlohmann::json to_json(const MemoryPlan& plan) {
  nlohmann::json j;
  const MemoryPlanInput& in = plan.input;
  j["micro_batch"] = in.micro_batch;
  j["seq_len"] = in.seq_len;
  j["world_size"] = in.world_size;
  j["zero1"] = in.zero1 && in.world_size > 1;
  j["act_dtype"] = in.act_dtype == DType::f32 ? "fp32" : "bf16";
  nlohmann::json items = nlohmann::json::array();
  for (const MemoryPlan::Row& row : plan.rows()) {
    j[row.key + "_bytes"] = row.bytes;
    items.push_back({{"key", row.key}, {"label", row.label}});
  }
  j["items"] = items;
  j["total_bytes"] = plan.total();
  j["optimizer_all_ranks_bytes"] = plan.optimizer_all_ranks;
  j["loss_chunk_rows"] = plan.loss_chunk_rows;
  j["student_activations_per_layer_bytes"] = plan.student_activation_plan.per_layer_bytes;
  nlohmann::json buffers = nlohmann::json::array();
  for (const ActivationPlan::Buffer& b : plan.student_activation_plan.buffers)
    buffers.push_back({{"name", b.name}, {"count", b.count}, {"bytes", b.bytes}, {"per_layer", b.per_layer}});
  j["activation_buffers"] = buffers;
  return j;
}

std::vector<std::string> memory_plan_lines(const nlohmann::json& plan, const nlohmann::json& measured) {
  const double mib = 1024.0 * 1024.0;
  char buf[256];
  std::vector<std::string> lines;
  const auto line = [&](const std::string& label, const std::string& key) {
    const std::string name = key + "_bytes";
    const int n = std::snprintf(buf, sizeof buf, "  %-60s %10.1f", label.c_str(), plan[name].get<double>() / mib);
    if (measured.contains(name))
      std::snprintf(buf + n, sizeof buf - n, " %10.1f", measured[name].get<double>() / mib);
    lines.push_back(buf);
  };
  std::snprintf(buf, sizeof buf, "  %-60s %10s%s", "MiB per rank", "plan", measured.empty() ? "" : "   measured");
  lines.push_back(buf);
  for (const nlohmann::json& item : plan["items"]) line(item["label"].get<std::string>(), item["key"].get<std::string>());
  line("total", "total");
  return lines;
}

}  // namespace kdtrain
