// Upper bounds on every size a config, a flag or a checkpoint's config.json can
// set. They sit far above anything kdtrain trains (the paper trains up to 3B parameters;
// for scale, Llama-3 405B has hidden 16384, MLP 53248, 126 layers, 128 heads,
// a 128256-id vocabulary) and low enough that every size derived from them
// (parameter count, activation and logit bytes) fits in int64 and in the int32
// token indices of the kernels, so no product can wrap around. A value above
// its bound is refused naming the key, before anything is allocated or written.
#pragma once
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#include "config/config.h"

namespace kdtrain {

struct SizeLimits {
  static constexpr int64_t hidden_size = 1 << 16;
  static constexpr int64_t intermediate_size = 1 << 18;
  static constexpr int64_t layers = 1024;
  static constexpr int64_t heads = 1024;
  static constexpr int64_t head_dim = 1024;
  static constexpr int64_t vocab_size = 1 << 24;  // ids are int32 everywhere
  static constexpr int64_t positions = 1 << 24;
  static constexpr int64_t seq_len = 1 << 20;
  static constexpr int64_t batch = 1 << 20;             // sequences per step or micro-batch
  static constexpr int64_t tokens_per_micro_batch = 1 << 24;
  static constexpr int64_t steps = int64_t{1} << 40;
  // Every other count of steps (intervals, keep, skips) is bounded as steps are
  // (schedule.warmup is clamped to train.steps).
  static constexpr int64_t step_count = steps;
  // dist.timeout_s: one year. "Never" spelled 1e10 would overflow the watchdog's
  // nanosecond deadline (int64 ns hold 292 years); this bound keeps it exact.
  static constexpr double timeout_s = 365.0 * 24 * 3600;
  static constexpr int64_t threads = 1024;
  // Data-parallel ranks a flag can name (kdtrain info --world-size, bench
  // --project-world-size): far above any job, small enough for an int.
  static constexpr int64_t ranks = 1 << 20;
  // Windows a flag can count (eval --max-windows, teacher-cache --shard-windows):
  // a teacher-cache shard header holds fewer than 2^40.
  static constexpr int64_t windows = int64_t{1} << 40;
  static constexpr int64_t chunk_tokens = 1 << 20;
};

// Model sizes: `prefix` is how keys are spelled where they came from: "model."
// for a run config, "" for a checkpoint's config.json (whose path `source` names).
void check_model_limits(const ModelConfig& model, const std::string& source, const std::string& prefix);
// The run's sizes (train.*, kd.chunk_tokens, eval.batches), counts (intervals,
// keep, skips) and dist.timeout_s, model included.
void check_run_limits(const Config& config);

// "model.vocab_size=… model.hidden_size=… model.intermediate_size=… model.num_hidden_layers=…":
// the keys that size the parameter arena, for out-of-memory messages.
std::string model_size_keys(const ModelConfig& model);
// Throws "cannot allocate <what>, <bytes> (<GiB>), sized by <keys>: <why>".
[[noreturn]] void fail_allocation(const std::string& what, double bytes, const std::string& keys,
                                  const std::string& why);
// Returns alloc(); turns its failure (std::bad_alloc, or a backend's error) into
// fail_allocation, so an out-of-memory error names the keys that sized the buffer.
template <typename Alloc>
auto allocate_or_name(const std::string& what, double bytes, const std::string& keys, Alloc alloc)
    -> decltype(alloc()) {
  try {
    return alloc();
  } catch (const std::bad_alloc&) {
    fail_allocation(what, bytes, keys, "out of memory");
  } catch (const std::length_error&) {
    fail_allocation(what, bytes, keys, "out of memory (larger than the address space)");
  } catch (const std::exception& e) {
    fail_allocation(what, bytes, keys, e.what());
  }
}

}  // namespace kdtrain
