// The strict JSON parser every JSON file goes through (core/json_parse.h), and
// what it must never accept: a NUL byte anywhere (nlohmann stops reading at
// one, so a second document could hide behind it) or anything but whitespace
// after the document. An accepted input reads back identically from its own
// dump; the same input followed by a NUL and a second document, or by any
// other trailing data, is refused.
#include <string>
#include <string_view>

#include "core/json_parse.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdtrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc, again;
  std::string error;
  if (try_parse_json(text, &doc, &error) != JsonProblem::none) return 0;
  if (text.find('\0') != std::string::npos) std::abort();  // a NUL was read past
  if (try_parse_json(doc.dump(), &again, &error) != JsonProblem::none || again.dump() != doc.dump()) std::abort();
  for (const std::string& tail : {std::string("\0{\"x\": 1}", 9), std::string("\0", 1), std::string(" x"),
                                  std::string("{}"), std::string("[1]")}) {
    if (try_parse_json(text + tail, &again, &error) == JsonProblem::none) std::abort();
  }
  return 0;
}
