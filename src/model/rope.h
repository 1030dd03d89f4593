// Rotary embedding tables as Hugging Face LLaMA builds them, including the
// "llama3" frequency scaling (long wavelengths divided by `factor`, a smooth
// blend between low_freq_factor and high_freq_factor).
#pragma once
#include <cstdint>
#include <vector>

#include "config/config.h"

namespace kdtrain {

// inv_freq (D/2) in double.
std::vector<double> rope_inverse_frequencies(const ModelConfig& model);
// cos and sin tables, each (T, D/2), row t = position t.
void rope_tables(const ModelConfig& model, int64_t T, std::vector<float>& cos,
                 std::vector<float>& sin);

}  // namespace kdtrain
