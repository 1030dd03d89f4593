// The nearest known spelling of a misspelled name, for "did you mean" in
// errors: commands and flags (cli/suggest.h), preset names (config/presets.cpp).
#pragma once
#include <string>
#include <vector>

namespace kdtrain {

// Edit distance counting insertions, deletions, substitutions and swaps of two
// adjacent characters (optimal string alignment).
int edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` when it is close enough to be a typo (at most
// a third of the word's length, at least 1, at most 3 edits), else "".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// "; did you mean 'train'?" naming nearest(word, candidates), or "" when none is near.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace kdtrain
