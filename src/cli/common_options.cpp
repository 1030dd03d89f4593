#include "cli/commands.h"
#include "config/attention_variant.h"
#include "core/paths.h"

namespace kdtrain::cli {

namespace {

std::string variant_help() {
  std::string names;
  for (const AttentionVariantInfo& v : kAttentionVariants) names += (names.empty() ? "" : ", ") + std::string(v.name);
  return "attention variant: " + names;
}

}  // namespace

CLI::Validator normal_path_option() {
  return CLI::Validator(
      [](std::string& path) {
        path = normal_path(path);
        return std::string();
      },
      "", "");
}

void add_common_options(CLI::App& command, CommonOptions& options) {
  command.add_option("--config", options.config_path, "JSON config file")->transform(normal_path_option());
  command.add_option("--preset", options.preset, "model preset (model.preset; kdtrain info --presets lists them)");
  command.add_option("--attention", options.attention, variant_help());
  command.add_option("--set", options.overrides, "override a config key: section.key=value")
      ->take_all()
      ->allow_extra_args(false);
}

}  // namespace kdtrain::cli
