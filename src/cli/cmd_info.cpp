// kdtrain info: architecture, parameter counts per component, the Δ over the
// baseline of the same model (the paper's ΔParams column), and the memory plan of
// a training run (model/memory_plan.h). Every count comes from the parameter table
// (make_param_layout) and the allocation plans, so info can never disagree with
// what the trainer allocates. With --checkpoint DIR
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
#include "config/config.h"
#include "config/limits.h"
#include "config/presets.h"
#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/file_util.h"
#include "io/hf_checkpoint.h"
#include "bench/bench.h"
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

// --device-memory: 1 MiB to 1 PiB, so the byte count (GiB x 2^30) fits int64.
constexpr double kMinDeviceGib = 1.0 / 1024, kMaxDeviceGib = 1 << 20;

// Millions with one decimal, as the paper prints ΔParams.
std::string millions(int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", double(n) / 1e6);
  return buf;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// The teacher of the memory plan: --teacher (a preset, random init, or a
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

// The memory plan of a CUDA run (bf16 layout) on --world-size ranks of a
// --device-memory device, at micro-batch B and sequence length T.
MemoryPlan cuda_memory_plan(const InfoOptions& o, const Config& c, int64_t B, int64_t T) {
  MemoryPlanInput in = memory_plan_input(c);
  in.micro_batch = B;
  in.seq_len = T;
  in.world_size = o.world_size;
  KD_CHECK(o.device_gib > 0, "--device-memory must be positive, got ", o.device_gib);
  in.device_bytes = static_cast<int64_t>(o.device_gib * 1024.0 * 1024.0 * 1024.0);
  if (const std::optional<TeacherShape> t = teacher_shape(o, c)) {
    in.teacher = t->model;
    in.teacher_attention = t->attention;
  }
  return plan_memory(in);
}

// The plan under each recomputation choice (train.recompute at the configured
// train.recompute_layers, then every layer whole), from the same layout pass,
// with the forward FLOPs the backward adds per micro-batch and their share of
// the step's (student 6N + attention, plus the teacher's forward).
struct RecomputeRow {
  std::string name;
  RecomputePlan recompute;
  MemoryPlan plan;
  double added_flops = 0, step_flops = 0;
};

std::vector<RecomputeRow> recompute_rows(const InfoOptions& o, const Config& c, int64_t B, int64_t T) {
  std::vector<RecomputePlan> choices;
  for (const auto& row : Choices<Recompute>::rows) choices.push_back({row.value, c.train.recompute_layers});
  choices.push_back({Recompute::none, c.model.num_hidden_layers});
  const std::optional<TeacherShape> teacher = teacher_shape(o, c);
  std::vector<RecomputeRow> rows;
  for (const RecomputePlan& r : choices) {
    Config with = c;
    with.train.recompute = r.kept;
    with.train.recompute_layers = r.whole_layers;
    RecomputeRow row;
    row.name = std::string(choice_name(r.kept)) +
               (r.whole_layers > 0 ? " + layers:" + std::to_string(r.whole_layers) : "");
    row.recompute = r;
    row.plan = cuda_memory_plan(o, with, B, T);
    const double tokens = double(B) * double(T);
    row.added_flops = tokens * recompute_flops_per_token(c.model, features_of(c.attention), r, T);
    row.step_flops = tokens * bench::student_train_flops_per_token(c.model, c.attention, T);
    if (teacher) row.step_flops += tokens * bench::teacher_forward_flops_per_token(teacher->model, teacher->attention, T);
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

// What `kdtrain info` reports on a model, computed once for both printers.
struct InfoReport {
  Config config;
  std::string name;  // the checkpoint, the preset or "(custom)"
  std::optional<CheckpointFacts> checkpoint;
  ParamBreakdown params, baseline;
  int64_t delta = 0;  // params.total - baseline.total: the paper's ΔParams
  double device_gib = 0;
  MemoryPlan memory;
  std::vector<RecomputeRow> recompute;
};

InfoReport make_info_report(const InfoOptions& o) {
  const CommonOptions& co = o.common;
  InfoReport r;
  CheckpointFacts facts;
  r.config = o.checkpoint.empty() ? load_config(co.config_path, co.preset, co.attention, co.overrides)
                                  : config_from_checkpoint(o, &facts);
  if (!o.checkpoint.empty()) r.checkpoint = facts;
  const Config& c = r.config;
  KD_CHECK(o.micro_batch >= 0, "--micro-batch must be >= 1, got ", o.micro_batch);
  KD_CHECK(o.seq_len >= 0, "--seq-len must be >= 1, got ", o.seq_len);
  KD_CHECK(o.world_size >= 1, "--world-size must be >= 1, got ", o.world_size);
  const int64_t B = o.micro_batch > 0 ? o.micro_batch : c.train.micro_batch;
  const int64_t T = o.seq_len > 0 ? o.seq_len : c.train.seq_len;
  r.name = !o.checkpoint.empty() ? o.checkpoint : c.model.preset.empty() ? "(custom)" : c.model.preset;
  r.params = count_params(make_param_layout(c.model, c.attention));
  AttentionConfig base_attention = c.attention;
  base_attention.variant = AttentionVariant::baseline;
  r.baseline = count_params(make_param_layout(c.model, base_attention));
  r.delta = r.params.total - r.baseline.total;
  r.device_gib = o.device_gib;
  r.memory = cuda_memory_plan(o, c, B, T);
  r.recompute = recompute_rows(o, c, B, T);
  return r;
}

void print_info_json(const InfoReport& r) {
  const Config& c = r.config;
  const ParamBreakdown& p = r.params;
  nlohmann::json j;
  j["preset"] = c.model.preset;
  j["attention"] = to_string(c.attention.variant);
  j["architecture"] = to_json(c)["model"];
  if (r.checkpoint) {
    const CheckpointFacts& f = *r.checkpoint;
    j["checkpoint"] = {{"dir", f.dir},
                       {"origin", f.origin},
                       {"torch_dtype", f.dtype},
                       {"weight_files", f.weights.files},
                       {"tensor_dtypes", f.weights.dtype_counts},
                       {"ignored_tensors", f.weights.ignored}};
  }
  j["components"] = {{"embedding", p.embedding}, {"attention", p.attention}, {"variant", p.variant},
                     {"mlp", p.mlp},             {"norms", p.norms},         {"lm_head", p.lm_head}};
  j["total_params"] = p.total;
  j["total_params_m"] = std::stod(millions(p.total));
  j["baseline_params"] = r.baseline.total;
  j["delta_params"] = r.delta;
  j["delta_params_m"] = std::stod(millions(r.delta));
  nlohmann::json memory = to_json(r.memory);
  memory["device_gib"] = r.device_gib;
  memory["recompute"] = to_string(c.train.recompute);
  memory["recompute_layers"] = c.train.recompute_layers;
  nlohmann::json choices = nlohmann::json::array();
  for (const RecomputeRow& row : r.recompute)
    choices.push_back({{"choice", row.name},
                       {"recompute", to_string(row.recompute.kept)},
                       {"recompute_layers", row.recompute.whole_layers},
                       {"student_activations_bytes", row.plan.student_activations},
                       {"total_bytes", row.plan.total()},
                       {"added_flops_per_micro_batch", row.added_flops},
                       {"added_flops_fraction", row.step_flops > 0 ? row.added_flops / row.step_flops : 0.0}});
  memory["recompute_choices"] = choices;
  j["memory"] = memory;
  std::cout << j.dump(2) << "\n";
}

void print_architecture(const InfoReport& r) {
  const ModelConfig& m = r.config.model;
  std::printf("model %s (%s), attention %s\n", r.name.c_str(), to_string(m.family),
              to_string(r.config.attention.variant));
  std::printf("  hidden %lld, layers %lld, heads %lld, kv heads %lld, head dim %lld, MLP %lld\n",
              (long long)m.hidden_size, (long long)m.num_hidden_layers, (long long)m.num_attention_heads,
              (long long)m.num_key_value_heads, (long long)m.head_dim, (long long)m.intermediate_size);
  std::printf("  vocab %lld, max positions %lld, rope theta %g, rope scaling %s", (long long)m.vocab_size,
              (long long)m.max_position_embeddings, m.rope_theta, to_string(m.rope_scaling.type));
  if (m.rope_scaling.type == RopeScalingType::llama3)
    std::printf(" (factor %g, low %g, high %g, original %lld)", m.rope_scaling.factor,
                m.rope_scaling.low_freq_factor, m.rope_scaling.high_freq_factor,
                (long long)m.rope_scaling.original_max_position_embeddings);
  std::printf("\n  %s embeddings, %s q/k/v bias, rms eps %g\n", m.tie_word_embeddings ? "tied" : "untied",
              m.attention_bias ? "with" : "no", m.rms_norm_eps);
  if (!r.checkpoint) return;
  const CheckpointFacts& f = *r.checkpoint;
  std::printf("checkpoint %s: %s, torch_dtype %s, %zu weight file%s, tensors", f.dir.c_str(), f.origin.c_str(),
              f.dtype.empty() ? "(not given)" : f.dtype.c_str(), f.weights.files.size(),
              f.weights.files.size() == 1 ? "" : "s");
  for (const auto& [dtype, n] : f.weights.dtype_counts) std::printf(" %lld x %s", static_cast<long long>(n), dtype.c_str());
  std::printf("; every tensor present with the expected shape\n");
  for (const std::string& t : f.weights.ignored) std::printf("  ignored %s (a rotary buffer, recomputed)\n", t.c_str());
  if (f.weights.tied_head_in_file) std::printf("  lm_head.weight is stored but ignored: tie_word_embeddings is true\n");
}

void print_params(const InfoReport& r) {
  const ParamBreakdown& p = r.params;
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
  std::printf("Δparams %s M (%lld over baseline %lld)\n", millions(r.delta).c_str(), (long long)r.delta,
              (long long)r.baseline.total);
}

void print_memory(const InfoReport& r) {
  const MemoryPlan& plan = r.memory;
  const MemoryPlanInput& in = plan.input;
  std::printf("memory plan, training on CUDA (bf16 layout, the model's own allocation plan), micro-batch %lld x "
              "seq %lld, %.0f GiB device\n",
              (long long)in.micro_batch, (long long)in.seq_len, r.device_gib);
  for (const std::string& line : memory_plan_lines(to_json(plan))) std::printf("%s\n", line.c_str());
  std::printf("  (student activations: %.1f MiB per decoder layer kept; AdamW for all ranks %.1f MiB)\n",
              mib(double(plan.student_activation_plan.per_layer_bytes)), mib(double(plan.optimizer_all_ranks)));
  const TrainConfig& t = r.config.train;
  std::printf("activation recomputation (train.recompute, train.recompute_layers; now %s, %lld), same plan\n"
              "  %-26s %15s %13s %16s\n",
              to_string(t.recompute), static_cast<long long>(t.recompute_layers), "choice", "activations MiB",
              "total MiB", "added TFLOP/mb");
  for (const RecomputeRow& row : r.recompute)
    std::printf("  %-26s %15.1f %13.1f %9.2f (%4.1f%%)\n", row.name.c_str(), mib(double(row.plan.student_activations)),
                mib(double(row.plan.total())), row.added_flops / 1e12,
                row.step_flops > 0 ? 100.0 * row.added_flops / row.step_flops : 0.0);
}

void run_info(const InfoOptions& o) {
  if (o.variants) return print_variants(o.json);
  if (o.presets) return print_presets(o.json);
  const InfoReport report = make_info_report(o);
  if (o.json) return print_info_json(report);
  print_architecture(report);
  print_params(report);
  print_memory(report);
}

}  // namespace

void register_info(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  auto* command = app.add_subcommand(
      "info", "Print the architecture, parameter counts, ΔParams over baseline and the memory plan");
  add_common_options(*command, options->common);
  command->add_option("--checkpoint", options->checkpoint,
                      "describe this checkpoint directory (kdtrain or Hugging Face) instead of a config")
      ->transform(normal_path_option());
  command->add_option("--micro-batch", options->micro_batch,
                      "sequences per micro-batch for the memory plan (default train.micro_batch)")
      ->check(in_range<int64_t>(1, SizeLimits::batch));
  command->add_option("--seq-len", options->seq_len,
                      "sequence length for the memory plan (default train.seq_len)")
      ->check(in_range<int64_t>(1, SizeLimits::seq_len));
  command->add_option("--world-size", options->world_size,
                      "data-parallel ranks: show the per-rank AdamW state under ZeRO-1 (default 1)")
      ->check(in_range<int>(1, SizeLimits::ranks));
  command->add_option("--teacher", options->teacher,
                      "teacher for the memory plan: a preset name or a checkpoint directory "
                      "(default kd.teacher)");
  command->add_option("--device-memory", options->device_gib,
                      "device memory in GiB the auto loss chunk is sized against (default 80)")
      ->check(in_range<double>(kMinDeviceGib, kMaxDeviceGib));
  command->add_flag("--json", options->json, "print JSON instead of text");
  command->add_flag("--variants", options->variants,
                    "list the attention variants and the features each switches on");
  command->add_flag("--presets", options->presets,
                    "list the model presets: family, layers x hidden, parameters, source");
  command->callback([options] { run_info(*options); });
}

}  // namespace kdtrain::cli
