#include "model/init.h"

#include "core/rng.h"

namespace kdtrain {

std::vector<float> init_params(const ParamLayout& layout, const ModelConfig& model,
                               const AttentionConfig& attention, uint64_t seed) {
  std::vector<float> params(layout.total, 0.f);
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
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(std * rng.normal());
  }
  return params;
}

}  // namespace kdtrain
