// kdtrain train: resolve the config, pick the run directory, run the loop.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/config_help.h"
#include "core/error.h"
#include "core/paths.h"
#include "io/output_dir.h"
#include "train/training_checkpoint.h"
#include "train/run_lock.h"
#include "train/trainer.h"

namespace kdtrain::cli {

namespace fs = std::filesystem;

namespace {

struct TrainFlags {
  CommonOptions common;
  std::string run_dir;
  std::string resume;
  TrainObserver* observer = nullptr;
  bool allow_config_change = false;
  bool rewind = false;
};

std::string default_run_dir(const Config& config, const std::string& config_path) {
  std::string stem = !config_path.empty() ? fs::path(config_path).stem().string()
                     : !config.model.preset.empty() ? config.model.preset : "run";
  return (fs::path("runs") / (stem + "-" + to_string(config.attention.variant))).string();
}

void run_train(const TrainFlags& flags) {
  TrainOptions options;
  options.resume = flags.resume;
  options.config_path = flags.common.config_path;
  options.observer = flags.observer;
  options.allow_config_change = flags.allow_config_change;
  options.rewind = flags.rewind;
  KD_CHECK(!flags.resume.empty() || !(flags.allow_config_change || flags.rewind),
           "--allow-config-change and --rewind go with --resume");
  std::string config_path = flags.common.config_path;
  if (!flags.resume.empty()) {
    // A resumed run reads its own resolved config unless one is given.
    const std::string own_run = run_dir_of(flags.resume);
    options.run_dir = flags.run_dir.empty() ? own_run : flags.run_dir;
    io::claim_run_dir(options.run_dir,
                      same_file(options.run_dir, own_run) ? io::RunClaim::resume_own : io::RunClaim::resume_branch,
                      flags.resume);
    // A checkpoint resumed into a new --run-dir (say, on another number of ranks)
    // falls back to the checkpoint's own resolved config.
    if (config_path.empty()) {
      config_path = (fs::path(options.run_dir) / "config.json").string();
      const fs::path own = fs::path(flags.resume) / "run_config.json";
      if (!fs::exists(config_path) && fs::exists(own)) config_path = own.string();
    }
  }
  Config config = load_config(config_path, flags.common.preset, flags.common.attention,
                              flags.common.overrides);
  if (flags.resume.empty()) {
    options.run_dir = flags.run_dir.empty() ? default_run_dir(config, config_path) : flags.run_dir;
    io::claim_run_dir(options.run_dir, io::RunClaim::new_run, "");
    // A run directory another process is using is reported as busy, naming the
    // holder, before anything else is said about its contents.
    if (fs::exists(options.run_dir)) RunLock probe(options.run_dir);
    // Any checkpoint, not only one `latest` names: a run killed after its first
    // checkpoint and before `latest` has only step_<N> (docs/reliability.md).
    const std::string newest = newest_checkpoint_name(options.run_dir);
    KD_CHECK(newest.empty(), "--run-dir ", options.run_dir, " already holds a run with checkpoints (", newest,
             "); pass --resume ", options.run_dir, " to continue it or choose another --run-dir");
  }
  train(config, options);
}

}  // namespace

void register_train(CLI::App& app, TrainObserver* observer) {
  auto flags = std::make_shared<TrainFlags>();
  flags->observer = observer;
  auto* command = app.add_subcommand(
      "train", "Train a student (optionally distilled from a teacher) from a JSON config");
  add_common_options(*command, flags->common);
  command->add_option("--run-dir", flags->run_dir,
                      "run directory (default runs/<config or preset>-<variant>)")
      ->transform(normal_path_option());
  command->add_option("--resume", flags->resume,
                      "continue a run: its directory or one of its checkpoint directories")
      ->transform(normal_path_option());
  command->add_flag("--allow-config-change", flags->allow_config_change,
                    "with --resume: continue even though keys that change the trajectory (optimizer, "
                    "schedule, batch, seed, model, teacher, ...) differ from the checkpoint's");
  command->add_flag("--rewind", flags->rewind,
                    "with --resume of a checkpoint older than the run's latest: continue from it, "
                    "deleting the run's newer checkpoints and metrics");
  command->footer(config_sections_text());
  command->callback([flags] { run_train(*flags); });
}

}  // namespace kdtrain::cli
