// The N an affine model divides its bias by in an evaluation call of T keys, as
// `kdtrain eval` and `kdtrain analyze` record it (docs/model.md, "The affine divisor
// at inference"): "i + 1" under `visible`, else the fixed training length or T.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "config/attention_variant.h"

namespace kdtrain::eval {

inline nlohmann::json affine_bias_n_json(const AttentionFeatures& f, int64_t T) {
  if (f.bias_divisor == AffineBiasDivisor::visible) return "i + 1";
  return f.bias_keys > 0 ? f.bias_keys : T;
}

}  // namespace kdtrain::eval
