// The affine N outside training (docs/model.md, "The affine divisor at inference"), on
// the whole C++ model (CPU backend, fp32, three layers): with attention.affine_inference_n
// train_length the `sequence` divisor is fixed at the training length, so every row of a
// shorter call equals the same row of the full call: the property a KV cache and padded
// scoring rely on (kdtrain has no cache of its own). With keys (N = the call's keys) the
// rows of a shorter call differ from layer 1 on. At the training length the two agree
// exactly. The float64 checks of the same model are scripts/tests/test_dump_parity.py
// (whole model) and test_cpu_attention.cpp (the core with N fixed).
//
// Tolerance of "equal": the two calls run the same arithmetic on the same values except
// that the causal products sum over T rather than t columns, whose extra terms are exact
// zeros (P_ij = 0 above the diagonal), and the BLAS blocking may order the sums
// differently: a few fp32 ulps per layer. 1e-5 of the logits' scale is ~100 ulps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>

#include "backend/backend.h"
#include "io/checkpoint_format.h"
#include "model/init.h"
#include "model/param_layout.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

constexpr int64_t kTrainLength = 12;

struct AffineModel {
  std::unique_ptr<Backend> backend = make_backend("cpu", 0);
  ModelConfig config = llama_like();
  AttentionConfig attention;
  std::unique_ptr<Model> model;

  AffineModel(AttentionVariant v, AffineInferenceN n) {
    config.num_hidden_layers = 3;
    config.initializer_range = 0.3;  // attention far from uniform, so N's effect is visible
    attention.variant = v;
    attention.affine_bias_divisor = AffineBiasDivisor::sequence;
    attention.affine_inference_n = n;
    attention.affine_train_length = kTrainLength;
    model = std::make_unique<Model>(config, attention, *backend, ModelUse::frozen);
    std::vector<float> params = init_params(model->layout(), config, attention, 41);
    SplitMix64 rng(42);  // alpha_ma away from alpha, so the bias term is large
    for (const ParamSpec& s : model->layout().specs)
      if (s.role == ParamRole::buffer)
        for (int64_t i = 0; i < s.numel(); ++i) params[s.offset + i] = static_cast<float>(0.1 + 0.8 * rng.uniform());
    model->set_params(params);
  }

  // The logits (T, V) of one sequence: the first T tokens.
  std::vector<float> logits(const std::vector<int32_t>& tokens, int64_t T) {
    const int64_t V = config.vocab_size;
    model->forward(tokens.data(), 1, T, false);
    std::vector<float> out(static_cast<size_t>(T * V));
    FusedLoss loss(*backend);
    LossSettings settings;
    loss.run(*model, nullptr, tokens.data() + 1, settings, 1.f, false,
             [&](int64_t start, int64_t n, const float* chunk) {
               std::copy(chunk, chunk + n * V, out.begin() + start * V);
             });
    return out;
  }
};

// max |a - b| over the first rows of b, relative to max |a|.
double prefix_diff(const std::vector<float>& full, const std::vector<float>& part) {
  double diff = 0.0, scale = 0.0;
  for (size_t k = 0; k < part.size(); ++k) {
    diff = std::max(diff, std::fabs(double(full[k]) - double(part[k])));
    scale = std::max(scale, std::fabs(double(full[k])));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("affine inference N: with N fixed at the training length a row depends only on its prefix",
          "[model][affine]") {
  for (AttentionVariant v : {AttentionVariant::affine, AttentionVariant::affine_gated}) {
    INFO("variant " << to_string(v));
    const std::vector<int32_t> tokens = random_tokens(kTrainLength + 1, llama_like().vocab_size, 43);
    AffineModel fixed(v, AffineInferenceN::train_length), keys(v, AffineInferenceN::keys);
    CHECK(fixed.model->features().bias_keys == kTrainLength);
    CHECK(keys.model->features().bias_keys == 0);
    const std::vector<float> full = fixed.logits(tokens, kTrainLength);
    // At the training length both N are the same computation.
    CHECK(prefix_diff(full, keys.logits(tokens, kTrainLength)) == 0.0);
    for (int64_t t : {1, 5, 9}) {
      INFO("prefix of " << t << " tokens");
      CHECK(prefix_diff(full, fixed.logits(tokens, t)) < 1e-5);
      CHECK(prefix_diff(full, keys.logits(tokens, t)) > 1e-3);
    }
  }
}

TEST_CASE("affine inference N: only `sequence` models with a recorded length fix N", "[model][affine][config]") {
  AttentionConfig a;
  a.variant = AttentionVariant::affine;
  a.affine_train_length = 2048;
  CHECK(features_of(a).bias_keys == 2048);  // the default is train_length
  a.affine_inference_n = AffineInferenceN::keys;
  CHECK(features_of(a).bias_keys == 0);
  a.affine_inference_n = AffineInferenceN::train_length;
  a.affine_bias_divisor = AffineBiasDivisor::visible;
  CHECK(features_of(a).bias_keys == 0);
  CHECK(affine_bias_count(features_of(a), 4, 100) == 5.0);
  a.affine_bias_divisor = AffineBiasDivisor::sequence;
  a.affine_train_length = 0;  // no length recorded: the call's keys
  CHECK(features_of(a).bias_keys == 0);
  CHECK(affine_bias_count(features_of(a), 4, 100) == 100.0);
  a.affine_train_length = 64;
  CHECK(affine_bias_count(features_of(a), 4, 100) == 64.0);
  a.variant = AttentionVariant::gated;
  CHECK(features_of(a).bias_keys == 0);
}

TEST_CASE("affine inference N: a checkpoint records the training length and the choice", "[model][affine][io]") {
  TempDir dir("affine_n");
  const ModelConfig m = llama_like();
  AttentionConfig a;
  a.variant = AttentionVariant::affine_gated;
  a.affine_inference_n = AffineInferenceN::keys;
  const ParamLayout layout = make_param_layout(m, a);
  const std::vector<float> params = init_params(layout, m, a, 5);
  io::write_model_checkpoint(dir.path.string(), m, a, layout, params.data());
  ModelConfig m2;
  AttentionConfig a2;
  io::read_hf_config(dir.file("config.json"), &m2, &a2);
  CHECK(a2.affine_inference_n == AffineInferenceN::keys);
  CHECK(a2.affine_train_length == 0);  // nothing records it: N falls back to the call's keys
  // A training checkpoint's run_config.json gives it.
  {
    std::ofstream(dir.file("run_config.json")) << R"({"train": {"seq_len": 96}})";
  }
  io::read_hf_config(dir.file("config.json"), &m2, &a2);
  CHECK(a2.affine_train_length == 96);
  // Written back (an export), config.json carries it, and it wins over run_config.json.
  a2.affine_train_length = 80;
  const nlohmann::json doc = io::hf_config_json(m2, a2);
  CHECK(doc["affine_train_length"] == 80);
  CHECK(doc["affine_inference_n"] == "keys");
  { std::ofstream(dir.file("config.json")) << doc.dump(); }
  io::read_hf_config(dir.file("config.json"), &m2, &a2);
  CHECK(a2.affine_train_length == 80);
  // A bad value is refused, naming the key.
  nlohmann::json bad = doc;
  bad["affine_inference_n"] = "sequence";
  CHECK_THROWS_WITH(io::parse_hf_config(bad, "x/config.json", &m2, &a2),
                    Catch::Contains("affine inference N") && Catch::Contains("sequence"));
  bad = doc;
  bad["affine_train_length"] = 0;
  CHECK_THROWS_WITH(io::parse_hf_config(bad, "x/config.json", &m2, &a2),
                    Catch::Contains("affine_train_length"));
}
