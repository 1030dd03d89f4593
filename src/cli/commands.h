// Each subcommand lives in its own file and registers itself on the CLI11 app.
// A registration returns the callback state through CLI11's own callback.
#pragma once
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "config/choices.h"

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

// A numeric flag's range, checked when the command line is parsed, before
// anything is read or written: CLI11 names the flag, this the range. Refuses
// what CLI11's conversion lets through: NaN, a number beyond T (strtoll
// saturates) and a negative one for an unsigned T (strtoull wraps it).
template <typename T>
CLI::Validator in_range(T low, T high) {
  std::ostringstream range;
  range << "[" << low << ", " << high << "]";
  return CLI::Validator(
      [low, high, range = range.str()](std::string& input) {
        T value{};
        errno = 0;
        const bool read = CLI::detail::lexical_cast(input, value) && errno != ERANGE &&
                          !(std::is_unsigned<T>::value && input.find('-') != std::string::npos);
        if (read && low <= value && value <= high) return std::string();  // NaN fails both comparisons
        return "value " + input + " is not in " + range;
      },
      "in " + range.str(), "");
}

// A closed-choice flag (--device, --affine-n, --attention-forward): one of the
// config's spellings of E (config/choices.h), checked when the command line is parsed.
template <typename E>
CLI::Validator one_of() {
  return CLI::IsMember(choice_names<E>());
}

// A seed flag: any 64-bit unsigned value, as train.seed.
inline CLI::Validator seed_value() {
  return in_range<uint64_t>(0, std::numeric_limits<uint64_t>::max());
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
