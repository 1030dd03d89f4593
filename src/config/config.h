// The run configuration: one struct per JSON section, fields named as the keys.
// Precedence is CLI (--set, --attention, --preset) > config file > preset > defaults.
// Each key's type, accepted values and meaning are spelled once, beside the
// visit of its section (config_fields.h); parsing rejects unknown keys, wrong
// types and out-of-range values, naming the key path (e.g. "optimizer.lr") and
// the file. Every closed choice is an enum (choices.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/choices.h"

namespace kdtrain {

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Architecture, mirroring the Hugging Face config.json of LLaMA / Qwen2 models.
struct ModelConfig {
  std::string preset;        // preset the fields came from ("" when given field by field)
  std::string init;          // checkpoint directory to initialise from ("" = random init)
  ModelFamily family = ModelFamily::llama;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = true;
  bool attention_bias = false;  // bias on q/k/v projections (Qwen)
  double initializer_range = 0.02;
};

struct AttentionConfig {
  AttentionVariant variant = AttentionVariant::baseline;
  AlphaActivation alpha_activation = AlphaActivation::linear_clip;
  // N of beta = (alpha_ma - alpha)/N. A checkpoint whose config.json lacks the key
  // predates it and reads as `visible` (io/checkpoint_format.cpp).
  AffineBiasDivisor affine_bias_divisor = AffineBiasDivisor::sequence;
  // N of `sequence` outside training. A checkpoint without the key reads as the default.
  AffineInferenceN affine_inference_n = AffineInferenceN::train_length;
  // Not a config key: the train.seq_len the weights trained at (0 = unknown), which a
  // checkpoint records (io/checkpoint_format.h); training leaves it 0 (N = T = train.seq_len).
  int64_t affine_train_length = 0;
  double alpha_momentum = 0.9;  // rho in alpha_ma <- rho*alpha_ma + (1-rho)*mean(alpha)
  double sink_init_std = 0.02;  // sinks ~ N(0, std), see docs/model.md
};

// The features of the configured variant, with the configured affine divisor and, under
// `sequence` with affine_inference_n train_length, N fixed at the recorded training length
// (none recorded: the call's keys): resolved once, read everywhere below the config.
inline AttentionFeatures features_of(const AttentionConfig& a) {
  AttentionFeatures f = features_of(a.variant, a.affine_bias_divisor);
  if (f.affine && a.affine_bias_divisor == AffineBiasDivisor::sequence &&
      a.affine_inference_n == AffineInferenceN::train_length)
    f.bias_keys = a.affine_train_length;
  return f;
}

struct KdConfig {
  std::string teacher;  // checkpoint directory; "" = no teacher (CE only)
  std::string teacher_cache;  // precomputed top-k teacher logits directory ("" = none)
  CacheTail cache_tail = CacheTail::renormalize;
  int64_t cache_verify_threads = 0;  // 0 = auto (data/teacher_cache_verifier.h, verify_threads)
  KdLoss loss = KdLoss::forward_kl;
  double temperature = 1.0;
  double weight = 1.0;  // loss = weight*KD + (1-weight)*CE
  int64_t chunk_tokens = 0;  // tokens per fused loss chunk; 0 = auto (model/loss.h)
};

struct OptimizerConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0 disables clipping
};

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::wsd;
  int64_t warmup = 100;
  double decay_fraction = 0.2;  // wsd: fraction of steps spent decaying
  DecayShape decay_shape = DecayShape::linear;
  double min_lr_ratio = 0.0;    // final lr as a fraction of optimizer.lr
};

struct DataConfig {
  std::vector<std::string> train;  // shard paths or globs
  std::vector<std::string> val;
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch = 8;  // sequences per optimizer step
  int64_t micro_batch = 8;   // sequences per forward/backward on one rank
  int64_t seq_len = 128;
  uint64_t seed = 1234;
  Device device = Device::cpu;
  NonFinitePolicy on_nonfinite = NonFinitePolicy::stop;
  int64_t max_consecutive_skips = 10;  // on_nonfinite=skip: this many skipped steps in a row stop the run
  int64_t threads = 0;  // CPU threads, 0 = all cores
  Recompute recompute = Recompute::norms;  // model/activations.h
  int64_t recompute_layers = 0;            // layers 0..K-1 recomputed whole in the backward
  AttentionForward attention_forward = AttentionForward::auto_select;     // CUDA only
  AttentionBackward attention_backward = AttentionBackward::auto_select;  // CUDA only
};

struct CheckpointConfig {
  int64_t interval = 0;  // steps between checkpoints, 0 = only at the end
  int64_t keep = 3;      // keep the last K checkpoints
};

struct LogConfig {
  int64_t interval = 1;
  int64_t logit_mean_interval = 0;  // attn_logit_mean_abs_all every N steps; 0 = with validation only
};

struct EvalConfig {
  int64_t interval = 0;   // steps between validation passes, 0 = only at the end
  int64_t batches = 4;    // validation micro-batches per pass
};

struct DistConfig {
  DistBackend backend = DistBackend::auto_select;  // dist/communicator.h
  bool zero1 = true;            // shard optimizer state across ranks
  double timeout_s = 300.0;     // a rank silent this long aborts the job
  double bucket_mb = 100.0;     // MiB of fp32 gradients per bucket (the scaling model's choice)
  bool overlap = true;          // reduce buckets during the backward pass
  ReduceDtype reduce_dtype = ReduceDtype::fp32;  // bf16: half the bytes, fp32 sums
};

struct Config {
  ModelConfig model;
  AttentionConfig attention;
  KdConfig kd;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  DataConfig data;
  TrainConfig train;
  CheckpointConfig checkpoint;
  LogConfig log;
  EvalConfig eval;
  DistConfig dist;
};

// The presets of docs/model.md plus the tiny test presets ("tiny-llama", "tiny-qwen").
std::vector<std::string> preset_names();
ModelConfig model_preset(const std::string& name);  // throws listing the known names

// Applies a JSON document onto `config` (only keys present change).
// `source` names the file in error messages.
void apply_json(Config& config, const nlohmann::json& doc, const std::string& source);
// Applies one "section.key=value" override; the value is parsed as JSON when it
// parses, else taken as a string.
void apply_override(Config& config, const std::string& assignment);
// Cross-field checks (heads divide hidden, batch divisibility, ...); throws naming the key.
void validate(const Config& config, int world_size = 1);
nlohmann::json to_json(const Config& config);
// A schedule.warmup longer than train.steps becomes train.steps, so a short run
// of a long config needs no schedule override. Returns the notice to log ("" when
// nothing changed).
std::string clamp_warmup(Config& config);

// One key of the config, for listings (`kdtrain config --list`), as
// config_fields.h declares it.
struct ConfigKey {
  std::string path;            // "optimizer.lr"
  std::string type;            // integer, number, boolean, string, choice, string list, preset (section)
  std::string accepts;         // "(0, inf)", ">= 1", "wsd, cosine, constant", ...
  nlohmann::json default_value;  // the value in a default Config
  std::string meaning;         // one line
};
// Every key, nested ones as "model.rope_scaling.factor", in the order of a config file.
std::vector<ConfigKey> describe_config_keys();
// The top-level sections ("model", "attention", ...) in the same order, with their meaning.
std::vector<ConfigKey> describe_config_sections();

// The model keys a Hugging Face config.json shares with ModelConfig (every
// integer, number and boolean key of the model section): read from `doc` where
// present, with the config reader's type and range checks, every other key of
// `doc` ignored; and written the same way.
void apply_model_keys(ModelConfig& model, const nlohmann::json& doc, const std::string& source);
nlohmann::json model_keys_json(const ModelConfig& model);

// Resolves the final config: defaults, then model.preset (from the file or `preset`),
// then the file, then overrides; then clamp_warmup (its notice is logged).
// Empty strings mean "not given".
Config load_config(const std::string& config_path, const std::string& preset,
                   const std::string& attention, const std::vector<std::string>& overrides);

}  // namespace kdtrain
