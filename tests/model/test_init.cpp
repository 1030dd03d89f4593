// init_params draws in parallel blocks (SplitMix64::skip): the values must be the
// very sequence one thread draws, for any thread count, so initialisations stay
// reproducible across machines and with the code before the parallel draw.
#include <omp.h>

#include <catch2/catch.hpp>

#include "core/rng.h"
#include "model/init.h"
#include "support/model_fixtures.h"

using namespace kdtrain;

TEST_CASE("init_params: same bits for 1 and 2 threads, equal to a sequential draw", "[init]") {
  ModelConfig m = testing::llama_like();
  m.vocab_size = 40000;  // an embedding of 1.44M values: many parallel blocks
  AttentionConfig a;
  a.variant = AttentionVariant::sink;
  const ParamLayout layout = make_param_layout(m, a);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = init_params(layout, m, a, 77);
  omp_set_num_threads(2);
  const std::vector<float> two = init_params(layout, m, a, 77);
  omp_set_num_threads(saved);
  CHECK(one == two);
  const ParamSpec* embed = layout.find("model.embed_tokens.weight");
  REQUIRE(embed != nullptr);
  SplitMix64 rng(77 ^ hash_string(embed->name));
  bool sequential = true;
  for (int64_t i = 0; i < embed->numel(); ++i)
    sequential = sequential && one[embed->offset + i] ==
                                   static_cast<float>(m.initializer_range * rng.normal());
  CHECK(sequential);
}
