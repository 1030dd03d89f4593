// Run configs: strict JSON (duplicate keys, nesting), every section and key,
// the cross-field checks, and a round trip: a config that is accepted must
// read back identically from its own resolved JSON.
#include <string>

#include "config/config.h"
#include "fuzz_util.h"
#include "core/json_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdtrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_kdtrain_errors([&] {
    Config config;
    apply_json(config, parse_json(text, "fuzz"), "fuzz");
    validate(config);
    Config again;
    apply_json(again, to_json(config), "round trip");
    if (to_json(again) != to_json(config)) std::abort();
  });
  // The same text as the value of a --set override.
  fuzz::expect_only_kdtrain_errors([&] {
    Config config;
    apply_override(config, "train." + text);
  });
  return 0;
}
