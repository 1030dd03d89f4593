// Each subcommand lives in its own file and registers itself on the CLI11 app.
// A registration returns the callback state through CLI11's own callback.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kdtrain {
class TrainObserver;  // train/observer.h
}

namespace kdtrain::cli {

// Flags every model-facing subcommand accepts (--config, --preset, --attention, --set).
struct CommonOptions {
  std::string config_path;
  std::string preset;
  std::string attention;
  std::vector<std::string> overrides;
};
void add_common_options(CLI::App& command, CommonOptions& options);

// Every path option goes through this transform (core/paths.h normal_path): one
// spelling per path before any command sees it.
CLI::Validator normal_path_option();

// A file a command writes (eval --out, dump --out, data write --out): a path
// option whose value passes io::claim_output_file as soon as it is parsed,
// before anything runs. The caller adds the check against its inputs.
CLI::Option* add_output_file_option(CLI::App& command, const std::string& name, std::string& path,
                                    const std::string& help);

// A count flag's range, checked when the command line is parsed, before
// anything is read or written: CLI11 names the flag and the range.
template <typename T>
CLI::Validator in_range(T low, T high) {
  return CLI::Range(low, high);
}

// Every subcommand below, in the order `kdtrain --help` lists them; `observer`
// as register_train's.
void register_commands(CLI::App& app, TrainObserver* observer = nullptr);

void register_info(CLI::App& app);
void register_init(CLI::App& app);
void register_dump(CLI::App& app);
// `observer` (tests only: tests/e2e/probe/) is handed to every training run.
void register_train(CLI::App& app, TrainObserver* observer = nullptr);
void register_data(CLI::App& app);
void register_teacher_cache(CLI::App& app);
void register_eval(CLI::App& app);
void register_analyze(CLI::App& app);
void register_export(CLI::App& app);
void register_bench(CLI::App& app);
void register_config(CLI::App& app);
void register_verify(CLI::App& app);

}  // namespace kdtrain::cli
