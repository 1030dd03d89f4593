// kdtrain analyze: attention statistics of a checkpoint on the first --num-seqs
// windows of held-out shards, written to <out>/analysis.json (docs/analysis.md).
// The defaults are the paper's App. A.1 settings: 10 sequences of 1024 tokens,
// the attention map of the 8th layer. Figures are drawn by scripts/report/report.py.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "backend/backend.h"
#include "cli/checkpoint_input.h"
#include "cli/commands.h"
#include "config/limits.h"
#include "core/error.h"
#include "data/dataset.h"
#include "eval/attention_analysis.h"
#include "eval/perplexity.h"
#include "io/atomic_dir.h"
#include "io/output_dir.h"

namespace kdtrain::cli {

namespace {

constexpr const char* kAnalysisFile = "analysis.json";

struct AnalyzeFlags {
  CheckpointInputOptions input;
  std::string out;
  bool force = false;
  bool num_seqs_given = false;
  int64_t num_seqs = 10, layer_map = 8, map_size = 30, bins = 50;
};

void run_analyze(const AnalyzeFlags& f) {
  KD_CHECK(f.num_seqs >= 1, "--num-seqs must be at least 1, got ", f.num_seqs);
  KD_CHECK(f.layer_map >= 1, "--layer-map is a 1-based layer number, got ", f.layer_map);
  io::claim_output_dir(f.out, {"--out", {}, f.force, "analyze", true});
  const CheckpointInput in(f.input, 2);
  Model& model = *in.model;
  const ModelConfig& m = model.config();
  const int64_t seq_len = in.seq_len;
  const data::TokenDataset& dataset = in.dataset;
  int64_t num_seqs = f.num_seqs;
  if (!f.num_seqs_given && dataset.num_windows() < num_seqs) {
    num_seqs = dataset.num_windows();
    spdlog::info("--num-seqs {}: the data holds {} windows of {} tokens (default {})", num_seqs,
                 dataset.num_windows(), seq_len + 1, f.num_seqs);
  }
  KD_CHECK(num_seqs >= 1 && dataset.num_windows() >= num_seqs, "--num-seqs ", num_seqs,
           ": the data holds only ", dataset.num_windows(), " windows of ", seq_len + 1, " tokens");

  eval::AnalysisOptions options;
  int64_t layer = f.layer_map;
  if (layer > m.num_hidden_layers) {
    spdlog::warn("--layer-map {}: the model has {} layers; mapping layer {}", layer,
                 m.num_hidden_layers, m.num_hidden_layers);
    layer = m.num_hidden_layers;
  }
  options.map_layer = layer - 1;
  options.map_size = f.map_size;
  options.hist_bins = f.bins;
  eval::AttentionAnalyzer analyzer(model, options);

  // One sequence per forward keeps the activations to one window.
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> inputs(seq_len), targets(seq_len);
  for (int64_t s = 0; s < num_seqs; ++s) {
    dataset.fill_batch({s}, inputs.data(), targets.data());
    model.forward(inputs.data(), 1, seq_len, false);
    analyzer.add(model);
    spdlog::info("analyze: sequence {}/{}", s + 1, num_seqs);
  }
  nlohmann::json j = analyzer.to_json();
  j["checkpoint"] = in.model_dir;
  j["data"] = f.input.data;
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Staged whole, so an interrupted or failed run leaves the earlier output as it was.
  io::StagedDir stage(f.out);
  eval::write_text_file(stage.file(kAnalysisFile), j.dump(1) + "\n");
  io::write_output_manifest(stage.staging_path(), "analyze");
  stage.commit();
  const std::string path = (std::filesystem::path(f.out) / kAnalysisFile).string();
  std::printf("wrote %s: %s, %lld sequences x %lld tokens, mean |QK^T/sqrt(d)| %.4f, "
              "first-token weight (mean over layers) %.4f\n",
              path.c_str(), to_string(model.attention().variant),
              static_cast<long long>(num_seqs), static_cast<long long>(seq_len),
              j["mean_abs_logit"].get<double>(), [&] {
                double s = 0.0;
                for (double x : j["first_token_weight"]) s += x;
                return s / static_cast<double>(j["first_token_weight"].size());
              }());
}

}  // namespace

void register_analyze(CLI::App& app) {
  auto flags = std::make_shared<AnalyzeFlags>();
  auto* command = app.add_subcommand(
      "analyze", "Attention statistics (paper §4, App. A) of a checkpoint, written as analysis.json");
  add_checkpoint_input_options(*command, flags->input, "sequence",
                               "cpu or cuda (statistics are computed on the host)");
  command->add_option("--num-seqs", flags->num_seqs,
                      "the first N windows are analysed (default 10, or all the data holds when fewer)")
      ->check(in_range<int64_t>(1, SizeLimits::batch));
  command->add_option("--layer-map", flags->layer_map,
                      "1-based layer whose attention map is kept (default 8, clamped to the depth)")
      ->check(in_range<int64_t>(1, SizeLimits::layers));
  command->add_option("--map-size", flags->map_size, "attention map of the first N tokens (default 30)")
      ->check(in_range<int64_t>(1, 4096));
  command->add_option("--bins", flags->bins, "per-query mass histogram bins over [0, 1] (default 50)")
      ->check(in_range<int64_t>(1, 1 << 20));
  command->add_option("--out", flags->out, "output directory (analysis.json)")->required()->transform(normal_path_option());
  command->add_flag("--force", flags->force,
                    "replace an earlier `kdtrain analyze` output in --out (a rerun does so anyway)");
  command->callback([flags, command] {
    flags->num_seqs_given = command->count("--num-seqs") > 0;
    run_analyze(*flags);
  });
}

}  // namespace kdtrain::cli
