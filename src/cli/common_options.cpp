#include "cli/commands.h"

namespace kdtrain::cli {

void add_common_options(CLI::App& command, CommonOptions& options) {
  command.add_option("--config", options.config_path, "JSON config file");
  command.add_option("--preset", options.preset, "model preset (model.preset)");
  command.add_option("--attention", options.attention,
                     "attention variant: baseline, sink, affine, gated, affine-gated");
  command.add_option("--set", options.overrides, "override a config key: section.key=value")
      ->take_all()
      ->allow_extra_args(false);
}

}  // namespace kdtrain::cli
