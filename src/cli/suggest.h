// "Did you mean ...?" for misspelled subcommands and flags (`kdtrain trian`,
// `train --confg`): CLI11 alone says "A subcommand is required" or "arguments
// were not expected", which hides the typo.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kdtrain::cli {

// Edit distance counting insertions, deletions, substitutions and swaps of two
// adjacent characters (optimal string alignment).
int edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` when it is close enough to be a typo (at most
// a third of the word's length, at least 1, at most 3 edits), else "".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// Walks argv against the app's subcommands and options: for the first unknown
// subcommand or --flag, the error to print instead of CLI11's (naming the
// nearest known spelling and the command's --help); "" when every word is known.
std::string explain_unknown_argument(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace kdtrain::cli
