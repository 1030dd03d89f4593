// kdtrain config: what can be configured, and what a command line resolves to.
//   kdtrain config --list                      every key, its default and meaning
//   kdtrain config --dump [--config F] [--preset P] [--attention V] [--set k=v ...]
//                                              the resolved config as JSON, nothing run
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/config_help.h"
#include "config/config.h"
#include "core/error.h"

namespace kdtrain::cli {

namespace {

struct ConfigFlags {
  CommonOptions common;
  bool list = false;
  bool dump = false;
};

void run_config(const ConfigFlags& f) {
  KD_CHECK(f.list != f.dump, "kdtrain config: give --list or --dump");
  if (f.list) {
    std::fputs(config_key_table().c_str(), stdout);
    return;
  }
  // Notices (a clamped warmup) go to stderr so stdout stays one JSON document.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kdtrain-config"));
  const Config config = load_config(f.common.config_path, f.common.preset, f.common.attention,
                                    f.common.overrides);
  std::printf("%s\n", to_json(config).dump(2).c_str());
}

}  // namespace

void register_config(CLI::App& app) {
  auto flags = std::make_shared<ConfigFlags>();
  auto* command = app.add_subcommand("config", "List the config keys, or print a resolved config");
  command->add_flag("--list", flags->list, "every config key with its default and meaning");
  command->add_flag("--dump", flags->dump,
                    "print the config --config/--preset/--attention/--set resolve to, as JSON "
                    "(the config.json a run directory would keep), without running anything");
  add_common_options(*command, flags->common);
  command->footer(config_sections_text());
  command->callback([flags] { run_config(*flags); });
}

}  // namespace kdtrain::cli
