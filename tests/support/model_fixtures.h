// Small hand-built model configs and helpers shared by the model-level tests,
// independent of the presets so a preset change cannot hide a model bug (built
// as presets are, from a layer shape and family traits: config/presets.h).
#pragma once
#include <cstdint>
#include <vector>

#include "config/config.h"
#include "config/presets.h"
#include "core/rng.h"

namespace kdtrain::testing {

// GQA, tied head, llama3 RoPE scaling with a short original context so the
// scaling changes frequencies, no bias; sizes deliberately not multiples of 8.
inline ModelConfig llama_like() {
  return make_model({ModelFamily::llama, /*vocab=*/61, /*max_pos=*/64, 1e-5, /*theta=*/500.0, {RopeScalingType::llama3, 4.0, 1.0, 4.0, 16},
                     /*tied=*/true, /*bias=*/false},
                    {36, 52, 2, 6, 2, 6});
}

// MHA, q/k/v bias, untied head.
inline ModelConfig qwen_like() {
  return make_model({ModelFamily::qwen2, /*vocab=*/53, /*max_pos=*/64, 1e-6, /*theta=*/1e6, RopeScaling{}, /*tied=*/false,
                     /*bias=*/true},
                    {30, 44, 2, 3, 3, 10});
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));
  return t;
}

inline constexpr auto kAllVariants = all_attention_variants();

}  // namespace kdtrain::testing
