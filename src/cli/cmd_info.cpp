// kdtrain info: architecture, parameter counts per component, the Δ over the
// baseline of the same model (the paper's ΔParams column), and a training memory
// estimate. Every count comes from the parameter table (make_param_layout), so
// info can never disagree with what the trainer allocates. With --checkpoint DIR
// (a kdtrain or Hugging Face checkpoint) the model comes from DIR/config.json and
// the weight files are checked against it (names, shapes, dtypes; no data read).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "dist/communicator.h"
#include "config/config.h"
#include "config/presets.h"
#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"
#include "io/hf_checkpoint.h"
#include "bench/bench.h"
#include "model/activations.h"
#include "model/memory_plan.h"
#include "model/param_layout.h"

namespace kdtrain::cli {

namespace {

struct InfoOptions {
  CommonOptions common;
  std::string checkpoint;   // "" = model from --config / --preset
  int64_t micro_batch = 0;  // 0 = train.micro_batch
  int64_t seq_len = 0;      // 0 = train.seq_len
  int world_size = 1;       // data-parallel ranks: AdamW state per rank under ZeRO-1
  std::string teacher;      // "" = kd.teacher; a preset name or a checkpoint directory
  double device_gib = 80;   // device capacity the auto loss chunk is sized against
  bool json = false;
  bool variants = false;    // list the attention variants and their features instead
  bool presets = false;     // list the model presets instead
};

// Millions with one decimal, as the paper prints ΔParams.
std::string millions(int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", double(n) / 1e6);
  return buf;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Every buffer of the activation arena: name, copies, MiB of all copies.
nlohmann::json activation_buffers_json(const ActivationPlan& plan) {
  nlohmann::json list = nlohmann::json::array();
  for (const ActivationPlan::Buffer& b : plan.buffers)
    list.push_back({{"name", b.name}, {"count", b.count}, {"mib", mib(double(b.bytes))},
                    {"per_layer", b.per_layer}});
  return list;
}

// Training memory on the CUDA layout (bytes): bf16 weights beside the fp32 master
// and gradients, AdamW's two fp32 moments, the activation arena exactly as the
// model lays it out for (B, T) (model/activations.h), and the fused loss, which
// holds one chunk of min(loss_chunk_tokens(...), N) rows of fp32 logits for the student
// (overwritten by their gradient) and one for the teacher.
struct MemoryEstimate {
  double params_bf16 = 0, master_fp32 = 0, grads_fp32 = 0, adamw = 0;
  double activations_per_layer = 0, activations = 0, loss_chunk = 0;
  double total() const { return params_bf16 + master_fp32 + grads_fp32 + adamw + activations + loss_chunk; }
};

MemoryEstimate estimate_memory(const Config& c, const ActivationPlan& plan, int64_t trainable,
                               int64_t B, int64_t T, int64_t loss_rows) {
  MemoryEstimate e;
  e.params_bf16 = 2.0 * double(trainable);
  e.master_fp32 = 4.0 * double(trainable);
  e.grads_fp32 = 4.0 * double(trainable);
  e.adamw = 8.0 * double(trainable);
  e.activations_per_layer = double(plan.per_layer_bytes);
  e.activations = double(plan.total_bytes);
  const double rows = std::min(double(loss_rows), double(B) * double(T));
  e.loss_chunk = 2.0 * rows * double(c.model.vocab_size) * 4.0;
  return e;
}

// The teacher of the device budget: --teacher (a preset, random init, or a
// checkpoint directory) or else kd.teacher; none when neither names one.
struct TeacherShape {
  ModelConfig model;
  AttentionConfig attention;
};
std::optional<TeacherShape> teacher_shape(const InfoOptions& o, const Config& c) {
  const std::string teacher = !o.teacher.empty() ? o.teacher : c.kd.teacher;
  if (teacher.empty()) return std::nullopt;
  TeacherShape t;
  if (std::filesystem::is_directory(teacher)) {
    const std::string path = teacher + "/config.json";
    KD_CHECK(std::filesystem::exists(path), "--teacher ", teacher, ": no config.json");
    io::parse_hf_config(read_json_file(path), path, &t.model, &t.attention);
  } else {
    t.model = model_preset(teacher);  // throws naming an unknown preset
  }
  return t;
}

// The device budget of a CUDA run (model/memory_plan.h).
MemoryPlan device_budget(const InfoOptions& o, const Config& c, int64_t B, int64_t T) {
  MemoryPlanInput in;
  in.student = c.model;
  in.attention = c.attention;
  in.micro_batch = B;
  in.seq_len = T;
  in.world_size = o.world_size;
  in.zero1 = c.dist.zero1;
  in.chunk_tokens = c.kd.chunk_tokens;
  in.recompute = recompute_plan(c.train);
  KD_CHECK(o.device_gib > 0, "--device-memory must be positive, got ", o.device_gib);
  in.device_bytes = static_cast<int64_t>(o.device_gib * 1024.0 * 1024.0 * 1024.0);
  if (const std::optional<TeacherShape> t = teacher_shape(o, c)) {
    in.teacher = t->model;
    in.teacher_attention = t->attention;
  }
  return plan_memory(in);
}

// The budget under each recomputation choice (train.recompute at the configured
// train.recompute_layers, then every layer whole), from the same layout pass,
// with the forward FLOPs the backward adds per micro-batch and their share of
// the step's (student 6N + attention, plus the teacher's forward).
struct RecomputeRow {
  std::string name;
  RecomputePlan recompute;
  MemoryPlan budget;
  double added_flops = 0, step_flops = 0;
};

std::vector<RecomputeRow> recompute_rows(const InfoOptions& o, const Config& c, int64_t B, int64_t T) {
  std::vector<RecomputePlan> choices;
  for (const auto& row : Choices<Recompute>::rows) choices.push_back({row.value, c.train.recompute_layers});
  choices.push_back({Recompute::none, c.model.num_hidden_layers});
  std::vector<RecomputeRow> rows;
  for (const RecomputePlan& r : choices) {
    Config with = c;
    with.train.recompute = r.kept;
    with.train.recompute_layers = r.whole_layers;
    RecomputeRow row;
    row.name = std::string(choice_name(r.kept)) +
               (r.whole_layers > 0 ? " + layers:" + std::to_string(r.whole_layers) : "");
    row.recompute = r;
    row.budget = device_budget(o, with, B, T);
    const double tokens = double(B) * double(T);
    row.added_flops = tokens * recompute_flops_per_token(c.model, features_of(c.attention.variant), r, T);
    row.step_flops = tokens * bench::student_train_flops_per_token(c.model, c.attention, T);
    if (const std::optional<TeacherShape> t = teacher_shape(o, c))
      row.step_flops += tokens * bench::teacher_forward_flops_per_token(t->model, t->attention, T);
    rows.push_back(row);
  }
  return rows;
}

// What --checkpoint found, for the report.
struct CheckpointFacts {
  std::string dir, origin, dtype;
  io::WeightsSummary weights;
};

// The config for --checkpoint: defaults, with the model and attention of DIR.
Config config_from_checkpoint(const InfoOptions& o, CheckpointFacts* facts) {
  const CommonOptions& co = o.common;
  KD_CHECK(co.config_path.empty() && co.preset.empty() && co.attention.empty() && co.overrides.empty(),
           "--checkpoint: the model comes from the checkpoint; do not combine it with --config, "
           "--preset, --attention or --set");
  const std::string config_path = o.checkpoint + "/config.json";
  KD_CHECK(std::filesystem::exists(config_path), config_path, ": cannot open (is ", o.checkpoint,
           " a checkpoint directory?)");
  const nlohmann::json doc = read_json_file(config_path);
  Config c;
  io::parse_hf_config(doc, config_path, &c.model, &c.attention);
  facts->dir = o.checkpoint;
  facts->dtype = io::hf_config_dtype(doc);
  const std::string arch = doc.contains("architectures") && doc["architectures"].is_array() &&
                                   !doc["architectures"].empty()
                               ? doc["architectures"][0].get<std::string>()
                               : doc.value("model_type", std::string());
  const std::string model_type = doc.value("model_type", std::string());
  facts->origin = model_type == "kdtrain"                ? "kdtrain export (" + arch + ", trust_remote_code)"
                  : doc.contains("attention_variant") ? std::string("kdtrain checkpoint")
                                                      : "Hugging Face " + arch;
  facts->weights = io::check_model_weights(o.checkpoint, make_param_layout(c.model, c.attention));
  return c;
}

// The attention variant table (config/attention_variant.h) as the scripts read
// it: scripts/kdtrain_hf/variants.py is held equal to this by a test.
void print_variants(bool json) {
  nlohmann::json list = nlohmann::json::array();
  for (const AttentionVariantInfo& v : kAttentionVariants) {
    const AttentionFeatures& f = v.features;
    if (json) {
      list.push_back({{"name", v.name}, {"sink", f.sink}, {"affine", f.affine}, {"gate", f.gate}});
    } else {
      std::printf("%-13s%s%s%s\n", v.name, f.sink ? " sink" : "", f.affine ? " affine" : "",
                  f.gate ? " gate" : "");
    }
  }
  if (json) std::cout << list.dump(2) << "\n";
}

// The preset table (config/presets.h): name, family, layer shape, vocabulary,
// baseline parameters, and where the preset comes from.
void print_presets(bool json) {
  nlohmann::json list = nlohmann::json::array();
  for (const Preset& p : presets()) {
    const ModelConfig m = model_preset(p.name);
    const int64_t params = count_params(make_param_layout(m, AttentionConfig{})).total;
    if (json) {
      list.push_back({{"name", p.name}, {"family", to_string(m.family)}, {"hidden_size", m.hidden_size},
                      {"num_hidden_layers", m.num_hidden_layers}, {"num_attention_heads", m.num_attention_heads},
                      {"num_key_value_heads", m.num_key_value_heads}, {"vocab_size", m.vocab_size},
                      {"total_params", params}, {"about", p.about}});
    } else {
      std::printf("%-13s %-6s %5lld x %-5lld %6.1fM params  %s\n", p.name.c_str(), to_string(m.family),
                  static_cast<long long>(m.num_hidden_layers), static_cast<long long>(m.hidden_size),
                  double(params) / 1e6, p.about.c_str());
    }
  }
  if (json) std::cout << list.dump(2) << "\n";
}

void run_info(const InfoOptions& o) {
  if (o.variants) return print_variants(o.json);
  if (o.presets) return print_presets(o.json);
  const CommonOptions& co = o.common;
  CheckpointFacts facts;
  const Config c = o.checkpoint.empty()
                       ? load_config(co.config_path, co.preset, co.attention, co.overrides)
                       : config_from_checkpoint(o, &facts);
  KD_CHECK(o.micro_batch >= 0, "--micro-batch must be >= 1, got ", o.micro_batch);
  KD_CHECK(o.seq_len >= 0, "--seq-len must be >= 1, got ", o.seq_len);
  const int64_t B = o.micro_batch > 0 ? o.micro_batch : c.train.micro_batch;
  const int64_t T = o.seq_len > 0 ? o.seq_len : c.train.seq_len;

  const ParamLayout layout = make_param_layout(c.model, c.attention);
  const ParamBreakdown p = count_params(layout);
  AttentionConfig base_attention = c.attention;
  base_attention.variant = AttentionVariant::baseline;
  const ParamBreakdown base = count_params(make_param_layout(c.model, base_attention));
  const int64_t delta = p.total - base.total;
  KD_CHECK(o.world_size >= 1, "--world-size must be >= 1, got ", o.world_size);
  const ActivationPlan plan = plan_activations(c.model, features_of(c.attention.variant),
                                               DType::bf16, ModelUse::train, B, T,
                                               recompute_plan(c.train));
  const MemoryPlan budget = device_budget(o, c, B, T);
  const std::vector<RecomputeRow> recompute = recompute_rows(o, c, B, T);
  MemoryEstimate mem = estimate_memory(c, plan, p.total, B, T, budget.loss_chunk_rows);
  // ZeRO-1 (dist.zero1): each rank keeps the moments of its arena shard only;
  // weights, master copy and gradients stay whole on every rank.
  const bool zero1 = c.dist.zero1 && o.world_size > 1;
  const double adamw_all_ranks = mem.adamw;
  if (zero1) {
    int64_t largest = 0;
    for (int r = 0; r < o.world_size; ++r)
      largest = std::max(largest, dist::shard_range(layout.total, r, o.world_size).size());
    mem.adamw = 8.0 * double(std::min(largest, p.total));
  }
  const std::string name =
      !o.checkpoint.empty() ? o.checkpoint : c.model.preset.empty() ? "(custom)" : c.model.preset;

  if (o.json) {
    nlohmann::json j;
    j["preset"] = c.model.preset;
    j["attention"] = to_string(c.attention.variant);
    j["architecture"] = to_json(c)["model"];
    if (!o.checkpoint.empty()) {
      j["checkpoint"] = {{"dir", facts.dir},
                         {"origin", facts.origin},
                         {"torch_dtype", facts.dtype},
                         {"weight_files", facts.weights.files},
                         {"tensor_dtypes", facts.weights.dtype_counts},
                         {"ignored_tensors", facts.weights.ignored}};
    }
    j["components"] = {{"embedding", p.embedding}, {"attention", p.attention},
                       {"variant", p.variant},     {"mlp", p.mlp},
                       {"norms", p.norms},         {"lm_head", p.lm_head}};
    j["total_params"] = p.total;
    j["total_params_m"] = std::stod(millions(p.total));
    j["baseline_params"] = base.total;
    j["delta_params"] = delta;
    j["delta_params_m"] = std::stod(millions(delta));
    j["memory"] = {{"micro_batch", B},
                   {"seq_len", T},
                   {"world_size", o.world_size},
                   {"zero1", zero1},
                   {"params_bf16_mib", mib(mem.params_bf16)},
                   {"master_fp32_mib", mib(mem.master_fp32)},
                   {"grads_fp32_mib", mib(mem.grads_fp32)},
                   {"adamw_mib", mib(mem.adamw)},  // per rank under ZeRO-1
                   {"adamw_all_ranks_mib", mib(adamw_all_ranks)},
                   {"activations_per_layer_mib", mib(mem.activations_per_layer)},
                   {"activations_mib", mib(mem.activations)},
                   {"activation_buffers", activation_buffers_json(plan)},
                   {"loss_chunk_mib", mib(mem.loss_chunk)},
                   {"total_mib", mib(mem.total())}};
    j["device_budget"] = {{"device_gib", o.device_gib},
                          {"student_compute_bytes", budget.student_compute},
                          {"student_master_bytes", budget.student_master},
                          {"student_grads_bytes", budget.student_grads},
                          {"optimizer_bytes", budget.optimizer},
                          {"teacher_weights_bytes", budget.teacher_weights},
                          {"student_activations_bytes", budget.student_activations},
                          {"teacher_activations_bytes", budget.teacher_activations},
                          {"loss_chunk_rows", budget.loss_chunk_rows},
                          {"loss_buffers_bytes", budget.loss_buffers},
                          {"workspace_bytes", budget.workspace},
                          {"total_bytes", budget.total()},
                          {"recompute", to_string(c.train.recompute)},
                          {"recompute_layers", c.train.recompute_layers}};
    nlohmann::json choices = nlohmann::json::array();
    for (const RecomputeRow& r : recompute)
      choices.push_back({{"choice", r.name},
                         {"recompute", to_string(r.recompute.kept)},
                         {"recompute_layers", r.recompute.whole_layers},
                         {"student_activations_bytes", r.budget.student_activations},
                         {"total_bytes", r.budget.total()},
                         {"added_flops_per_micro_batch", r.added_flops},
                         {"added_flops_fraction", r.step_flops > 0 ? r.added_flops / r.step_flops : 0.0}});
    j["recompute_choices"] = choices;
    std::cout << j.dump(2) << "\n";
    return;
  }

  const ModelConfig& m = c.model;
  std::printf("model %s (%s), attention %s\n", name.c_str(), to_string(m.family),
              to_string(c.attention.variant));
  std::printf("  hidden %lld, layers %lld, heads %lld, kv heads %lld, head dim %lld, MLP %lld\n",
              (long long)m.hidden_size, (long long)m.num_hidden_layers,
              (long long)m.num_attention_heads, (long long)m.num_key_value_heads,
              (long long)m.head_dim, (long long)m.intermediate_size);
  std::printf("  vocab %lld, max positions %lld, rope theta %g, rope scaling %s", (long long)m.vocab_size,
              (long long)m.max_position_embeddings, m.rope_theta, to_string(m.rope_scaling.type));
  if (m.rope_scaling.type == RopeScalingType::llama3)
    std::printf(" (factor %g, low %g, high %g, original %lld)", m.rope_scaling.factor,
                m.rope_scaling.low_freq_factor, m.rope_scaling.high_freq_factor,
                (long long)m.rope_scaling.original_max_position_embeddings);
  std::printf("\n  %s embeddings, %s q/k/v bias, rms eps %g\n",
              m.tie_word_embeddings ? "tied" : "untied", m.attention_bias ? "with" : "no",
              m.rms_norm_eps);
  if (!o.checkpoint.empty()) {
    std::printf("checkpoint %s: %s, torch_dtype %s, %zu weight file%s, tensors", facts.dir.c_str(),
                facts.origin.c_str(), facts.dtype.empty() ? "(not given)" : facts.dtype.c_str(),
                facts.weights.files.size(), facts.weights.files.size() == 1 ? "" : "s");
    for (const auto& [dtype, n] : facts.weights.dtype_counts)
      std::printf(" %lld x %s", static_cast<long long>(n), dtype.c_str());
    std::printf("; every tensor present with the expected shape\n");
    for (const std::string& t : facts.weights.ignored)
      std::printf("  ignored %s (a rotary buffer, recomputed)\n", t.c_str());
    if (facts.weights.tied_head_in_file)
      std::printf("  lm_head.weight is stored but ignored: tie_word_embeddings is true\n");
  }
  std::printf("parameters\n");
  auto row = [](const char* label, int64_t n) {
    std::printf("  %-16s %14lld  %9s M\n", label, (long long)n, millions(n).c_str());
  };
  row("embedding", p.embedding);
  row("attention", p.attention);
  row("variant extras", p.variant);
  row("mlp", p.mlp);
  row("norms", p.norms);
  row("lm_head", p.lm_head);
  row("total", p.total);
  std::printf("Δparams %s M (%lld over baseline %lld)\n", millions(delta).c_str(), (long long)delta,
              (long long)base.total);
  std::printf("memory estimate, training on CUDA, micro-batch %lld x seq %lld (MiB)\n", (long long)B,
              (long long)T);
  auto mrow = [](const char* label, double bytes) { std::printf("  %-28s %12.1f\n", label, mib(bytes)); };
  mrow("params bf16", mem.params_bf16);
  mrow("master weights fp32", mem.master_fp32);
  mrow("gradients fp32", mem.grads_fp32);
  if (zero1) {
    mrow("AdamW m, v fp32 per rank", mem.adamw);
    std::printf("    (ZeRO-1 over %d ranks: 1/%d of %.1f MiB; 8 bytes x params / ranks)\n", o.world_size,
                o.world_size, mib(adamw_all_ranks));
  } else {
    mrow("AdamW m, v fp32", mem.adamw);
  }
  mrow("activations (arena)", mem.activations);
  mrow("  per decoder layer", mem.activations_per_layer);
  mrow("fused loss chunk", mem.loss_chunk);
  mrow("total", mem.total());
  const double gib = 1024.0 * 1024.0 * 1024.0;
  std::printf("device memory budget per GPU (CUDA layout, the model's own allocation plan; "
              "%.0f GiB device), GiB\n", o.device_gib);
  auto brow = [&](const char* label, int64_t bytes) {
    std::printf("  %-52s %9.2f\n", label, double(bytes) / gib);
  };
  brow("student weights (bf16 compute copy)", budget.student_compute);
  brow("student master weights (fp32)", budget.student_master);
  brow("student gradients (fp32)", budget.student_grads);
  brow(zero1 ? "AdamW m, v (fp32, this rank's ZeRO-1 shard)" : "AdamW m, v (fp32)", budget.optimizer);
  brow("teacher weights (bf16 only)", budget.teacher_weights);
  brow("student activations (kept per train.recompute)", budget.student_activations);
  brow("teacher activations (one layer, reused)", budget.teacher_activations);
  char loss_label[96];
  std::snprintf(loss_label, sizeof loss_label, "loss chunk (%lld rows of logits x %s)",
                (long long)budget.loss_chunk_rows, budget.teacher_weights ? "2" : "1");
  brow(loss_label, budget.loss_buffers);
  brow("workspace (cuBLASLt, backend buffers)", budget.workspace);
  brow("total", budget.total());
  std::printf("activation recomputation (train.recompute, train.recompute_layers; now %s, %lld), "
              "same budget\n  %-26s %12s %10s %16s\n",
              to_string(c.train.recompute), static_cast<long long>(c.train.recompute_layers), "choice",
              "activations", "total GiB", "added TFLOP/mb");
  for (const RecomputeRow& r : recompute)
    std::printf("  %-26s %12.2f %10.2f %9.2f (%4.1f%%)\n", r.name.c_str(),
                double(r.budget.student_activations) / gib, double(r.budget.total()) / gib,
                r.added_flops / 1e12, r.step_flops > 0 ? 100.0 * r.added_flops / r.step_flops : 0.0);
}

}  // namespace

void register_info(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  auto* command = app.add_subcommand(
      "info", "Print the architecture, parameter counts, ΔParams over baseline and a memory estimate");
  add_common_options(*command, options->common);
  command->add_option("--checkpoint", options->checkpoint,
                      "describe this checkpoint directory (kdtrain or Hugging Face) instead of a config")
      ->transform(normal_path_option());
  command->add_option("--micro-batch", options->micro_batch,
                      "sequences per micro-batch for the memory estimate (default train.micro_batch)");
  command->add_option("--seq-len", options->seq_len,
                      "sequence length for the memory estimate (default train.seq_len)");
  command->add_option("--world-size", options->world_size,
                      "data-parallel ranks: show the per-rank AdamW state under ZeRO-1 (default 1)");
  command->add_option("--teacher", options->teacher,
                      "teacher for the device budget: a preset name or a checkpoint directory "
                      "(default kd.teacher)");
  command->add_option("--device-memory", options->device_gib,
                      "device memory in GiB the auto loss chunk is sized against (default 80)");
  command->add_flag("--json", options->json, "print JSON instead of text");
  command->add_flag("--variants", options->variants,
                    "list the attention variants and the features each switches on");
  command->add_flag("--presets", options->presets,
                    "list the model presets: family, layers x hidden, parameters, source");
  command->callback([options] { run_info(*options); });
}

}  // namespace kdtrain::cli
