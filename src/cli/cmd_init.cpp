// kdtrain init: write a freshly initialised model checkpoint (docs/model.md).
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/output_dir.h"
#include "model/init.h"
#include "model/param_layout.h"

namespace kdtrain::cli {

namespace {
struct InitFlags {
  CommonOptions common;
  uint64_t seed = 1234;
  bool seed_given = false;
  std::string out;
  bool force = false;
};
}  // namespace

void register_init(CLI::App& app) {
  auto flags = std::make_shared<InitFlags>();
  auto* command = app.add_subcommand("init", "Write a freshly initialised model checkpoint");
  add_common_options(*command, flags->common);
  command->add_option("--seed", flags->seed, "initialisation seed (default train.seed)")->check(seed_value());
  command->add_option("--out", flags->out, "checkpoint directory to write")->required()->transform(normal_path_option());
  command->add_flag("--force", flags->force,
                    "replace --out when it holds an earlier `kdtrain init` output (nothing else)");
  command->callback([flags, command] {
    // Checked before the config: a wrong --out is the costliest mistake here.
    io::claim_output_dir(flags->out, {"--out", {}, flags->force, "init"});
    Config config = load_config(flags->common.config_path, flags->common.preset,
                                flags->common.attention, flags->common.overrides);
    const uint64_t seed = command->count("--seed") ? flags->seed : config.train.seed;
    const ParamLayout layout = make_param_layout(config.model, config.attention);
    const std::vector<float> params = init_params(layout, config.model, config.attention, seed);
    io::write_model_checkpoint(flags->out, config.model, config.attention, layout, params.data(), "init");
    std::printf("wrote %s: %s, attention %s, %.3fM parameters, seed %llu\n", flags->out.c_str(),
                config.model.preset.empty() ? "custom model" : config.model.preset.c_str(),
                to_string(config.attention.variant), layout.trainable_count() / 1e6,
                static_cast<unsigned long long>(seed));
  });
}

}  // namespace kdtrain::cli
