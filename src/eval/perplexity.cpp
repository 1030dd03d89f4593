#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/file_util.h"
#include "io/model_dir.h"
#include "io/run_head.h"
#include "model/micro_step.h"

namespace kdtrain::eval {

namespace fs = std::filesystem;

double PerplexityResult::perplexity() const { return std::exp(mean_ce()); }
double PerplexityResult::bits_per_token() const { return mean_ce() / std::log(2.0); }
double PerplexityResult::bits_per_byte() const {
  return bytes ? ce_sum / std::log(2.0) / static_cast<double>(bytes) : 0.0;
}

PerplexityResult evaluate_perplexity(Model& model, const data::TokenDataset& dataset,
                                     int64_t batch_size, int64_t max_windows,
                                     int64_t chunk_tokens, const Progress& progress,
                                     const std::vector<int32_t>* token_bytes) {
  KD_CHECK(batch_size >= 1, "eval: batch size must be at least 1, got ", batch_size);
  const int64_t T = dataset.seq_len();
  const int64_t total = max_windows > 0 ? std::min(max_windows, dataset.num_windows())
                                        : dataset.num_windows();
  KD_CHECK(total > 0, "eval: the data holds no window of ", T + 1, " tokens");

  FusedLoss loss(model.backend());
  LossSettings settings;
  settings.chunk_tokens = chunk_tokens;
  PerplexityResult result;
  std::vector<int32_t> inputs, targets;
  std::vector<int64_t> windows;
  for (int64_t first = 0; first < total; first += batch_size) {
    const int64_t B = std::min(batch_size, total - first);
    windows.resize(B);
    for (int64_t b = 0; b < B; ++b) windows[b] = first + b;
    inputs.resize(B * T);
    targets.resize(B * T);
    dataset.fill_batch(windows, inputs.data(), targets.data());
    if (token_bytes) {
      for (int32_t t : targets) {
        KD_CHECK(t >= 0 && t < static_cast<int64_t>(token_bytes->size()), "eval: token id ", t,
                 " has no entry in the bytes-per-token table (", token_bytes->size(), " ids)");
        result.bytes += (*token_bytes)[t];
      }
    }
    const LossSums sums =
        run_micro_batch({inputs.data(), targets.data(), B, T}, model, MicroTeacher{}, loss, settings, MicroPass::eval());
    KD_CHECK(std::isfinite(sums.ce), "eval: non-finite cross-entropy in windows ", first, "..",
             first + B - 1);
    result.ce_sum += sums.ce;
    result.tokens += sums.tokens;
    result.windows += B;
    if (progress) progress(result.windows, total);
  }
  return result;
}

std::string resolve_model_dir(const std::string& path) {
  const fs::path p(path);
  KD_CHECK(fs::exists(p), "no such file or directory: ", path);
  if (fs::exists(p / "config.json") && fs::exists(p / "model.safetensors")) return p.string();
  KD_CHECK(fs::is_directory(p / kCheckpointsDir), path,
           ": neither a model checkpoint (config.json + model.safetensors) nor a run directory "
           "(checkpoints/)");
  const io::ResumePoint point = io::resume_point_of_run(path);
  if (!point.note.empty()) spdlog::warn("{}: {}; reading {}", path, point.note, point.checkpoint);
  return point.checkpoint;
}

// Says which N an affine `sequence` model divides by outside training, and warns when
// train_length was asked for but the checkpoint records no training length.
static void announce_affine_n(const AttentionConfig& a, const std::string& dir) {
  if (!features_of(a.variant).affine || a.affine_bias_divisor != AffineBiasDivisor::sequence) return;
  if (a.affine_inference_n == AffineInferenceN::keys) {
    spdlog::info("{}: affine N = the keys of each call (affine_inference_n keys)", dir);
  } else if (a.affine_train_length > 0) {
    spdlog::info("{}: affine N = {}, the training length (affine_inference_n train_length)", dir,
                 a.affine_train_length);
  } else {
    spdlog::warn("{}: affine_inference_n is train_length but the checkpoint records no training length "
                 "(config.json affine_train_length, run_config.json train.seq_len): N = the keys of each call",
                 dir);
  }
}

std::unique_ptr<Model> load_model_for_eval(const std::string& path, Backend& backend,
                                           std::optional<AffineInferenceN> affine_n) {
  const std::string dir = resolve_model_dir(path);
  LoadedModel loaded = load_model_dir(dir);
  if (affine_n) loaded.attention.affine_inference_n = *affine_n;
  announce_affine_n(loaded.attention, dir);
  auto model = std::make_unique<Model>(loaded.model, loaded.attention, backend, ModelUse::frozen);
  model->set_params(loaded.params);
  return model;
}

int64_t resolve_seq_len(int64_t given, const std::string& model_dir, const ModelConfig& model,
                        int64_t min_len) {
  const int64_t max_len = model.max_position_embeddings;
  if (given != kSeqLenNotGiven) {
    KD_CHECK(given >= min_len, "--seq-len must be at least ", min_len, ", got ", given);
    KD_CHECK(max_len <= 0 || given <= max_len, "--seq-len ", given,
             " exceeds the model's max_position_embeddings ", max_len);
    return given;
  }
  const fs::path run_config = fs::path(model_dir) / "run_config.json";
  if (fs::exists(run_config)) {
    const nlohmann::json doc = read_json_file(run_config.string());
    const nlohmann::json* t = doc.contains("train") ? &doc["train"] : nullptr;
    if (t && t->contains("seq_len") && (*t)["seq_len"].is_number_integer()) {
      const int64_t T = (*t)["seq_len"].get<int64_t>();
      if (T >= min_len && (max_len <= 0 || T <= max_len)) {
        spdlog::info("--seq-len {}: the length the checkpoint trained at ({})", T, run_config.string());
        return T;
      }
    }
  }
  const int64_t T = max_len > 0 ? std::min(kDefaultSeqLen, max_len) : kDefaultSeqLen;
  if (T < kDefaultSeqLen)
    spdlog::info("--seq-len {}: the default {} clamped to the model's max_position_embeddings", T,
                 kDefaultSeqLen);
  return T;
}

void write_text_file(const std::string& path, const std::string& text) {
  io::AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace kdtrain::eval
