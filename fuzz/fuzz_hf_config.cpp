// Hugging Face config.json: families, optional keys and their defaults, rope
// scaling, the size limits, the parameter table it sizes, and a round trip
// through the config kdtrain itself writes.
#include <string>

#include "fuzz_util.h"
#include "io/checkpoint_format.h"
#include "core/json_parse.h"
#include "model/param_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdtrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_kdtrain_errors([&] {
    ModelConfig model;
    AttentionConfig attention;
    io::parse_hf_config(parse_json(text, "fuzz"), "fuzz", &model, &attention);
    const ParamLayout layout = make_param_layout(model, attention);
    (void)count_params(layout);
    ModelConfig again;
    AttentionConfig attention_again;
    io::parse_hf_config(io::hf_config_json(model, attention), "round trip", &again, &attention_again);
    if (io::hf_config_json(again, attention_again) != io::hf_config_json(model, attention)) std::abort();
  });
  return 0;
}
