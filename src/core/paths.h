// One spelling per path. `runs/a/checkpoints/step_8/`, `./runs/a/checkpoints/step_8`
// and `runs//a/checkpoints/step_8` name one checkpoint; code that reads a
// path's last component (a step number, a run directory two levels up) must
// see the same one for all three. Every path a user gives (the CLI's path
// options) and every path the library is handed at an entry point goes
// through normal_path once.
#pragma once
#include <string>

namespace kdtrain {

// Lexically normal (no `.`, no `x/..`, no repeated `/`), without a trailing
// `/` (except the root itself). "" stays "". Does not touch the file system.
std::string normal_path(const std::string& path);

// True when a and b name the same existing file or directory (same device and
// inode), or, when either does not exist, have the same normal absolute spelling.
bool same_file(const std::string& a, const std::string& b);

}  // namespace kdtrain
