// Held-out perplexity (docs/evaluation.md).
//
// Every window of the dataset (seq_len + 1 tokens, windows in order, see
// data/dataset.h) is scored once: the mean next-token cross-entropy in nats over
// all B*T predicted tokens, and the token perplexity exp(mean CE). The result
// depends only on the model, the shards and seq_len — not on batch_size, which
// only groups windows (the CE sums are accumulated in double, window order fixed).
// With a bytes-per-token table (data::TokenBytes) the scored tokens' bytes of text
// are counted too, for bits per byte.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "model/model.h"

namespace kdtrain::eval {

struct PerplexityResult {
  int64_t windows = 0;   // windows scored
  int64_t tokens = 0;    // predicted tokens = windows * seq_len
  double ce_sum = 0.0;   // sum of per-token CE, nats
  int64_t bytes = 0;     // bytes of text of the predicted tokens (0 without a table)
  double mean_ce() const { return tokens ? ce_sum / static_cast<double>(tokens) : 0.0; }
  double perplexity() const;  // exp(mean_ce)
  double bits_per_token() const;
  double bits_per_byte() const;  // ce_sum / ln 2 / bytes
};

// Called after each batch with (windows done, windows total).
using Progress = std::function<void(int64_t done, int64_t total)>;

// Scores the first min(max_windows, num_windows) windows (max_windows <= 0: all)
// in batches of batch_size windows (the last batch may be smaller).
// token_bytes (may be null): bytes of text per token id, summed over the targets.
PerplexityResult evaluate_perplexity(Model& model, const data::TokenDataset& dataset,
                                     int64_t batch_size, int64_t max_windows,
                                     int64_t chunk_tokens = 1024, const Progress& progress = {},
                                     const std::vector<int32_t>* token_bytes = nullptr);

// A model checkpoint directory (config.json + model.safetensors), or a run
// directory: the checkpoint `--resume RUN` continues from (io/run_head.h), what
// `latest` names or, without `latest` or behind a newer complete one, the newest
// that verifies (said on the console).
std::string resolve_model_dir(const std::string& path);

// Loads a checkpoint (resolve_model_dir) forward-only onto `backend`; `affine_n`, when
// given, replaces its attention.affine_inference_n (docs/model.md, "The affine divisor at
// inference"). An affine `sequence` model is announced with the N it will use.
std::unique_ptr<Model> load_model_for_eval(const std::string& path, Backend& backend,
                                           std::optional<AffineInferenceN> affine_n = std::nullopt);

// The window length of eval and analyze. `given` (kSeqLenNotGiven: the flag was
// not given) is checked against min_len and max_position_embeddings. Not given:
// the train.seq_len a kdtrain checkpoint trained at (its run_config.json), else
// kDefaultSeqLen clamped to max_position_embeddings; a notice says which.
constexpr int64_t kSeqLenNotGiven = -1;
constexpr int64_t kDefaultSeqLen = 1024;
int64_t resolve_seq_len(int64_t given, const std::string& model_dir, const ModelConfig& model,
                        int64_t min_len);

// Writes text to path atomically (temp + rename): a report file is whole or absent.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace kdtrain::eval
