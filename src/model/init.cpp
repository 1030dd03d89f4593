#include "model/init.h"

#include <algorithm>
#include <cmath>

#include "config/limits.h"
#include "core/error.h"
#include "core/rng.h"

namespace kdtrain {

std::vector<float> init_params(const ParamLayout& layout, const ModelConfig& model,
                               const AttentionConfig& attention, uint64_t seed) {
  std::vector<float> params = allocate_or_name(
      "the parameter arena", 4.0 * double(layout.total), model_size_keys(model),
      [&] { return std::vector<float>(static_cast<size_t>(layout.total), 0.f); });
  for (const ParamSpec& spec : layout.specs) {
    float* p = params.data() + spec.offset;
    const int64_t n = spec.numel();
    SplitMix64 rng(seed ^ hash_string(spec.name));
    double std = 0.0;
    switch (spec.role) {
      case ParamRole::norm:
        for (int64_t i = 0; i < n; ++i) p[i] = 1.f;
        continue;
      case ParamRole::bias:
      case ParamRole::buffer:
        continue;  // zeros
      case ParamRole::sink:
        std = attention.sink_init_std;
        break;
      case ParamRole::embedding:
      case ParamRole::matrix:
        std = model.initializer_range;
        break;
    }
    // Every core draws a block of the same sequence (normal() takes two next()),
    // so the values are bit-identical to a sequential draw: a 3B model in seconds.
    constexpr int64_t kBlock = int64_t(1) << 16;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      SplitMix64 block_rng = rng;
      block_rng.skip(2 * static_cast<uint64_t>(b * kBlock));
      const int64_t end = std::min(n, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < end; ++i) p[i] = static_cast<float>(std * block_rng.normal());
    }
    // A standard deviation near float's range overflows: never a model of infinities.
    for (int64_t i = 0; i < n; ++i)
      KD_CHECK(std::isfinite(p[i]), spec.role == ParamRole::sink ? "attention.sink_init_std" : "model.initializer_range",
               " = ", std, " draws a non-finite float32 value for tensor '", spec.name, "' (element ", i,
               "); choose a standard deviation far below 3.4e38 (typically 0.02)");
  }
  return params;
}

}  // namespace kdtrain
