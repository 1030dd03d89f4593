#include "eval/attention_analysis.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "eval/affine_n.h"
#include "model/attention_readback.h"

namespace kdtrain::eval {

namespace {

// Per query row (b, h, i >= 1) results, written by one task each.
struct RowStats {
  double mass = 0.0;            // softmax-derived mass on tokens: 1, 1 - S_i, or alpha_i
  double mass_effective = 0.0;  // sum_j w_ij
  double mass_excl_first = 0.0; // sum_{j >= 1} w_ij (paper Fig. 3)
  double sink_share = 0.0;      // S_i (sink only)
  double first = 0.0;           // w_i0
  double entropy = 0.0;         // of |w| / sum |w|, nats
  double abs_logit = 0.0;       // sum_j |x_ij|
};

}  // namespace

AttentionAnalyzer::AttentionAnalyzer(const Model& model, const AnalysisOptions& options)
    : config_(model.config()), variant_(model.attention().variant),
      features_(model.features()), options_(options) {
  const int64_t L = config_.num_hidden_layers, H = config_.num_attention_heads;
  KD_CHECK(options_.map_layer >= 0 && options_.map_layer < L, "analysis: map layer ",
           options_.map_layer + 1, " is outside the model's ", L, " layers");
  KD_CHECK(options_.map_size >= 1 && options_.hist_bins >= 1, "analysis: map size and bins must be >= 1");
  layers_.resize(L);
  for (LayerSums& s : layers_) {
    s.head_mass.assign(H, 0.0);
    s.alpha_sum.assign(H, 0.0);
    s.alpha_sq.assign(H, 0.0);
    s.alpha_min.assign(H, std::numeric_limits<float>::infinity());
    s.alpha_max.assign(H, -std::numeric_limits<float>::infinity());
  }
  const int64_t M = options_.map_size;
  map_sum_.assign(M * M, 0.0);
  map_sink_sum_.assign(M, 0.0);
}

void AttentionAnalyzer::add(Model& model) {
  const int64_t L = config_.num_hidden_layers;
  const int64_t B = model.batch_size(), T = model.seq_len();
  KD_CHECK(seq_len_ == 0 || seq_len_ == T, "analysis: sequences of different lengths (", seq_len_,
           " and ", T, ")");
  KD_CHECK(T >= 2, "analysis: sequences need at least 2 tokens");
  seq_len_ = T;
  const bool affine = model.features().affine, sink = model.features().sink;
  const int64_t M = std::min(options_.map_size, T);

  for (int64_t l = 0; l < L; ++l) {
    const LayerView v = read_layer(model, l, true);
    const int64_t H = v.H, rows = B * H * T;
    const bool map_layer = l == options_.map_layer;
    std::vector<RowStats> stats(static_cast<size_t>(rows));
    std::vector<double> row_map(map_layer ? B * H * M * M : 0, 0.0);
    std::vector<double> row_sink(map_layer ? B * H * M : 0, 0.0);

#pragma omp parallel
    {
      std::vector<double> w(static_cast<size_t>(T));
#pragma omp for schedule(dynamic, 8)
      for (int64_t task = 0; task < rows; ++task) {
        const int64_t i = task % T, h = (task / T) % H, b = task / (T * H);
        const double lse = v.lse[(b * H + h) * T + i];
        RowStats& r = stats[task];
        double p_sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const double x = v.logit(b, h, i, j);
          r.abs_logit += std::fabs(x);
          w[j] = std::exp(x - lse);
          p_sum += w[j];
        }
        if (sink) r.sink_share = std::exp(static_cast<double>(v.sinks[h]) - lse);
        r.mass = p_sum;
        if (affine) {
          const double a = v.alpha[(b * T + i) * H + h];
          const double beta = (static_cast<double>(v.alpha_ma[h]) - a) / affine_bias_count(features_, i, T);
          for (int64_t j = 0; j <= i; ++j) w[j] = a * w[j] + beta;
          r.mass = a * p_sum;
        }
        double abs_sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          r.mass_effective += w[j];
          abs_sum += std::fabs(w[j]);
        }
        r.first = w[0];
        r.mass_excl_first = r.mass_effective - w[0];
        if (abs_sum > 0.0) {
          for (int64_t j = 0; j <= i; ++j) {
            const double p = std::fabs(w[j]) / abs_sum;
            if (p > 0.0) r.entropy -= p * std::log(p);
          }
        }
        if (map_layer && i < M) {
          for (int64_t j = 0; j <= i && j < M; ++j) row_map[((b * H + h) * M + i) * M + j] = w[j];
          row_sink[(b * H + h) * M + i] = r.sink_share;
        }
      }
    }

    // Serial reduction in task order: deterministic for any thread count.
    LayerSums& s = layers_[l];
    std::vector<double> per_query(B * T, 0.0), per_query_total(B * T, 0.0), per_query_excl_first(B * T, 0.0);
    for (int64_t task = 0; task < rows; ++task) {
      const int64_t i = task % T, h = (task / T) % H, b = task / (T * H);
      const RowStats& r = stats[task];
      s.abs_logit += r.abs_logit;
      if (i == 0) continue;
      ++s.rows;
      s.mass += r.mass;
      s.mass_effective += r.mass_effective;
      s.sink_share += r.sink_share;
      s.first += r.first;
      s.entropy += r.entropy;
      s.head_mass[h] += r.mass;
      per_query[b * T + i] += r.mass / static_cast<double>(H);
      per_query_total[b * T + i] += r.mass_effective / static_cast<double>(H);
      per_query_excl_first[b * T + i] += r.mass_excl_first / static_cast<double>(H);
    }
    s.pairs += B * H * T * (T + 1) / 2;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 1; i < T; ++i) {
        query_mass_.push_back(per_query[b * T + i]);
        query_mass_total_.push_back(per_query_total[b * T + i]);
        query_mass_excl_first_.push_back(per_query_excl_first[b * T + i]);
      }

    if (map_layer) {
      for (int64_t bh = 0; bh < B * H; ++bh) {
        for (int64_t i = 0; i < M; ++i) {
          map_sink_sum_[i] += row_sink[bh * M + i];
          for (int64_t j = 0; j < M; ++j) map_sum_[i * options_.map_size + j] += row_map[(bh * M + i) * M + j];
        }
      }
      map_count_ += B * H;
    }
    if (affine) {
      for (int64_t t = 0; t < B * T; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          const float a = v.alpha[t * H + h];
          s.alpha_sum[h] += a;
          s.alpha_sq[h] += static_cast<double>(a) * a;
          s.alpha_min[h] = std::min(s.alpha_min[h], a);
          s.alpha_max[h] = std::max(s.alpha_max[h], a);
        }
      }
      s.alpha_tokens += B * T;
    }
  }
  if (affine) alpha_ma_ = model.variant().alpha_ma();
  sequences_ += B;
}

namespace {

double median_of(std::vector<double> x) {
  if (x.empty()) return 0.0;
  const size_t n = x.size(), mid = n / 2;
  std::nth_element(x.begin(), x.begin() + mid, x.end());
  const double upper = x[mid];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(x.begin(), x.begin() + mid);
  return 0.5 * (lower + upper);
}

nlohmann::json histogram(const std::vector<double>& x, int64_t bins, double lo, double hi) {
  std::vector<int64_t> counts(bins, 0);
  int64_t below = 0, above = 0;
  const double slack = 1e-6 * (hi - lo);  // fp32 rounding: a softmax row sums to 1 +- 1e-7
  for (double x_raw : x) {
    const double value = x_raw < lo && x_raw >= lo - slack   ? lo
                         : x_raw > hi && x_raw <= hi + slack ? hi
                                                              : x_raw;
    if (value < lo) {
      ++below;
    } else if (value > hi) {
      ++above;
    } else {  // the last bin is closed: value == hi counts in it
      const int64_t k = std::min<int64_t>(bins - 1, static_cast<int64_t>((value - lo) / (hi - lo) * bins));
      ++counts[k];
    }
  }
  std::vector<double> edges(bins + 1);
  for (int64_t k = 0; k <= bins; ++k) edges[k] = lo + (hi - lo) * static_cast<double>(k) / bins;
  return {{"edges", edges}, {"counts", counts}, {"below", below}, {"above", above}};
}

// Histogram over [lo, hi] plus count, mean, median, min and max of x (non-empty).
nlohmann::json distribution(const std::vector<double>& x, int64_t bins, double lo, double hi) {
  nlohmann::json d = histogram(x, bins, lo, hi);
  double sum = 0.0;
  for (double v : x) sum += v;
  d["count"] = x.size();
  d["mean"] = sum / static_cast<double>(x.size());
  d["median"] = median_of(x);
  d["min"] = *std::min_element(x.begin(), x.end());
  d["max"] = *std::max_element(x.begin(), x.end());
  return d;
}

// distribution() over [0, 1] widened to the tenths that hold every value: effective
// weights can leave [0, 1] (affine: beta < 0, or alpha_i small with alpha_ma > alpha_i).
nlohmann::json widened_distribution(const std::vector<double>& x, int64_t bins_per_unit) {
  const auto [lo_x, hi_x] = std::minmax_element(x.begin(), x.end());
  const double lo = std::min(0.0, std::floor(*lo_x * 10.0) / 10.0);
  const double hi = std::max(1.0, std::ceil(*hi_x * 10.0) / 10.0);
  const int64_t bins = std::max<int64_t>(1, std::llround(static_cast<double>(bins_per_unit) * (hi - lo)));
  return distribution(x, bins, lo, hi);
}

}  // namespace

nlohmann::json AttentionAnalyzer::to_json() const {
  const int64_t L = config_.num_hidden_layers, H = config_.num_attention_heads;
  const int64_t M = std::min(options_.map_size, seq_len_);
  KD_CHECK(sequences_ > 0, "analysis: no sequence was added");
  nlohmann::json j;
  j["format"] = "kdtrain-analysis-1";
  j["attention"] = to_string(variant_);
  j["num_layers"] = L;
  j["num_heads"] = H;
  j["seq_len"] = seq_len_;
  j["num_seqs"] = sequences_;
  j["queries"] = "i >= 1";

  std::vector<double> first(L), entropy(L), mass(L), mass_eff(L), mass_excl_first(L),
      sink_share(L), logit(L);
  std::vector<std::vector<double>> head_mass(L, std::vector<double>(H));
  double logit_sum = 0.0;
  int64_t pairs = 0;
  for (int64_t l = 0; l < L; ++l) {
    const LayerSums& s = layers_[l];
    const double n = static_cast<double>(s.rows);
    first[l] = s.first / n;
    entropy[l] = s.entropy / n;
    mass[l] = s.mass / n;
    mass_eff[l] = s.mass_effective / n;
    mass_excl_first[l] = (s.mass_effective - s.first) / n;
    sink_share[l] = s.sink_share / n;
    logit[l] = s.abs_logit / static_cast<double>(s.pairs);
    logit_sum += s.abs_logit;
    pairs += s.pairs;
    for (int64_t h = 0; h < H; ++h) head_mass[l][h] = s.head_mass[h] / (n / H);
  }
  j["mean_abs_logit"] = logit_sum / static_cast<double>(pairs);
  j["mean_abs_logit_per_layer"] = logit;
  j["first_token_weight"] = first;
  j["entropy"] = entropy;
  j["sink_share_per_layer"] = sink_share;
  j["mass_effective_per_layer"] = mass_eff;

  nlohmann::json qm = distribution(query_mass_, options_.hist_bins, 0.0, 1.0);
  qm["per_layer_mean"] = mass;
  j["query_mass"] = qm;
  // The paper's Fig. 3: sum_j w_ij over every token (1, 1 - S_i, alpha_i + (i + 1) beta_i).
  j["query_weight_sum"] = widened_distribution(query_mass_total_, options_.hist_bins);
  j["query_weight_sum"]["per_layer_mean"] = mass_eff;
  // kdtrain's own view: every token but the first.
  j["query_mass_excl_first"] = widened_distribution(query_mass_excl_first_, options_.hist_bins);
  j["query_mass_excl_first"]["per_layer_mean"] = mass_excl_first;

  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& row : head_mass)
    for (double x : row) lo = std::min(lo, x), hi = std::max(hi, x);
  std::vector<std::vector<double>> normalized = head_mass;
  for (auto& row : normalized)
    for (double& x : row) x = hi - lo > 1e-12 ? (x - lo) / (hi - lo) : 1.0;
  j["head_mass"] = head_mass;
  j["head_mass_minmax"] = normalized;

  std::vector<std::vector<double>> map(M, std::vector<double>(M));
  std::vector<double> map_sink(M);
  for (int64_t i = 0; i < M; ++i) {
    map_sink[i] = map_sink_sum_[i] / static_cast<double>(map_count_);
    for (int64_t c = 0; c < M; ++c)
      map[i][c] = map_sum_[i * options_.map_size + c] / static_cast<double>(map_count_);
  }
  j["attention_map"] = {{"layer", options_.map_layer + 1}, {"size", M}, {"weights", map},
                        {"sink_share", map_sink}};

  if (features_of(variant_).affine) {
    std::vector<std::vector<double>> mean(L, std::vector<double>(H)), stdev = mean, mn = mean,
                                                                      mx = mean, ma = mean;
    for (int64_t l = 0; l < L; ++l) {
      const LayerSums& s = layers_[l];
      const double n = static_cast<double>(s.alpha_tokens);
      for (int64_t h = 0; h < H; ++h) {
        mean[l][h] = s.alpha_sum[h] / n;
        stdev[l][h] = std::sqrt(std::max(0.0, s.alpha_sq[h] / n - mean[l][h] * mean[l][h]));
        mn[l][h] = s.alpha_min[h];
        mx[l][h] = s.alpha_max[h];
        ma[l][h] = alpha_ma_.empty() ? 0.0 : alpha_ma_[l * H + h];
      }
    }
    j["alpha"] = {{"mean", mean}, {"std", stdev}, {"min", mn}, {"max", mx}, {"alpha_ma", ma}};
    j["affine_bias_divisor"] = to_string(features_.bias_divisor);
    j["affine_bias_n"] = affine_bias_n_json(features_, seq_len_);
  }
  return j;
}

}  // namespace kdtrain::eval
