#include "config/limits.h"

#include <cstdio>

#include "core/error.h"

namespace kdtrain {

namespace {

void at_most(int64_t value, int64_t limit, const std::string& key, const std::string& source) {
  if (value <= limit) return;
  fail(source.empty() ? "" : source + ": ", key, " = ", value, " exceeds kdtrain's limit of ", limit,
       " (docs/reliability.md lists the size limits)");
}

}  // namespace

void check_model_limits(const ModelConfig& m, const std::string& source, const std::string& prefix) {
  at_most(m.hidden_size, SizeLimits::hidden_size, prefix + "hidden_size", source);
  at_most(m.intermediate_size, SizeLimits::intermediate_size, prefix + "intermediate_size", source);
  at_most(m.num_hidden_layers, SizeLimits::layers, prefix + "num_hidden_layers", source);
  at_most(m.num_attention_heads, SizeLimits::heads, prefix + "num_attention_heads", source);
  at_most(m.num_key_value_heads, SizeLimits::heads, prefix + "num_key_value_heads", source);
  at_most(m.head_dim, SizeLimits::head_dim, prefix + "head_dim", source);
  at_most(m.vocab_size, SizeLimits::vocab_size, prefix + "vocab_size", source);
  at_most(m.max_position_embeddings, SizeLimits::positions, prefix + "max_position_embeddings", source);
  at_most(m.rope_scaling.original_max_position_embeddings, SizeLimits::positions,
          prefix + "rope_scaling.original_max_position_embeddings", source);
}

void check_run_limits(const Config& c) {
  check_model_limits(c.model, "", "model.");
  const TrainConfig& t = c.train;
  at_most(t.steps, SizeLimits::steps, "train.steps", "");
  at_most(t.global_batch, SizeLimits::batch, "train.global_batch", "");
  at_most(t.micro_batch, SizeLimits::batch, "train.micro_batch", "");
  at_most(t.seq_len, SizeLimits::seq_len, "train.seq_len", "");
  at_most(t.threads, SizeLimits::threads, "train.threads", "");
  at_most(c.kd.chunk_tokens, SizeLimits::chunk_tokens, "kd.chunk_tokens", "");
  at_most(c.kd.cache_verify_threads, SizeLimits::threads, "kd.cache_verify_threads", "");
  at_most(c.eval.batches, SizeLimits::batch, "eval.batches", "");
  at_most(t.max_consecutive_skips, SizeLimits::step_count, "train.max_consecutive_skips", "");
  at_most(c.checkpoint.interval, SizeLimits::step_count, "checkpoint.interval", "");
  at_most(c.checkpoint.keep, SizeLimits::step_count, "checkpoint.keep", "");
  at_most(c.log.interval, SizeLimits::step_count, "log.interval", "");
  at_most(c.eval.interval, SizeLimits::step_count, "eval.interval", "");
  KD_CHECK(c.dist.timeout_s <= SizeLimits::timeout_s, "dist.timeout_s = ", c.dist.timeout_s,
           " exceeds kdtrain's limit of ", SizeLimits::timeout_s, " s (one year; docs/reliability.md lists the limits)");
  // Both factors are bounded by 2^20 above, so the product cannot overflow.
  KD_CHECK(t.micro_batch * t.seq_len <= SizeLimits::tokens_per_micro_batch, "train.micro_batch x train.seq_len = ",
           t.micro_batch, " x ", t.seq_len, " = ", t.micro_batch * t.seq_len,
           " tokens per micro-batch exceeds kdtrain's limit of ", SizeLimits::tokens_per_micro_batch);
}

std::string model_size_keys(const ModelConfig& m) {
  return "model.vocab_size=" + std::to_string(m.vocab_size) + ", model.hidden_size=" +
         std::to_string(m.hidden_size) + ", model.intermediate_size=" + std::to_string(m.intermediate_size) +
         ", model.num_hidden_layers=" + std::to_string(m.num_hidden_layers);
}

void fail_allocation(const std::string& what, double bytes, const std::string& keys, const std::string& why) {
  char size[64];
  std::snprintf(size, sizeof size, "%.0f bytes (%.2f GiB)", bytes, bytes / (1024.0 * 1024.0 * 1024.0));
  fail("cannot allocate ", what, ", ", size, ", sized by ", keys, ": ", why);
}

}  // namespace kdtrain
