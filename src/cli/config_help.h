// What each config section and key means, one line each, for `kdtrain config
// --list` and the footer of `train --help`: read from the config visitor
// (config/config_fields.h), where each key's meaning sits beside its field.
// docs/config.md holds the full tables (types, ranges, notes);
// tests/cli/test_cli_ux.cpp checks that this list, the keys to_json writes and the
// keys docs/config.md documents are the same.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kdtrain::cli {

struct HelpLine {
  std::string name;     // "optimizer" or "optimizer.lr"
  std::string meaning;  // one line
};

// The JSON sections in the order a config file and docs/config.md list them.
const std::vector<HelpLine>& config_sections();
// Every key as "section.key" (nested: "model.rope_scaling.factor").
const std::vector<HelpLine>& config_keys();

// A config JSON's leaves as ("section.key", value), sorted by key; lists
// (data.train) are leaves.
std::vector<std::pair<std::string, nlohmann::json>> flatten_config(const nlohmann::json& doc);

// The table `kdtrain config --list` prints: key, default, meaning (with the
// range or choices a key accepts).
std::string config_key_table();
// The sections, one line each, and where the rest is (the footer of train --help).
std::string config_sections_text();

}  // namespace kdtrain::cli
