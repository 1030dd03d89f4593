// The variant's per-model state (model/variant_state.h): the end of a step adds
// the alpha sums over the ranks in one all-reduce and moves alpha_ma toward
// their mean; a skipped step leaves alpha_ma but still takes (and resets) the
// sums; variants without alpha ask nothing of the communicator.
#include <catch2/catch.hpp>

#include <cmath>

#include "dist/communicator.h"
#include "model/init.h"
#include "model/model.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

// `world` ranks that all hold the same values: an all-reduce multiplies by world.
class MirroredRanks final : public dist::SingleCommunicator {
 public:
  explicit MirroredRanks(int world) : world_(world) {}
  int world() const override { return world_; }
  bool distributed() const override { return true; }
  void all_reduce_sum_host(double* data, int64_t n) override {
    sizes.push_back(n);
    for (int64_t i = 0; i < n; ++i) data[i] *= world_;
  }
  std::vector<int64_t> sizes;  // one entry per all-reduce

 private:
  int world_;
};

struct AffineModel {
  ModelConfig m = llama_like();
  AttentionConfig a;
  std::unique_ptr<Backend> backend = make_backend(Device::cpu, 1);
  std::unique_ptr<Model> model;
  // rho: attention.alpha_momentum, which the model's variant state reads itself.
  explicit AffineModel(AttentionVariant v, double rho = 0.9) {
    a.variant = v;
    a.alpha_momentum = rho;
    model = std::make_unique<Model>(m, a, *backend, ModelUse::train);
    model->set_params(init_params(model->layout(), m, a, 3));
  }
  void forward() {
    const std::vector<int32_t> tokens = random_tokens(2 * 8, m.vocab_size, 11);
    model->forward(tokens.data(), 2, 8, true);
  }
};

}  // namespace

TEST_CASE("variant state: end_step reduces the alpha sums once and updates alpha_ma", "[model][variant_state]") {
  const double rho = 0.75;  // not the default: end_step must read the model's own
  AffineModel f(AttentionVariant::affine, rho);
  VariantState& state = f.model->variant();
  const int64_t LH = f.m.num_hidden_layers * f.m.num_attention_heads;
  std::vector<float> before(LH);
  for (int64_t i = 0; i < LH; ++i) before[i] = 0.1f * float(i % 5);
  state.set_alpha_ma(before);
  f.forward();
  // The reference: the same forward's sums, taken directly (alpha_ma enters
  // the next layers' inputs through beta, so the reference holds it too).
  AffineModel g(AttentionVariant::affine);
  g.model->variant().set_alpha_ma(before);
  g.forward();
  int64_t tokens = 0;
  const std::vector<double> sums = g.model->variant().take_alpha_sums(&tokens);
  REQUIRE(tokens == 16);

  MirroredRanks comm(2);
  const std::vector<double> mean = state.end_step(comm, true);
  CHECK(comm.sizes == std::vector<int64_t>{LH + 1});  // the sums and the token count, together
  REQUIRE(mean.size() == static_cast<size_t>(LH));
  const std::vector<float> after = state.alpha_ma();
  for (int64_t i = 0; i < LH; ++i) {
    // Two mirrored ranks double sums and tokens alike: the mean is one rank's.
    CHECK(mean[i] == Approx(sums[i] / tokens).epsilon(1e-12));
    CHECK(after[i] == static_cast<float>(rho * before[i] + (1.0 - rho) * mean[i]));
  }
  // The sums were taken: a step without a forward has none.
  int64_t left = -1;
  CHECK(state.take_alpha_sums(&left) == std::vector<double>(LH, 0.0));
  CHECK(left == 0);
}

TEST_CASE("variant state: a skipped step takes the sums but keeps alpha_ma", "[model][variant_state]") {
  AffineModel f(AttentionVariant::affine);
  VariantState& state = f.model->variant();
  const std::vector<float> before = state.alpha_ma();
  f.forward();
  MirroredRanks comm(2);
  CHECK(state.end_step(comm, false).empty());
  CHECK(comm.sizes.size() == 1);  // every rank still joins the all-reduce
  CHECK(state.alpha_ma() == before);
  int64_t left = -1;
  state.take_alpha_sums(&left);
  CHECK(left == 0);
}

TEST_CASE("variant state: variants without alpha ask nothing of the ranks", "[model][variant_state]") {
  for (AttentionVariant v : kAllVariants) {
    if (features_of(v).affine) continue;
    INFO(v);
    AffineModel f(v);
    f.forward();
    MirroredRanks comm(2);
    CHECK(f.model->variant().end_step(comm, true).empty());
    CHECK(comm.sizes.empty());
    CHECK(f.model->variant().alpha_ma().empty());
    CHECK(f.model->variant().sinks().size() == (features_of(v).sink ? size_t(f.m.num_hidden_layers * f.m.num_attention_heads) : 0));
  }
}
