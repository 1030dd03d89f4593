// Held-out perplexity (src/eval/perplexity.h): a hand-computed case (all-zero
// weights give uniform logits, CE = log V), agreement with per-window CE computed
// through FusedLoss directly, independence of the batch size, --max-windows,
// bits per byte from a bytes-per-token table, and checkpoint / run-directory resolution.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "data/shard_manifest.h"
#include "eval/perplexity.h"
#include "io/checkpoint_format.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;
namespace fs = std::filesystem;

namespace {

std::string write_tokens(const TempDir& dir, const std::string& name, int64_t n, int64_t vocab,
                         uint64_t seed) {
  const std::vector<int32_t> t = random_tokens(n, vocab, seed);
  const std::vector<uint32_t> u(t.begin(), t.end());
  const std::string path = dir.file(name);
  data::write_shard(path, u, 7);
  return path;
}

// A test's temporary directory, the CPU backend and the llama-like test model.
struct EvalFixture {
  TempDir dir;
  std::unique_ptr<Backend> backend = make_backend("cpu", 0);
  const ModelConfig m = llama_like();
};

}  // namespace

TEST_CASE_METHOD(EvalFixture, "eval: zero weights give uniform logits, CE = log V and perplexity = V", "[eval]") {
  AttentionConfig attention;
  Model model(m, attention, *backend, ModelUse::frozen);
  model.set_params(std::vector<float>(model.layout().total, 0.f));
  const std::string shard = write_tokens(dir, "a.bin", 3 * 8 + 1, m.vocab_size, 1);
  const data::TokenDataset dataset({shard}, 8, m.vocab_size);
  const eval::PerplexityResult r = eval::evaluate_perplexity(model, dataset, 2, 0);
  CHECK(r.windows == 3);
  CHECK(r.tokens == 24);
  CHECK(r.mean_ce() == Approx(std::log(static_cast<double>(m.vocab_size))).epsilon(1e-6));
  CHECK(r.perplexity() == Approx(static_cast<double>(m.vocab_size)).epsilon(1e-5));
  CHECK(r.bits_per_token() == Approx(std::log2(static_cast<double>(m.vocab_size))).epsilon(1e-6));
}

TEST_CASE("eval: equals per-window CE, for any batch size, over several shards", "[eval]") {
  TempDir dir;
  auto backend = make_backend("cpu", 0);
  for (AttentionVariant variant : {AttentionVariant::baseline, AttentionVariant::affine_gated}) {
    DYNAMIC_SECTION(to_string(variant)) {
      const ModelConfig m = qwen_like();
      AttentionConfig attention;
      attention.variant = variant;
      Model model(m, attention, *backend, ModelUse::frozen);
      model.set_params(init_params(model.layout(), m, attention, 3));
      const int64_t T = 6;
      // 4 windows in the first shard, 2 in the second (a partial tail is dropped).
      const std::vector<std::string> shards = {write_tokens(dir, "s0.bin", 4 * T + 3, m.vocab_size, 2),
                                               write_tokens(dir, "s1.bin", 2 * T + 1, m.vocab_size, 3)};
      const data::TokenDataset dataset(shards, T, m.vocab_size);
      REQUIRE(dataset.num_windows() == 6);

      double expected = 0.0;
      FusedLoss loss(*backend);
      std::vector<int32_t> in(T), tg(T);
      for (int64_t w = 0; w < 6; ++w) {
        dataset.fill_batch({w}, in.data(), tg.data());
        model.forward(in.data(), 1, T, false);
        expected += loss.run(model, nullptr, tg.data(), LossSettings{}, 1.f, false).ce;
      }
      for (int64_t B : {1, 4, 6, 10}) {
        const eval::PerplexityResult r = eval::evaluate_perplexity(model, dataset, B, 0, 5);
        CHECK(r.windows == 6);
        CHECK(r.tokens == 6 * T);
        CHECK(r.ce_sum == Approx(expected).epsilon(1e-6));
      }
      const eval::PerplexityResult a = eval::evaluate_perplexity(model, dataset, 4, 0);
      const eval::PerplexityResult b = eval::evaluate_perplexity(model, dataset, 4, 0);
      CHECK(a.ce_sum == b.ce_sum);  // bit-identical rerun
      const eval::PerplexityResult first3 = eval::evaluate_perplexity(model, dataset, 2, 3);
      CHECK(first3.windows == 3);
      CHECK(first3.tokens == 3 * T);
    }
  }
}

TEST_CASE_METHOD(EvalFixture, "eval: bits per byte counts the bytes of exactly the scored targets", "[eval]") {
  AttentionConfig attention;
  Model model(m, attention, *backend, ModelUse::frozen);
  model.set_params(init_params(model.layout(), m, attention, 6));
  const int64_t T = 5;
  const std::string shard = write_tokens(dir, "s.bin", 3 * T + 3, m.vocab_size, 7);  // tail dropped
  const data::TokenDataset dataset({shard}, T, m.vocab_size);
  std::vector<int32_t> lengths(m.vocab_size);
  for (int64_t i = 0; i < m.vocab_size; ++i) lengths[i] = static_cast<int32_t>(i % 4);  // 0 too
  int64_t expected = 0;  // targets of window w: tokens w*T+1 .. w*T+T
  std::vector<int32_t> in(T), tg(T);
  for (int64_t w = 0; w < 2; ++w) {
    dataset.fill_batch({w}, in.data(), tg.data());
    for (int32_t t : tg) expected += lengths[t];
  }
  const eval::PerplexityResult r = eval::evaluate_perplexity(model, dataset, 3, 2, 1024, {}, &lengths);
  CHECK(r.bytes == expected);
  CHECK(r.bits_per_byte() == Approx(r.ce_sum / std::log(2.0) / static_cast<double>(expected)));
  CHECK(eval::evaluate_perplexity(model, dataset, 3, 2).bytes == 0);
  const std::vector<int32_t> short_table(3, 1);
  CHECK_THROWS_WITH(eval::evaluate_perplexity(model, dataset, 3, 2, 1024, {}, &short_table),
                    Catch::Matchers::Contains("bytes-per-token table"));
}

TEST_CASE("eval: the shards' manifest and the bytes-per-token table are read or refused",
          "[eval]") {
  TempDir dir;
  const std::string shard = write_tokens(dir, "s.bin", 20, 50, 8);
  std::string path;
  CHECK(data::shards_manifest({shard}, &path).is_null());
  std::ofstream(dir.file("manifest.json")) << R"({"documents": 3, "token_bytes": "tb.json"})";
  const nlohmann::json manifest = data::shards_manifest({shard}, &path);
  CHECK(manifest["documents"] == 3);
  CHECK(fs::path(path).filename() == "manifest.json");
  fs::create_directories(dir.file("other"));
  const std::string elsewhere = write_tokens(dir, "other/t.bin", 20, 50, 9);
  CHECK(data::shards_manifest({shard, elsewhere}, &path).is_null());  // two directories

  std::ofstream(dir.file("tb.json")) << R"({"format": "kdtrain.token_bytes/1", "tokenizer_sha256": "ab", "bytes": [0, 1, 3]})";
  const data::TokenBytes t = data::read_token_bytes(dir.file("tb.json"));
  CHECK(t.bytes == std::vector<int32_t>{0, 1, 3});
  CHECK(t.tokenizer_sha256 == "ab");
  std::ofstream(dir.file("bad.json")) << R"({"format": "kdtrain.token_bytes/1", "bytes": [2, -1]})";
  CHECK_THROWS_WITH(data::read_token_bytes(dir.file("bad.json")),
                    Catch::Matchers::Contains("bad.json") && Catch::Matchers::Contains("token 1"));
  std::ofstream(dir.file("other.json")) << R"({"bytes": [1]})";
  CHECK_THROWS_WITH(data::read_token_bytes(dir.file("other.json")),
                    Catch::Matchers::Contains("kdtrain.token_bytes/1"));
}

TEST_CASE_METHOD(EvalFixture, "eval: a checkpoint or a run directory resolves to the model", "[eval]") {
  AttentionConfig attention;
  attention.variant = AttentionVariant::sink;
  const ParamLayout layout = make_param_layout(m, attention);
  const std::vector<float> params = init_params(layout, m, attention, 4);
  const std::string ckpt = dir.file("run/checkpoints/step_00000010");
  fs::create_directories(dir.file("run/checkpoints"));
  io::write_model_checkpoint(ckpt, m, attention, layout, params.data());
  {
    std::ofstream latest(dir.file("run/checkpoints/latest"));
    latest << "step_00000010\n";
  }
  CHECK(eval::resolve_model_dir(ckpt) == ckpt);
  CHECK(fs::path(eval::resolve_model_dir(dir.file("run"))) == fs::path(ckpt));
  auto model = eval::load_model_for_eval(dir.file("run"), *backend);
  CHECK(model->attention().variant == AttentionVariant::sink);
  CHECK(model->get_params() == params);
  CHECK_THROWS_WITH(eval::resolve_model_dir(dir.file("nothing")),
                    Catch::Matchers::Equals("no such file or directory: " + dir.file("nothing")));
  fs::create_directories(dir.file("empty"));
  CHECK_THROWS_WITH(eval::resolve_model_dir(dir.file("empty")),
                    Catch::Matchers::Contains("neither a model checkpoint"));
}

TEST_CASE_METHOD(EvalFixture, "eval: bad arguments are refused", "[eval]") {
  Model model(m, AttentionConfig{}, *backend, ModelUse::frozen);
  const std::string shard = write_tokens(dir, "a.bin", 20, m.vocab_size, 5);
  const data::TokenDataset dataset({shard}, 8, m.vocab_size);
  CHECK_THROWS_WITH(eval::evaluate_perplexity(model, dataset, 0, 0),
                    Catch::Matchers::Contains("batch size"));
}
