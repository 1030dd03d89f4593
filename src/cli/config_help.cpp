#include "cli/config_help.h"

#include <algorithm>
#include <cstdio>

#include "config/config.h"

namespace kdtrain::cli {

const std::vector<HelpLine>& config_sections() {
  static const std::vector<HelpLine> sections = {
      {"model", "the architecture, as in a Hugging Face config.json (usually from model.preset)"},
      {"attention", "the attention variant and its parameters (alpha, sinks)"},
      {"kd", "the teacher (online or a top-k cache) and the distillation loss"},
      {"optimizer", "AdamW: learning rate, betas, weight decay, gradient clipping"},
      {"schedule", "the learning-rate schedule: warmup, then wsd, cosine or constant"},
      {"data", "training and validation token shards (paths or globs)"},
      {"train", "steps, batch sizes, sequence length, seed, device"},
      {"checkpoint", "how often checkpoints are written and how many are kept"},
      {"log", "how often a progress line is printed"},
      {"eval", "how often validation runs and on how many batches"},
      {"dist", "data parallelism: optimizer-state sharding, rank timeout"},
  };
  return sections;
}

const std::vector<HelpLine>& config_keys() {
  static const std::vector<HelpLine> keys = {
      {"model.preset", "named architecture filling the model section (\"\" = none)"},
      {"model.init", "checkpoint directory to initialise the weights from (\"\" = random init)"},
      {"model.family", "llama or qwen2: the Hugging Face architecture used on export"},
      {"model.hidden_size", "width of the residual stream"},
      {"model.intermediate_size", "width of the SwiGLU MLP"},
      {"model.num_hidden_layers", "decoder layers"},
      {"model.num_attention_heads", "query heads"},
      {"model.num_key_value_heads", "key/value heads (grouped-query attention)"},
      {"model.head_dim", "dimension of one head (even)"},
      {"model.vocab_size", "rows of the embedding and the output head"},
      {"model.max_position_embeddings", "longest sequence the model accepts"},
      {"model.rms_norm_eps", "epsilon of RMSNorm"},
      {"model.rope_theta", "RoPE base"},
      {"model.rope_scaling.type", "default (no scaling) or llama3"},
      {"model.rope_scaling.factor", "llama3 RoPE scaling factor"},
      {"model.rope_scaling.low_freq_factor", "llama3 RoPE low-frequency factor"},
      {"model.rope_scaling.high_freq_factor", "llama3 RoPE high-frequency factor"},
      {"model.rope_scaling.original_max_position_embeddings", "llama3 RoPE original context length"},
      {"model.tie_word_embeddings", "the output head shares the embedding matrix"},
      {"model.attention_bias", "bias on the q/k/v projections (Qwen)"},
      {"model.initializer_range", "standard deviation of the random initialisation"},
      {"attention.variant", "the attention variant (kdtrain info --variants lists them)"},
      {"attention.alpha_activation", "linear_clip or sigmoid (affine variants)"},
      {"attention.alpha_momentum", "rho of the running mean alpha_ma (affine variants)"},
      {"attention.sink_init_std", "standard deviation of the initial sinks (sink variant)"},
      {"kd.teacher", "teacher checkpoint directory (\"\" = no teacher: CE only)"},
      {"kd.teacher_cache", "directory of precomputed top-k teacher logits (not with kd.teacher)"},
      {"kd.cache_tail", "renormalize or bucket: the teacher mass outside the cached top k"},
      {"kd.loss", "forward_kl, reverse_kl or soft_ce"},
      {"kd.temperature", "softmax temperature of teacher and student in the KD term"},
      {"kd.weight", "loss = weight * KD + (1 - weight) * CE"},
      {"kd.chunk_tokens", "rows per fused loss chunk (memory, not results)"},
      {"optimizer.lr", "peak learning rate"},
      {"optimizer.beta1", "AdamW first-moment decay"},
      {"optimizer.beta2", "AdamW second-moment decay"},
      {"optimizer.eps", "AdamW epsilon"},
      {"optimizer.weight_decay", "decoupled weight decay (matrices only)"},
      {"optimizer.grad_clip", "global gradient-norm clip (<= 0: none)"},
      {"schedule.kind", "wsd, cosine or constant"},
      {"schedule.warmup", "linear warmup steps (clamped to train.steps, with a notice)"},
      {"schedule.decay_fraction", "wsd: share of the steps spent decaying"},
      {"schedule.decay_shape", "wsd: linear, cosine or 1-sqrt"},
      {"schedule.min_lr_ratio", "final learning rate as a fraction of optimizer.lr"},
      {"data.train", "training shards: paths or globs"},
      {"data.val", "validation shards: paths or globs ([] = no validation)"},
      {"train.steps", "optimizer steps of the whole run"},
      {"train.global_batch", "sequences per optimizer step (all ranks)"},
      {"train.micro_batch", "sequences per forward/backward on one rank"},
      {"train.seq_len", "tokens per training sequence"},
      {"train.seed", "seed of initialisation and data order"},
      {"train.device", "cpu or cuda"},
      {"train.on_nonfinite", "stop or skip a step with a NaN/inf loss or gradient"},
      {"train.max_consecutive_skips", "with on_nonfinite=skip: skipped steps in a row that stop the run"},
      {"train.threads", "CPU threads (0 = all cores)"},
      {"checkpoint.interval", "steps between checkpoints (0 = only at the end)"},
      {"checkpoint.keep", "most recent checkpoints kept"},
      {"log.interval", "steps between progress lines"},
      {"eval.interval", "steps between validation passes (0 = only at the end)"},
      {"eval.batches", "validation micro-batches per pass"},
      {"dist.backend", "auto, single, mpi (cpu) or nccl (cuda): the communicator"},
      {"dist.zero1", "shard the AdamW state across ranks"},
      {"dist.timeout_s", "seconds a rank may be silent before the job aborts"},
      {"dist.bucket_mb", "MiB of fp32 gradients per reduction bucket"},
      {"dist.overlap", "reduce each bucket during the backward as soon as it is final"},
      {"dist.reduce_dtype", "fp32 or bf16: the dtype gradients travel in (bf16 sums in fp32)"},
  };
  return keys;
}

namespace {

void flatten_into(const nlohmann::json& node, const std::string& prefix,
                  std::vector<std::pair<std::string, nlohmann::json>>& out) {
  if (!node.is_object()) {
    out.emplace_back(prefix, node);
    return;
  }
  for (const auto& [key, value] : node.items())
    flatten_into(value, prefix.empty() ? key : prefix + "." + key, out);
}

}  // namespace

std::vector<std::pair<std::string, nlohmann::json>> flatten_config(const nlohmann::json& doc) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  flatten_into(doc, "", out);
  return out;
}

std::string config_key_table() {
  const auto defaults = flatten_config(to_json(Config{}));
  auto default_of = [&](const std::string& key) -> std::string {
    for (const auto& [k, v] : defaults)
      if (k == key) return v.dump();
    return "?";
  };
  size_t key_width = 0, value_width = 0;
  for (const HelpLine& k : config_keys()) {
    key_width = std::max(key_width, std::string(k.name).size());
    value_width = std::max(value_width, default_of(k.name).size());
  }
  std::string text;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s  %-*s  %s\n", static_cast<int>(key_width), "key",
                static_cast<int>(value_width), "default", "meaning");
  text += buf;
  for (const HelpLine& k : config_keys()) {
    std::snprintf(buf, sizeof buf, "%-*s  %-*s  %s\n", static_cast<int>(key_width), k.name,
                  static_cast<int>(value_width), default_of(k.name).c_str(), k.meaning);
    text += buf;
  }
  text +=
      "\nSet any key in a JSON config file ({\"optimizer\": {\"lr\": 3e-4}}) or on the command line "
      "(--set optimizer.lr=3e-4).\nmodel.* defaults of 0 must be set, usually by model.preset or "
      "--preset. Types, ranges and the precedence of layers: docs/config.md.\n";
  return text;
}

std::string config_sections_text() {
  std::string text = "Config sections (JSON objects; set a key with --set section.key=value):\n";
  char buf[256];
  for (const HelpLine& s : config_sections()) {
    std::snprintf(buf, sizeof buf, "  %-11s %s\n", s.name, s.meaning);
    text += buf;
  }
  text +=
      "Every key with its default and meaning: kdtrain config --list\n"
      "The config a command line resolves to:  kdtrain config --dump [--config F] [--set k=v ...]\n"
      "Types, ranges, precedence: docs/config.md";
  return text;
}

}  // namespace kdtrain::cli
