#include "cli/suggest.h"

#include <algorithm>

namespace kdtrain::cli {

int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const int limit = std::clamp(static_cast<int>(word.size()) / 3, 1, 3);
  std::string best;
  int best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

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
      const std::string near = nearest(flag, long_flags(chain));
      return where(chain) + "unknown option '" + flag + "'" +
             (near.empty() ? "" : "; did you mean '" + near + "'?") + " (see " + command_path(chain, true) +
             " --help)";
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
    const std::string near = nearest(arg, names);
    return where(chain) + "unknown command '" + arg + "'" +
           (near.empty() ? "" : "; did you mean '" + near + "'?") + " (commands: " + join(names) + ")";
  }
  return "";
}

}  // namespace kdtrain::cli
