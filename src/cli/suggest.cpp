#include "cli/suggest.h"

#include <algorithm>

namespace kdtrain::cli {

namespace {

// "kdtrain data write" (with_root) or "data write".
std::string command_path(const std::vector<const CLI::App*>& chain, bool with_root) {
  std::string path;
  for (const CLI::App* app : chain) {
    if (!app->get_parent() && !with_root) continue;
    const std::string name = app->get_parent() ? app->get_name() : "kdtrain";
    path += (path.empty() ? "" : " ") + name;
  }
  return path;
}

// "data write: " where the error comes from, "" at the top level (main() prefixes "kdtrain: error: ").
std::string where(const std::vector<const CLI::App*>& chain) {
  const std::string path = command_path(chain, false);
  return path.empty() ? "" : path + ": ";
}

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->check_name(name)) return sub;
  return nullptr;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> long_flags(const std::vector<const CLI::App*>& chain) {
  std::vector<std::string> flags;
  for (const CLI::App* app : chain)
    for (const CLI::Option* opt : app->get_options({}))
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
  return flags;
}

bool known_flag(const std::vector<const CLI::App*>& chain, const std::string& flag) {
  for (const CLI::App* app : chain)
    if (app->get_option_no_throw(flag) != nullptr) return true;
  return false;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace

std::string explain_unknown_argument(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<const CLI::App*> chain = {&app};
  bool options_end = false;
  for (const std::string& arg : args) {
    if (arg == "--") options_end = true;
    if (options_end) continue;
    const CLI::App& current = *chain.back();
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const std::string flag = arg.substr(0, arg.find('='));
      if (known_flag(chain, flag)) continue;
      return where(chain) + "unknown option '" + flag + "'" + did_you_mean(flag, long_flags(chain)) + " (see " +
             command_path(chain, true) + " --help)";
    }
    if (arg.empty() || arg[0] == '-') continue;
    // A bare word: a subcommand where the current command expects one, else a
    // value (options here take their values as separate words).
    const std::vector<std::string> names = subcommand_names(current);
    if (names.empty()) continue;
    if (const CLI::App* sub = find_subcommand(current, arg); sub != nullptr) {
      chain.push_back(sub);
      continue;
    }
    if (current.get_require_subcommand_min() == 0) continue;
    return where(chain) + "unknown command '" + arg + "'" + did_you_mean(arg, names) + " (commands: " +
           join(names) + ")";
  }
  return "";
}

}  // namespace kdtrain::cli
