// Every config key, spelled once: visit(v, section) calls the visitor v once per
// key, with the key, the field, what values it accepts and a one-line meaning.
// The JSON reader (config_json.cpp), the JSON writer (to_json), the key listing
// (describe_config_keys, which `kdtrain config --list` and `train --help` print)
// and the checkpoint's config.json reader (io/checkpoint_format.cpp) are
// visitors, so a key added here is read, written, listed and checked everywhere
// at once. The meaning is what `kdtrain config --list` prints: one line.
//
// A visitor provides:
//   integer(key, int64_t&, min, meaning)      value >= min
//   seed(key, uint64_t&, meaning)             any value >= 0
//   number(key, double&, Range, meaning)
//   boolean(key, bool&, meaning)
//   text(key, std::string&, meaning)          free text (paths)
//   choice(key, E&, meaning)                  an enum of config/choices.h
//   text_list(key, std::vector<std::string>&, meaning)   a string or a list of strings
//   section(key, S&, meaning)                 a nested object, read by visit(v, S&)
//   preset(key, ModelConfig&, meaning)        model.preset: replaces the model's fields
#pragma once
#include <cmath>
#include <cstdint>

#include "config/config.h"

namespace kdtrain {

// A real interval; an open end excludes its bound.
struct Range {
  double lo, hi;
  bool lo_open, hi_open;
};
constexpr double kUnbounded = HUGE_VAL;
constexpr Range positive() { return {0.0, kUnbounded, true, true}; }              // (0, inf)
constexpr Range non_negative() { return {0.0, kUnbounded, false, true}; }         // [0, inf)
constexpr Range any_real() { return {-kUnbounded, kUnbounded, true, true}; }     // (-inf, inf)
constexpr Range unit_closed() { return {0.0, 1.0, false, false}; }                // [0, 1]
constexpr Range unit_right_open() { return {0.0, 1.0, false, true}; }             // [0, 1)
constexpr Range unit_open() { return {0.0, 1.0, true, true}; }                    // (0, 1)

template <typename V>
void visit(V& v, RopeScaling& r) {
  v.choice("type", r.type, "RoPE frequency scaling (default: none)");
  v.number("factor", r.factor, positive(), "llama3: how much the context is stretched");
  v.number("low_freq_factor", r.low_freq_factor, positive(),
           "llama3: wavelengths above original/low_freq_factor are scaled");
  v.number("high_freq_factor", r.high_freq_factor, positive(),
           "llama3: wavelengths below original/high_freq_factor are kept");
  v.integer("original_max_position_embeddings", r.original_max_position_embeddings, 1,
            "llama3: context length the frequencies were trained for");
}

template <typename V>
void visit(V& v, ModelConfig& m) {
  // The preset comes first so the section's other keys override it.
  v.preset("preset", m, "named architecture filling the model section (\"\" = none)");
  v.text("init", m.init, "checkpoint directory to initialise the weights from (\"\" = random init)");
  v.choice("family", m.family, "the Hugging Face architecture used on export");
  v.integer("hidden_size", m.hidden_size, 1, "width of the residual stream");
  v.integer("intermediate_size", m.intermediate_size, 1, "width of the SwiGLU MLP");
  v.integer("num_hidden_layers", m.num_hidden_layers, 1, "decoder layers");
  v.integer("num_attention_heads", m.num_attention_heads, 1, "query heads");
  v.integer("num_key_value_heads", m.num_key_value_heads, 1,
            "key/value heads (grouped-query attention; divides the query heads)");
  v.integer("head_dim", m.head_dim, 1, "dimension of one head (even)");
  v.integer("vocab_size", m.vocab_size, 1, "rows of the embedding and the output head");
  v.integer("max_position_embeddings", m.max_position_embeddings, 1, "longest sequence the model accepts");
  v.number("rms_norm_eps", m.rms_norm_eps, unit_open(), "epsilon of RMSNorm");
  v.number("rope_theta", m.rope_theta, positive(), "RoPE base");
  v.section("rope_scaling", m.rope_scaling, "RoPE frequency scaling (llama3 long context)");
  v.boolean("tie_word_embeddings", m.tie_word_embeddings, "the output head shares the embedding matrix");
  v.boolean("attention_bias", m.attention_bias, "bias on the q/k/v projections (Qwen)");
  v.number("initializer_range", m.initializer_range, positive(),
           "standard deviation of the random initialisation");
}

template <typename V>
void visit(V& v, AttentionConfig& a) {
  v.choice("variant", a.variant, "the attention variant (kdtrain info --variants lists them)");
  v.choice("alpha_activation", a.alpha_activation, "affine variants: how alpha is squashed");
  v.choice("affine_bias_divisor", a.affine_bias_divisor,
           "affine variants: N of beta = (alpha_ma - alpha)/N: sequence = the keys of the call "
           "(the paper's), visible = i + 1 per query");
  v.choice("affine_inference_n", a.affine_inference_n,
           "affine, sequence divisor, outside training: train_length = N fixed at train.seq_len (a row "
           "depends only on its prefix), keys = the keys of the call");
  v.number("alpha_momentum", a.alpha_momentum, unit_right_open(),
           "affine variants: rho of the running mean alpha_ma");
  v.number("sink_init_std", a.sink_init_std, non_negative(),
           "sink variant: standard deviation of the initial sinks");
}

template <typename V>
void visit(V& v, KdConfig& k) {
  v.text("teacher", k.teacher, "teacher checkpoint directory (\"\" = no teacher: CE only)");
  v.text("teacher_cache", k.teacher_cache, "directory of precomputed top-k teacher logits (not with kd.teacher)");
  v.choice("cache_tail", k.cache_tail, "teacher cache: the teacher mass outside the cached top k");
  v.integer("cache_verify_threads", k.cache_verify_threads, 0,
            "teacher cache: threads summing shard checksums ahead of their first read (0 = auto: the rank's "
            "cores less 2, 1 to 4; 1 waits least when a disk, not the cores, sets the pace)");
  v.choice("loss", k.loss, "the distillation loss");
  v.number("temperature", k.temperature, positive(),
           "softmax temperature of teacher and student in the KD term");
  v.number("weight", k.weight, unit_closed(), "loss = weight * KD + (1 - weight) * CE");
  v.integer("chunk_tokens", k.chunk_tokens, 0,
            "rows per fused loss chunk: bounds the logits memory, not the results (0 = auto)");
}

template <typename V>
void visit(V& v, OptimizerConfig& o) {
  v.number("lr", o.lr, positive(), "peak learning rate");
  v.number("beta1", o.beta1, unit_right_open(), "AdamW first-moment decay");
  v.number("beta2", o.beta2, unit_right_open(), "AdamW second-moment decay");
  v.number("eps", o.eps, positive(), "AdamW epsilon");
  v.number("weight_decay", o.weight_decay, non_negative(), "decoupled weight decay (matrices only)");
  v.number("grad_clip", o.grad_clip, any_real(), "global gradient-norm clip (<= 0: none)");
}

template <typename V>
void visit(V& v, ScheduleConfig& s) {
  v.choice("kind", s.kind, "the learning-rate schedule after warmup");
  v.integer("warmup", s.warmup, 0, "linear warmup steps (clamped to train.steps, with a notice)");
  v.number("decay_fraction", s.decay_fraction, unit_closed(), "wsd: share of the steps spent decaying");
  v.choice("decay_shape", s.decay_shape, "wsd: shape of the decay");
  v.number("min_lr_ratio", s.min_lr_ratio, unit_closed(), "final learning rate as a fraction of optimizer.lr");
}

template <typename V>
void visit(V& v, DataConfig& d) {
  v.text_list("train", d.train, "training shards: paths or globs");
  v.text_list("val", d.val, "validation shards: paths or globs ([] = no validation)");
}

template <typename V>
void visit(V& v, TrainConfig& t) {
  v.integer("steps", t.steps, 1, "optimizer steps of the whole run");
  v.integer("global_batch", t.global_batch, 1, "sequences per optimizer step (all ranks)");
  v.integer("micro_batch", t.micro_batch, 1, "sequences per forward/backward on one rank");
  v.integer("seq_len", t.seq_len, 1, "tokens per training sequence");
  v.seed("seed", t.seed, "seed of initialisation and data order");
  v.choice("device", t.device, "the backend the run computes on");
  v.choice("on_nonfinite", t.on_nonfinite, "stop, or skip a step with a NaN/inf loss or gradient");
  v.integer("max_consecutive_skips", t.max_consecutive_skips, 1,
            "with on_nonfinite=skip: skipped steps in a row that stop the run");
  v.integer("threads", t.threads, 0, "CPU threads (0 = all cores)");
  v.choice("recompute", t.recompute,
           "activations the backward recomputes instead of keeping: none, swiglu (its output), "
           "norms (+ both RMSNorm outputs), mlp (+ the gate/up product); results are bit-identical");
  v.integer("recompute_layers", t.recompute_layers, 0,
            "layers 0..K-1 keep only their input and rerun their whole forward in the backward");
  v.choice("attention_forward", t.attention_forward,
           "the CUDA attention forward's kernel: auto (wgmma where built, on compute capability 9.0), "
           "mma_sync, wgmma (warp-specialised) or wgmma_lockstep (the first wgmma kernel, to time "
           "against it; a wgmma choice is an error where it cannot run)");
  v.choice("attention_backward", t.attention_backward,
           "the CUDA attention backward's main kernel: auto (wgmma where built, on compute capability 9.0), "
           "mma_sync, or wgmma (an error where it cannot run)");
}

template <typename V>
void visit(V& v, CheckpointConfig& c) {
  v.integer("interval", c.interval, 0, "steps between checkpoints (0 = only at the end)");
  v.integer("keep", c.keep, 1, "most recent checkpoints kept");
}

template <typename V>
void visit(V& v, LogConfig& c) {
  v.integer("interval", c.interval, 1, "steps between progress lines");
  v.integer("logit_mean_interval", c.logit_mean_interval, 0,
            "steps between logs of the all-position attention-logit mean, Fig. 2 "
            "(0 = only with validation; host work O(L H B T^2 D), docs/evaluation.md)");
}

template <typename V>
void visit(V& v, EvalConfig& c) {
  v.integer("interval", c.interval, 0, "steps between validation passes (0 = only at the end)");
  v.integer("batches", c.batches, 1, "validation micro-batches per pass");
}

template <typename V>
void visit(V& v, DistConfig& c) {
  v.choice("backend", c.backend, "the communicator: mpi goes with cpu, nccl with cuda");
  v.boolean("zero1", c.zero1, "shard the AdamW state across ranks (ZeRO-1)");
  v.number("timeout_s", c.timeout_s, positive(), "seconds a rank may be silent before the job aborts");
  v.number("bucket_mb", c.bucket_mb, Range{0.0, 4096.0, true, true},
           "MiB of fp32 gradients per reduction bucket");
  v.boolean("overlap", c.overlap, "reduce each bucket during the backward as soon as it is final");
  v.choice("reduce_dtype", c.reduce_dtype, "the dtype gradients travel in (bf16 sums in fp32)");
}

// The sections in reading order: model first, so a preset never overrides
// another section's keys.
template <typename V>
void visit(V& v, Config& c) {
  v.section("model", c.model, "the architecture, as in a Hugging Face config.json (usually from model.preset)");
  v.section("attention", c.attention, "the attention variant and its parameters (alpha, sinks)");
  v.section("kd", c.kd, "the teacher (online or a top-k cache) and the distillation loss");
  v.section("optimizer", c.optimizer, "AdamW: learning rate, betas, weight decay, gradient clipping");
  v.section("schedule", c.schedule, "the learning-rate schedule: warmup, then wsd, cosine or constant");
  v.section("data", c.data, "training and validation token shards (paths or globs)");
  v.section("train", c.train, "steps, batch sizes, sequence length, seed, device, non-finite policy");
  v.section("checkpoint", c.checkpoint, "how often checkpoints are written and how many are kept");
  v.section("log", c.log, "how often a progress line is printed");
  v.section("eval", c.eval, "how often validation runs and on how many batches");
  v.section("dist", c.dist, "data parallelism: communicator, optimizer-state sharding, gradient buckets, timeout");
}

}  // namespace kdtrain
