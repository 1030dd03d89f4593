#include "cli/commands.h"
#include "config/attention_variant.h"
#include "core/paths.h"
#include "io/output_dir.h"

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

CLI::Option* add_output_file_option(CLI::App& command, const std::string& name, std::string& path,
                                    const std::string& help) {
  return command.add_option(name, path, help)
      ->transform(normal_path_option())
      ->check(CLI::Validator(
          [name](std::string& value) {
            io::claim_output_file(value, name);
            return std::string();
          },
          "", ""));
}

void add_common_options(CLI::App& command, CommonOptions& options) {
  command.add_option("--config", options.config_path, "JSON config file")->transform(normal_path_option());
  command.add_option("--preset", options.preset, "model preset (model.preset; kdtrain info --presets lists them)");
  command.add_option("--attention", options.attention, variant_help())->check(one_of<AttentionVariant>());
  command.add_option("--set", options.overrides, "override a config key: section.key=value")
      ->take_all()
      ->allow_extra_args(false);
}

}  // namespace kdtrain::cli
