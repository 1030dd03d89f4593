// The one JSON parser for every JSON document kdtrain reads (configs, trainer
// state, Hugging Face config.json and shard index, safetensors headers,
// manifests). Stricter than nlohmann::json::parse in two ways that matter for
// "nothing silently wrong":
//   - a key that appears twice in one object is refused, naming its key path
//     and both lines (nlohmann keeps the last one, so an appended second
//     "train" section would silently replace the first);
//   - nesting deeper than kMaxJsonDepth is refused (no legitimate file nests
//     that deep, and deep documents make recursive consumers overflow);
//   - a NUL byte anywhere is refused (nlohmann stops reading at one, so a
//     second document hidden after it would go unseen), and so is anything but
//     whitespace after the document.
// Syntax errors name the line and column. Every error starts with `source`.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kdtrain {

constexpr size_t kMaxJsonDepth = 128;

nlohmann::json parse_json(std::string_view text, const std::string& source);

// What went wrong, for callers that word the error themselves.
enum class JsonProblem { none, syntax, duplicate_key, too_deep };
// parse_json without the throw: on failure returns the problem and sets *error
// (without a source prefix); *out is then unspecified.
JsonProblem try_parse_json(std::string_view text, nlohmann::json* out, std::string* error);

}  // namespace kdtrain
