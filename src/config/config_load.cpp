// Resolving the final config (defaults -> preset -> file -> --attention -> --set)
// and the cross-field checks no single key can make on its own.
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "config/limits.h"
#include "core/error.h"
#include "core/read_file.h"

namespace kdtrain {

using nlohmann::json;

void validate(const Config& c, int world_size) {
  const ModelConfig& m = c.model;
  const char* hint = " (set model.preset or give the size)";
  KD_CHECK(m.hidden_size > 0, "model.hidden_size is not set", hint);
  KD_CHECK(m.intermediate_size > 0, "model.intermediate_size is not set", hint);
  KD_CHECK(m.num_hidden_layers > 0, "model.num_hidden_layers is not set", hint);
  KD_CHECK(m.num_attention_heads > 0, "model.num_attention_heads is not set", hint);
  KD_CHECK(m.num_key_value_heads > 0, "model.num_key_value_heads is not set", hint);
  KD_CHECK(m.head_dim > 0, "model.head_dim is not set", hint);
  KD_CHECK(m.vocab_size > 0, "model.vocab_size is not set", hint);
  check_run_limits(c);
  KD_CHECK(m.num_attention_heads % m.num_key_value_heads == 0,
           "model.num_attention_heads (", m.num_attention_heads,
           ") must be a multiple of model.num_key_value_heads (", m.num_key_value_heads, ")");
  KD_CHECK(m.head_dim % 2 == 0, "model.head_dim (", m.head_dim, ") must be even for RoPE");
  if (m.rope_scaling.type == RopeScalingType::llama3)
    KD_CHECK(m.rope_scaling.high_freq_factor > m.rope_scaling.low_freq_factor,
             "model.rope_scaling.high_freq_factor (", m.rope_scaling.high_freq_factor,
             ") must exceed model.rope_scaling.low_freq_factor (", m.rope_scaling.low_freq_factor,
             ")");

  const TrainConfig& t = c.train;
  KD_CHECK(world_size >= 1, "world size must be >= 1, got ", world_size);
  KD_CHECK(t.steps >= 1, "train.steps must be >= 1, got ", t.steps);
  KD_CHECK(t.micro_batch >= 1, "train.micro_batch must be >= 1, got ", t.micro_batch);
  KD_CHECK(t.seq_len >= 1, "train.seq_len must be >= 1, got ", t.seq_len);
  KD_CHECK(t.seq_len <= m.max_position_embeddings, "train.seq_len (", t.seq_len,
           ") exceeds model.max_position_embeddings (", m.max_position_embeddings,
           "): the model has no positions beyond it");
  const int64_t per_step = t.micro_batch * world_size;
  KD_CHECK(t.global_batch % per_step == 0, "train.global_batch (", t.global_batch,
           ") must be a multiple of train.micro_batch (", t.micro_batch, ") x world size (",
           world_size, ") = ", per_step);
  if (c.schedule.kind == ScheduleKind::wsd)
    KD_CHECK(c.schedule.warmup <= t.steps, "schedule.warmup (", c.schedule.warmup,
             ") must not exceed train.steps (", t.steps, ") for the wsd schedule");

  KD_CHECK(c.kd.teacher.empty() || c.kd.teacher_cache.empty(),
           "kd.teacher and kd.teacher_cache are both set; choose one");
}

std::string clamp_warmup(Config& c) {
  const int64_t warmup = c.schedule.warmup, steps = c.train.steps;
  if (warmup <= steps || steps < 1) return "";
  c.schedule.warmup = steps;
  return "schedule.warmup (" + std::to_string(warmup) + ") is longer than the run (train.steps " +
         std::to_string(steps) + "): warmup clamped to " + std::to_string(steps) +
         " steps; pass --set schedule.warmup=N (N <= " + std::to_string(steps) + ") to choose it";
}

Config load_config(const std::string& config_path, const std::string& preset,
                   const std::string& attention, const std::vector<std::string>& overrides) {
  Config c;
  if (!preset.empty()) {
    try {
      c.model = model_preset(preset);
    } catch (const Error& e) {
      fail("--preset: ", e.what());
    }
  }
  if (!config_path.empty()) {
    json doc = read_json_file(config_path);
    // --preset wins over the file's model.preset; the file's other model keys still apply.
    // The file's preset is still checked, so a typo there is reported even when overridden.
    if (!preset.empty() && doc.is_object() && doc.contains("model") && doc["model"].is_object()) {
      json& model = doc["model"];
      if (model.contains("preset")) {
        Config scratch;
        apply_json(scratch, json{{"model", {{"preset", model["preset"]}}}}, config_path);
        model.erase("preset");
      }
    }
    apply_json(c, doc, config_path);
  }
  if (!attention.empty()) {
    try {
      c.attention.variant = parse_attention_variant(attention);
    } catch (const Error& e) {
      fail("--attention: ", e.what());
    }
  }
  for (const std::string& assignment : overrides) apply_override(c, assignment);
  const std::string notice = clamp_warmup(c);
  if (!notice.empty()) spdlog::warn("{}", notice);
  try {
    validate(c, 1);
  } catch (const Error& e) {
    const std::string where = config_path.empty() ? "config" : config_path;
    fail(where, " (after presets and overrides): ", e.what());
  }
  return c;
}

}  // namespace kdtrain
