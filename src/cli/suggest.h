// "Did you mean ...?" for misspelled subcommands and flags (`kdtrain trian`,
// `train --confg`): CLI11 alone says "A subcommand is required" or "arguments
// were not expected", which hides the typo.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/nearest.h"

namespace kdtrain::cli {

using kdtrain::edit_distance;  // core/nearest.h
using kdtrain::nearest;

// Walks argv against the app's subcommands and options: for the first unknown
// subcommand or --flag, the error to print instead of CLI11's (naming the
// nearest known spelling and the command's --help); "" when every word is known.
std::string explain_unknown_argument(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace kdtrain::cli
