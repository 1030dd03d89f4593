// Attention statistics of a trained model (paper §3.1, §4, App. A; docs/analysis.md).
//
// After Model::forward, the attention probabilities of every layer and head are
// recomputed on the host from the post-RoPE q/k and the stored lse:
//   P_ij = exp(scale * q_i.k_j - lse_i),  j <= i,  scale = 1/sqrt(D),
// where lse includes the sink term for `sink` (so S_i = exp(s_h - lse_i) is the
// sink's share and sum_j P_ij = 1 - S_i). The effective weights a query puts on
// the tokens are
//   baseline, gated, sink:  w_ij = P_ij
//   affine, affine-gated:   w_ij = alpha_i P_ij + beta_i,  beta_i = (alpha_ma - alpha_i) / N_i
// with N_i = i + 1 (`visible`) or, under `sequence`, the training length (the model's
// affine_inference_n train_length) or T (keys) (the gate multiplies the output, not the weights). Statistics are averaged over
// queries i >= 1: query 0 sees only itself and makes no allocation choice. The
// paper's Fig. 3 quantity is the per-query weight sum over every token, sum_j w_ij
// (1 for baseline, 1 - S_i for sink, alpha_i + (i + 1) beta_i for affine), averaged
// over heads (`query_weight_sum`); kdtrain's own view, sum_{j >= 1} w_ij (every token
// but the first), is `query_mass_excl_first`, and the softmax-part mass (1, 1 - S_i,
// alpha_i) `query_mass`.
//
// The host recomputation costs O(B H T^2 D) per layer in fp32 with OpenMP over
// (b, h, i) rows; each row's results go to its own slot and are reduced serially,
// so the output does not depend on the thread count.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/model.h"

namespace kdtrain::eval {

struct AnalysisOptions {
  int64_t map_layer = 7;    // 0-based layer of the attention map (paper Fig. 9: 8th layer)
  int64_t map_size = 30;    // first map_size x map_size tokens
  int64_t hist_bins = 50;   // per-query mass histogram over [0, 1]
};

// Accumulates statistics over forwards (e.g. one sequence at a time) and writes them
// as the `analysis.json` object of docs/analysis.md.
class AttentionAnalyzer {
 public:
  AttentionAnalyzer(const Model& model, const AnalysisOptions& options);
  // Reads the activations of model's last forward (any B, T).
  void add(Model& model);
  nlohmann::json to_json() const;

 private:
  struct LayerSums {
    int64_t rows = 0;  // (sequence, head, query i >= 1) rows added
    double mass = 0.0, mass_effective = 0.0, sink_share = 0.0, first = 0.0, entropy = 0.0;
    double abs_logit = 0.0;
    int64_t pairs = 0;                        // causal pairs behind abs_logit (all queries)
    std::vector<double> head_mass;            // (H) sums of the per-row mass
    std::vector<double> alpha_sum, alpha_sq;  // (H) over every token      [affine]
    std::vector<float> alpha_min, alpha_max;  // (H)
    int64_t alpha_tokens = 0;
  };
  ModelConfig config_;
  AttentionVariant variant_;
  AttentionFeatures features_;  // the model's: its divisor and fixed N
  AnalysisOptions options_;
  int64_t sequences_ = 0;
  int64_t seq_len_ = 0;
  std::vector<LayerSums> layers_;
  std::vector<double> query_mass_;      // per (layer, sequence, query i >= 1): mean over heads
  std::vector<double> query_mass_total_;       // the same for sum_j w_ij (the paper's Fig. 3)
  std::vector<double> query_mass_excl_first_;  // the same for sum_{j >= 1} w_ij (kdtrain's view)
  std::vector<double> map_sum_;         // (map_size, map_size) summed over sequences and heads
  std::vector<double> map_sink_sum_;    // (map_size) sink share per query row
  int64_t map_count_ = 0;               // sequences * heads added to map_sum_
  std::vector<float> alpha_ma_;         // (L, H) affine only
};

}  // namespace kdtrain::eval
