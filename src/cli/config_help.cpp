#include "cli/config_help.h"

#include <algorithm>
#include <cstdio>

#include "config/config.h"

namespace kdtrain::cli {

namespace {

std::vector<HelpLine> help_lines(const std::vector<ConfigKey>& entries) {
  std::vector<HelpLine> lines;
  for (const ConfigKey& e : entries) lines.push_back({e.path, e.meaning});
  return lines;
}

void flatten_into(const nlohmann::json& node, const std::string& prefix,
                  std::vector<std::pair<std::string, nlohmann::json>>& out) {
  if (!node.is_object()) {
    out.emplace_back(prefix, node);
    return;
  }
  for (const auto& [key, value] : node.items())
    flatten_into(value, prefix.empty() ? key : prefix + "." + key, out);
}

// The meaning, then the values a key accepts where they say more than its type
// (a range, a bound, the choices); paths, booleans and the preset (listed below
// the table) need none.
std::string meaning_with_accepts(const ConfigKey& k) {
  const bool informative = k.type == "integer" || k.type == "number" || k.type == "choice";
  return informative ? k.meaning + "; accepts " + k.accepts : k.meaning;
}

}  // namespace

const std::vector<HelpLine>& config_sections() {
  static const std::vector<HelpLine> sections = help_lines(describe_config_sections());
  return sections;
}

const std::vector<HelpLine>& config_keys() {
  static const std::vector<HelpLine> keys = help_lines(describe_config_keys());
  return keys;
}

std::vector<std::pair<std::string, nlohmann::json>> flatten_config(const nlohmann::json& doc) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  flatten_into(doc, "", out);
  return out;
}

std::string config_key_table() {
  const std::vector<ConfigKey> keys = describe_config_keys();
  size_t key_width = 0, value_width = 0;
  for (const ConfigKey& k : keys) {
    key_width = std::max(key_width, k.path.size());
    value_width = std::max(value_width, k.default_value.dump().size());
  }
  auto row = [&](const std::string& key, const std::string& value, const std::string& meaning) {
    char buf[1024];
    std::snprintf(buf, sizeof buf, "%-*s  %-*s  %s\n", static_cast<int>(key_width), key.c_str(),
                  static_cast<int>(value_width), value.c_str(), meaning.c_str());
    return std::string(buf);
  };
  std::string text = row("key", "default", "meaning");
  for (const ConfigKey& k : keys) text += row(k.path, k.default_value.dump(), meaning_with_accepts(k));
  std::string presets;
  for (const std::string& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  text +=
      "\nPresets (model.preset, --preset): " + presets + ".\n"
      "Set any key in a JSON config file ({\"optimizer\": {\"lr\": 3e-4}}) or on the command line "
      "(--set optimizer.lr=3e-4).\nmodel.* defaults of 0 must be set, usually by model.preset or "
      "--preset. Types, ranges and the precedence of layers: docs/config.md.\n";
  return text;
}

std::string config_sections_text() {
  std::string text = "Config sections (JSON objects; set a key with --set section.key=value):\n";
  char buf[256];
  for (const HelpLine& s : config_sections()) {
    std::snprintf(buf, sizeof buf, "  %-11s %s\n", s.name.c_str(), s.meaning.c_str());
    text += buf;
  }
  text +=
      "Every key with its default and meaning: kdtrain config --list\n"
      "The config a command line resolves to:  kdtrain config --dump [--config F] [--set k=v ...]\n"
      "Types, ranges, precedence: docs/config.md";
  return text;
}

}  // namespace kdtrain::cli
