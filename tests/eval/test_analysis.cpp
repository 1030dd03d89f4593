// Attention analysis (src/eval/attention_analysis.h) against an independent
// double-precision recomputation from q, k (full softmax, no lse), the sinks,
// alpha and alpha_ma, affine under both bias divisors; plus the exact identities each
// variant must satisfy (the paper's Fig. 3 quantity: 1, 1 - S_i, alpha_i + (i + 1) beta_i).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "eval/attention_analysis.h"
#include "model/attention_readback.h"
#include "model/init.h"
#include "model/model.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

struct Fixture {
  std::unique_ptr<Backend> backend = make_backend("cpu", 0);
  ModelConfig config = llama_like();
  AttentionConfig attention;
  std::unique_ptr<Model> model;

  explicit Fixture(AttentionVariant v, uint64_t seed = 11,
                   AffineBiasDivisor divisor = AffineBiasDivisor::sequence) {
    config.initializer_range = 0.3;  // peaked attention: the statistics differ between rows
    attention.variant = v;
    attention.affine_bias_divisor = divisor;
    attention.sink_init_std = 1.0;
    model = std::make_unique<Model>(config, attention, *backend, ModelUse::frozen);
    std::vector<float> params = init_params(model->layout(), config, attention, seed);
    SplitMix64 rng(seed + 3);
    for (const ParamSpec& s : model->layout().specs)
      if (s.role == ParamRole::buffer)  // alpha_ma away from 0 so beta matters
        for (int64_t i = 0; i < s.numel(); ++i)
          params[s.offset + i] = static_cast<float>(0.2 + 0.7 * rng.uniform());
    model->set_params(params);
  }
};

// Effective weights w[b][h][i][j] (j <= i) and sink shares from first principles.
struct Reference {
  int64_t B, T, H;
  std::vector<double> w;     // (B, H, T, T), zero above the diagonal
  std::vector<double> sink;  // (B, H, T)
  std::vector<double> mass;  // (B, H, T): 1, 1 - S or alpha * 1
  double& at(int64_t b, int64_t h, int64_t i, int64_t j) { return w[((b * H + h) * T + i) * T + j]; }
};

Reference reference(Model& model, int64_t B, int64_t T) {
  const int64_t H = model.config().num_attention_heads;
  Reference r{B, T, H, std::vector<double>(B * H * T * T, 0.0), std::vector<double>(B * H * T, 0.0),
              std::vector<double>(B * H * T, 1.0)};
  return r;
}

// Fills `r` for layer l from the model's activations.
void fill_reference(Model& model, int64_t l, Reference& r) {
  const ModelConfig& m = model.config();
  const int64_t B = r.B, T = r.T, H = r.H, Hkv = m.num_key_value_heads, D = m.head_dim;
  const float* qkv = static_cast<const float*>(model.layer_qkv(l));
  const AttentionVariant v = model.attention().variant;
  const LayerOffsets& o = model.layout().layers[l];
  const float* alpha = static_cast<const float*>(model.layer_alpha(l));
  const float* master = model.master();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t g = h / (H / Hkv);
        std::vector<double> x(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d)
            s += static_cast<double>(qkv[((b * T + i) * (H + 2 * Hkv) + h) * D + d]) *
                 qkv[((b * T + j) * (H + 2 * Hkv) + H + g) * D + d];
          x[j] = scale * s;
        }
        double denom = 0.0;
        for (double xj : x) denom += std::exp(xj);
        const double sink_term = features_of(v).sink ? std::exp(static_cast<double>(master[o.sinks + h])) : 0.0;
        denom += sink_term;
        r.sink[(b * H + h) * T + i] = sink_term / denom;
        double a = 1.0, beta = 0.0;
        if (features_of(v).affine) {
          a = alpha[(b * T + i) * H + h];
          const bool visible = model.features().bias_divisor == AffineBiasDivisor::visible;
          beta = (master[o.alpha_ma + h] - a) / static_cast<double>(visible ? i + 1 : T);
        }
        double p_sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(x[j]) / denom;
          p_sum += p;
          r.at(b, h, i, j) = a * p + beta;
        }
        r.mass[(b * H + h) * T + i] = a * p_sum;
      }
}

}  // namespace

// Every variant; the affine ones under both divisors.
std::vector<std::pair<AttentionVariant, AffineBiasDivisor>> variant_divisors() {
  std::vector<std::pair<AttentionVariant, AffineBiasDivisor>> out;
  for (AttentionVariant v : kAllVariants) {
    out.emplace_back(v, AffineBiasDivisor::sequence);
    if (features_of(v).affine) out.emplace_back(v, AffineBiasDivisor::visible);
  }
  return out;
}

TEST_CASE("analysis: statistics equal a first-principles recomputation", "[analysis]") {
  for (const auto& [variant, divisor] : variant_divisors()) {
    DYNAMIC_SECTION(to_string(variant) << " " << to_string(divisor)) {
      Fixture f(variant, 11, divisor);
      const int64_t B = 2, T = 9;
      const int64_t L = f.config.num_hidden_layers, H = f.config.num_attention_heads;
      const std::vector<int32_t> tokens = random_tokens(B * T, f.config.vocab_size, 5);
      eval::AnalysisOptions options;
      options.map_layer = 1;
      options.map_size = 4;
      options.hist_bins = 10;
      eval::AttentionAnalyzer analyzer(*f.model, options);
      f.model->forward(tokens.data(), B, T, false);
      analyzer.add(*f.model);
      const nlohmann::json j = analyzer.to_json();

      std::vector<double> all_query_mass, all_excl_first, all_total;
      for (int64_t l = 0; l < L; ++l) {
        Reference r = reference(*f.model, B, T);
        fill_reference(*f.model, l, r);
        double first = 0.0, entropy = 0.0, mass = 0.0, sink = 0.0, excl_first = 0.0, total = 0.0, rows = 0.0;
        std::vector<double> head(H, 0.0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 1; i < T; ++i) {
            double q = 0.0, q_excl_first = 0.0, q_total = 0.0;  // Fig. 3: every view, mean over heads
            for (int64_t h = 0; h < H; ++h) {
              first += r.at(b, h, i, 0);
              total += r.at(b, h, i, 0);
              q_total += r.at(b, h, i, 0) / H;
              for (int64_t jj = 1; jj <= i; ++jj) {
                excl_first += r.at(b, h, i, jj);
                q_excl_first += r.at(b, h, i, jj) / H;
                total += r.at(b, h, i, jj);
                q_total += r.at(b, h, i, jj) / H;
              }
              double z = 0.0;
              for (int64_t jj = 0; jj <= i; ++jj) z += std::fabs(r.at(b, h, i, jj));
              for (int64_t jj = 0; jj <= i; ++jj) {
                const double p = std::fabs(r.at(b, h, i, jj)) / z;
                if (p > 0) entropy -= p * std::log(p);
              }
              const double mq = r.mass[(b * H + h) * T + i];
              mass += mq;
              head[h] += mq;
              q += mq / H;
              sink += r.sink[(b * H + h) * T + i];
              rows += 1;
            }
            all_query_mass.push_back(q);
            all_excl_first.push_back(q_excl_first);
            all_total.push_back(q_total);
          }
        CHECK(j["first_token_weight"][l].get<double>() == Approx(first / rows).epsilon(1e-5));
        CHECK(j["entropy"][l].get<double>() == Approx(entropy / rows).epsilon(1e-5));
        CHECK(j["query_mass"]["per_layer_mean"][l].get<double>() == Approx(mass / rows).epsilon(1e-5));
        CHECK(j["sink_share_per_layer"][l].get<double>() == Approx(sink / rows).margin(1e-6));
        CHECK(j["query_mass_excl_first"]["per_layer_mean"][l].get<double>() ==
              Approx(excl_first / rows).epsilon(1e-5));
        CHECK(j["query_weight_sum"]["per_layer_mean"][l].get<double>() == Approx(total / rows).epsilon(1e-5));
        for (int64_t h = 0; h < H; ++h)
          CHECK(j["head_mass"][l][h].get<double>() == Approx(head[h] / (rows / H)).epsilon(1e-5));
        if (l == options.map_layer) {
          for (int64_t i = 0; i < 4; ++i)
            for (int64_t c = 0; c < 4; ++c) {
              double s = 0.0;
              for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < H; ++h) s += r.at(b, h, i, c);
              CHECK(j["attention_map"]["weights"][i][c].get<double>() ==
                    Approx(s / (B * H)).margin(1e-6));
            }
        }
      }
      std::sort(all_query_mass.begin(), all_query_mass.end());
      const size_t n = all_query_mass.size();
      const double median = n % 2 ? all_query_mass[n / 2]
                                  : 0.5 * (all_query_mass[n / 2 - 1] + all_query_mass[n / 2]);
      CHECK(j["query_mass"]["median"].get<double>() == Approx(median).epsilon(1e-5));
      CHECK(j["query_mass"]["count"].get<int64_t>() == static_cast<int64_t>(n));
      int64_t counted = j["query_mass"]["below"].get<int64_t>() + j["query_mass"]["above"].get<int64_t>();
      for (auto c : j["query_mass"]["counts"]) counted += c.get<int64_t>();
      CHECK(counted == static_cast<int64_t>(n));
      const nlohmann::json& e = j["query_mass_excl_first"];
      double mean_excl_first = 0.0;
      for (double x : all_excl_first) mean_excl_first += x / static_cast<double>(n);
      std::sort(all_excl_first.begin(), all_excl_first.end());
      CHECK(e["mean"].get<double>() == Approx(mean_excl_first).epsilon(1e-5));
      CHECK(e["min"].get<double>() == Approx(all_excl_first.front()).margin(1e-6));
      CHECK(e["max"].get<double>() == Approx(all_excl_first.back()).margin(1e-6));
      CHECK(e["below"].get<int64_t>() == 0);  // the range is widened to hold every value
      CHECK(e["above"].get<int64_t>() == 0);
      CHECK(e["edges"].front().get<double>() <= std::min(0.0, all_excl_first.front()));
      CHECK(e["edges"].back().get<double>() >= std::max(1.0, all_excl_first.back()));
      int64_t counted_e = 0;
      for (auto c : e["counts"]) counted_e += c.get<int64_t>();
      CHECK(counted_e == static_cast<int64_t>(n));
      const nlohmann::json& w = j["query_weight_sum"];
      std::sort(all_total.begin(), all_total.end());
      CHECK(w["min"].get<double>() == Approx(all_total.front()).margin(1e-6));
      CHECK(w["max"].get<double>() == Approx(all_total.back()).margin(1e-6));
      CHECK(w["count"].get<int64_t>() == static_cast<int64_t>(n));
      CHECK(j.contains("alpha") == features_of(variant).affine);
      if (features_of(variant).affine) CHECK(j["affine_bias_divisor"] == to_string(divisor));
    }
  }
}

TEST_CASE("analysis: each variant's mass identities", "[analysis]") {
  const int64_t B = 1, T = 12;
  for (const auto& [variant, divisor] : variant_divisors()) {
    DYNAMIC_SECTION(to_string(variant) << " " << to_string(divisor)) {
      Fixture f(variant, 21, divisor);
      const int64_t L = f.config.num_hidden_layers, H = f.config.num_attention_heads;
      const std::vector<int32_t> tokens = random_tokens(B * T, f.config.vocab_size, 8);
      eval::AnalysisOptions options;
      options.map_layer = 0;
      eval::AttentionAnalyzer analyzer(*f.model, options);
      f.model->forward(tokens.data(), B, T, false);
      analyzer.add(*f.model);
      const nlohmann::json j = analyzer.to_json();
      const std::vector<float> alpha_ma = f.model->variant().alpha_ma();
      for (int64_t l = 0; l < L; ++l) {
        const double eff = j["mass_effective_per_layer"][l];
        const double mass = j["query_mass"]["per_layer_mean"][l];
        const double sink = j["sink_share_per_layer"][l];
        if (features_of(variant).affine) {
          // sum_j (alpha_i P_ij + beta_i) = alpha_i + (i + 1) beta_i: alpha_ma exactly per
          // head under `visible`, alpha_i + (i + 1)(alpha_ma - alpha_i)/T under `sequence`.
          const float* alpha = static_cast<const float*>(f.model->layer_alpha(l));
          double want = 0.0;
          for (int64_t i = 1; i < T; ++i)
            for (int64_t h = 0; h < H; ++h) {
              const double a = alpha[i * H + h], ma = alpha_ma[l * H + h];
              want += (divisor == AffineBiasDivisor::visible ? ma : a + (i + 1) * (ma - a) / T) /
                      static_cast<double>(H * (T - 1));
            }
          CHECK(eff == Approx(want).epsilon(1e-5));
          CHECK(j["query_weight_sum"]["per_layer_mean"][l].get<double>() == Approx(want).epsilon(1e-5));
          CHECK(mass >= 0.0);  // alpha_i * sum_j P_ij with alpha in [0, 1]
          CHECK(mass <= 1.0 + 1e-6);
          for (int64_t h = 0; h < H; ++h)
            CHECK(j["alpha"]["alpha_ma"][l][h].get<double>() == Approx(alpha_ma[l * H + h]));
        } else if (features_of(variant).sink) {
          CHECK(mass + sink == Approx(1.0).epsilon(1e-5));
          CHECK(eff == Approx(1.0 - sink).epsilon(1e-5));  // the paper's Fig. 3(a): 1 - S_i
          CHECK(sink > 0.0);
        } else {
          CHECK(mass == Approx(1.0).epsilon(1e-5));
          CHECK(eff == Approx(1.0).epsilon(1e-5));
          CHECK(sink == 0.0);
        }
      }
      if (!features_of(variant).affine && !features_of(variant).sink) {
        CHECK(j["query_mass"]["median"].get<double>() == Approx(1.0).epsilon(1e-5));
        CHECK(j["query_mass"]["counts"].back().get<int64_t>() == L * (T - 1));
      }
    }
  }
}

TEST_CASE("analysis: one sequence at a time equals a batch", "[analysis]") {
  Fixture f(AttentionVariant::affine, 31);
  const int64_t T = 10;
  const std::vector<int32_t> tokens = random_tokens(3 * T, f.config.vocab_size, 9);
  eval::AnalysisOptions options;
  options.map_layer = 1;
  eval::AttentionAnalyzer batched(*f.model, options), single(*f.model, options);
  f.model->forward(tokens.data(), 3, T, false);
  batched.add(*f.model);
  for (int64_t s = 0; s < 3; ++s) {
    f.model->forward(tokens.data() + s * T, 1, T, false);
    single.add(*f.model);
  }
  const nlohmann::json a = batched.to_json(), b = single.to_json();
  CHECK(a["num_seqs"] == 3);
  CHECK(b["num_seqs"] == 3);
  for (const char* key : {"first_token_weight", "entropy", "mean_abs_logit_per_layer"})
    for (size_t l = 0; l < a[key].size(); ++l)
      CHECK(a[key][l].get<double>() == Approx(b[key][l].get<double>()).epsilon(1e-6));
  CHECK(a["query_mass"]["median"].get<double>() == Approx(b["query_mass"]["median"].get<double>()));
  CHECK(a["query_mass"]["counts"] == b["query_mass"]["counts"]);
  CHECK(a["alpha"]["mean"][1][2].get<double>() == Approx(b["alpha"]["mean"][1][2].get<double>()));
}

TEST_CASE("analysis: mean |QK^T/sqrt(d)| matches brute force", "[analysis]") {
  Fixture f(AttentionVariant::sink, 41);
  const int64_t B = 2, T = 8;
  const ModelConfig& m = f.config;
  const int64_t L = m.num_hidden_layers, H = m.num_attention_heads, Hkv = m.num_key_value_heads,
                D = m.head_dim;
  const std::vector<int32_t> tokens = random_tokens(B * T, m.vocab_size, 10);
  const double got = mean_abs_attention_logit(*f.model, tokens.data(), B, T);
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t l = 0; l < L; ++l) {
    const float* qkv = static_cast<const float*>(f.model->layer_qkv(l));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j <= i; ++j) {
            double s = 0.0;
            for (int64_t d = 0; d < D; ++d)
              s += static_cast<double>(qkv[((b * T + i) * (H + 2 * Hkv) + h) * D + d]) *
                   qkv[((b * T + j) * (H + 2 * Hkv) + H + h / (H / Hkv)) * D + d];
            sum += std::fabs(s) / std::sqrt(static_cast<double>(D));
            ++count;
          }
  }
  CHECK(got == Approx(sum / count).epsilon(1e-5));
  CHECK(got > 0.0);
}

TEST_CASE("analysis: under the sequence divisor an affine prefix is not a forward of the prefix",
          "[analysis]") {
  Fixture f(AttentionVariant::affine, 51, AffineBiasDivisor::sequence);
  const int64_t B = 1, T = 12, P = 5;
  const std::vector<int32_t> tokens = random_tokens(B * T, f.config.vocab_size, 12);
  f.model->forward(tokens.data(), B, T, false);
  const double probe = probe_mean_abs_attention_logit(*f.model, P);
  const double direct = mean_abs_attention_logit(*f.model, tokens.data(), 1, P);
  // Layer 1's q/k agree (they come from the embeddings); layer 2's see layer 1's outputs,
  // whose affine term divided by T = 12 in one forward and by 5 in the other.
  CHECK(std::fabs(probe - direct) > 1e-4 * std::fabs(direct));
}

TEST_CASE("analysis: a map layer outside the model is refused", "[analysis]") {
  Fixture f(AttentionVariant::baseline);
  eval::AnalysisOptions options;
  options.map_layer = 2;  // the fixture has 2 layers
  CHECK_THROWS_WITH(eval::AttentionAnalyzer(*f.model, options),
                    Catch::Matchers::Contains("map layer 3"));
}

TEST_CASE("analysis: the training probe on a causal prefix equals a forward of that prefix",
          "[analysis]") {
  for (AttentionVariant variant : {AttentionVariant::baseline, AttentionVariant::affine_gated}) {
    DYNAMIC_SECTION(to_string(variant)) {
      // `visible`: under `sequence` an affine row depends on T (N = T), so from layer 2 on a
      // prefix of a forward is not a forward of the prefix (test below).
      Fixture f(variant, 51, AffineBiasDivisor::visible);
      const int64_t B = 3, T = 12, P = 5;
      const std::vector<int32_t> tokens = random_tokens(B * T, f.config.vocab_size, 12);
      f.model->forward(tokens.data(), B, T, false);
      const double probe = probe_mean_abs_attention_logit(*f.model, P);
      // positions < P of sequence 0 depend only on its first P tokens
      const double direct = mean_abs_attention_logit(*f.model, tokens.data(), 1, P);
      CHECK(probe == Approx(direct).epsilon(1e-5));
      // a prefix longer than the sequence is the whole first sequence
      f.model->forward(tokens.data(), B, T, false);
      const double whole = probe_mean_abs_attention_logit(*f.model, 1000);
      CHECK(whole == Approx(mean_abs_attention_logit(*f.model, tokens.data(), 1, T)).epsilon(1e-5));
      // every position of every sequence: the forward of the whole batch (Fig. 2's quantity)
      f.model->forward(tokens.data(), B, T, false);
      const double all = probe_mean_abs_attention_logit(*f.model, 0, 0);
      CHECK(all == Approx(mean_abs_attention_logit(*f.model, tokens.data(), B, T)).epsilon(1e-5));
    }
  }
}
